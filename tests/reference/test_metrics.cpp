// Metrics (reference/SPEC.md 8) on hand-computed cases.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "reference/metrics.hpp"

using namespace fp8moe;

TEST_CASE("SQNR, relative error and max abs error on a hand-computed case") {
  const std::vector<double> ref{3.0, 4.0, 0.0}, x{3.0, 3.0, 0.5};
  // ||ref|| = 5, ||ref - x|| = sqrt(1 + 0.25) -> SQNR = 20 log10(5 / 1.118...) = 13.0103 dB
  const Metrics m = compare(ref, x);
  CHECK(m.sqnr_db == doctest::Approx(20.0 * std::log10(5.0 / std::sqrt(1.25))).epsilon(1e-12));
  CHECK(m.rel_err == doctest::Approx(std::sqrt(1.25) / 5.0).epsilon(1e-12));
  CHECK(m.max_abs_err == 1.0);
  CHECK(m.bitwise_equal_frac == doctest::Approx(1.0 / 3.0));
  CHECK(m.nonfinite == 0);
}

TEST_CASE("equal tensors give +inf SQNR: non-finite values give NaN that fails every floor") {
  const std::vector<double> ref{1.0, -2.0, 0.25};
  CHECK(std::isinf(compare(ref, ref).sqnr_db));
  CHECK(compare(ref, ref).sqnr_db > 0);
  const std::vector<double> bad{1.0, NAN, 0.25};
  const Metrics m = compare(ref, bad);
  CHECK(std::isnan(m.sqnr_db));
  CHECK_FALSE(m.sqnr_db >= 20.0);
  CHECK(m.nonfinite == 1);
  const std::vector<double> inf{1.0, INFINITY, 0.25};
  CHECK(std::isnan(compare(ref, inf).sqnr_db));
  CHECK(std::isnan(compare(inf, ref).sqnr_db));  // a poisoned reference is no truth either
}

TEST_CASE("bf16 ULP distance counts representable values between") {
  const float one = 1.0f;
  const float next = bf16_to_f32(static_cast<std::uint16_t>(bf16_bits_rne(one) + 1));
  CHECK(bf16_ulp_distance(one, one) == 0);
  CHECK(bf16_ulp_distance(one, next) == 1);
  CHECK(bf16_ulp_distance(-0.0f, 0.0f) == 0);
  // across zero: smallest positive and smallest negative subnormal are 2 apart
  const float tiny = bf16_to_f32(1), ntiny = bf16_to_f32(0x8001);
  CHECK(bf16_ulp_distance(tiny, ntiny) == 2);
  CHECK(compare(std::vector<double>{1.0}, std::vector<double>{static_cast<double>(next)}).max_ulp == 1.0);
}

TEST_CASE("bitwise equality distinguishes signed zeros and sizes must match") {
  CHECK(compare(std::vector<double>{0.0}, std::vector<double>{-0.0}).bitwise_equal_frac == 0.0);
  CHECK_THROWS_AS(compare(std::vector<double>{1.0}, std::vector<double>{1.0, 2.0}), Error);
}
