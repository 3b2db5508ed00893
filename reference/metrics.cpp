#include "reference/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

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
  // The fp64 sums are taken over fixed chunks in parallel and the chunk sums added in chunk order,
  // so the metrics are bitwise the same for any thread count (a machine with 16 cores gives the
  // numbers one with 2 gave; an OpenMP reduction's order would follow the thread count).
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t n = m.count, chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> ref2_c(static_cast<std::size_t>(chunks), 0.0), err2_c(static_cast<std::size_t>(chunks), 0.0);
  double max_abs = 0, max_ulp = 0;
  std::int64_t equal = 0, nonfinite = 0, ref_nonfinite = 0;
#pragma omp parallel for schedule(static) reduction(+ : equal, nonfinite, ref_nonfinite) reduction(max : max_abs, max_ulp)
  for (std::int64_t c = 0; c < chunks; ++c) {
    double r2 = 0, e2 = 0;
    const std::int64_t end = std::min(n, (c + 1) * kChunk);
    for (std::int64_t i = c * kChunk; i < end; ++i) {
      const double r = ref[static_cast<std::size_t>(i)], v = x[static_cast<std::size_t>(i)];
      if (!std::isfinite(v)) ++nonfinite;
      if (!std::isfinite(r)) ++ref_nonfinite;
      if (std::isfinite(v) && std::isfinite(r)) {
        const double d = r - v;
        r2 += r * r;
        e2 += d * d;
        max_abs = std::fmax(max_abs, std::fabs(d));
        max_ulp = std::fmax(max_ulp, static_cast<double>(bf16_ulp_distance(static_cast<float>(r), static_cast<float>(v))));
      }
      if (f64_bits(r) == f64_bits(v) || (std::isnan(r) && std::isnan(v))) ++equal;
    }
    ref2_c[static_cast<std::size_t>(c)] = r2;
    err2_c[static_cast<std::size_t>(c)] = e2;
  }
  double ref2 = 0, err2 = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    ref2 += ref2_c[static_cast<std::size_t>(c)];
    err2 += err2_c[static_cast<std::size_t>(c)];
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
