#include "reference/metrics.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "reference/error.hpp"
#include "reference/formats.hpp"

namespace fp8moe {

std::int64_t bf16_ulp_distance(float a, float b) {
  auto ord = [](float v) {
    const std::int32_t u = bf16_bits_rne(v);
    return (u & 0x8000) ? -(u & 0x7fff) : u;  // sign-magnitude to a monotone line; -0 == +0
  };
  return std::llabs(static_cast<long long>(ord(a)) - ord(b));
}

Metrics compare(std::span<const double> ref, std::span<const double> x) {
  if (ref.size() != x.size()) fail("compare: reference has ", ref.size(), " elements but the result has ", x.size());
  Metrics m;
  m.count = static_cast<std::int64_t>(x.size());
  double ref2 = 0, err2 = 0, max_abs = 0, max_ulp = 0;
  std::int64_t equal = 0, nonfinite = 0, ref_nonfinite = 0;
  const std::int64_t n = m.count;
#pragma omp parallel for reduction(+ : ref2, err2, equal, nonfinite, ref_nonfinite) reduction(max : max_abs, max_ulp)
  for (std::int64_t i = 0; i < n; ++i) {
    const double r = ref[static_cast<std::size_t>(i)], v = x[static_cast<std::size_t>(i)];
    if (!std::isfinite(v)) ++nonfinite;
    if (!std::isfinite(r)) ++ref_nonfinite;
    if (std::isfinite(v) && std::isfinite(r)) {
      const double d = r - v;
      ref2 += r * r;
      err2 += d * d;
      max_abs = std::fmax(max_abs, std::fabs(d));
      max_ulp = std::fmax(max_ulp, static_cast<double>(bf16_ulp_distance(static_cast<float>(r), static_cast<float>(v))));
    }
    if (f64_bits(r) == f64_bits(v) || (std::isnan(r) && std::isnan(v))) ++equal;
  }
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const bool poisoned = nonfinite > 0 || ref_nonfinite > 0;
  m.nonfinite = nonfinite;
  m.bitwise_equal_frac = n ? static_cast<double>(equal) / static_cast<double>(n) : 1.0;
  m.max_abs_err = poisoned ? kNaN : max_abs;
  m.max_ulp = poisoned ? kNaN : max_ulp;
  m.rel_err = poisoned ? kNaN : (ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? kNaN : 0.0));
  if (poisoned) {
    m.sqnr_db = kNaN;
  } else if (err2 == 0) {
    m.sqnr_db = std::numeric_limits<double>::infinity();
  } else {
    m.sqnr_db = 10.0 * std::log10(ref2 / err2);
  }
  return m;
}

double sqnr_db(std::span<const double> ref, std::span<const double> x) { return compare(ref, x).sqnr_db; }

}  // namespace fp8moe
