// Hand-derived tables for the FP8 and bf16 codecs of reference/formats.hpp (reference/SPEC.md 2), and
// round_bf16(double) against an exact integer rounding written here.
//
// Code layouts: e4m3fn = S EEEE MMM, bias 7, value 2^(E-7) (1 + M/8), subnormal (E=0) M 2^-9,
// 0x7f/0xff NaN, no infinity. e5m2 = S EEEEE MM, bias 15, value 2^(E-15) (1 + M/4), subnormal
// M 2^-16, E=31: M=0 infinity, else NaN.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "reference/formats.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;

float fbits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = fbits(0x7fc00000u);
const float kNegNaN = fbits(0xffc00000u);

struct Row {
  float x;
  unsigned expect;
  const char* why;
};

void check_table(const Row* rows, std::size_t n, Fp8Format f, Overflow p) {
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(rows[i].why);
    CAPTURE(rows[i].x);
    CHECK(static_cast<unsigned>(fp8_encode(rows[i].x, f, p)) == rows[i].expect);
  }
}

TEST_CASE("e4m3fn torch policy (c10 cast): hand-derived codes") {
  // In [256, 512) E = 15 and the step is 2^8/8 = 32: neighbours 416 (M=5), 448 (M=6), 480 (M=7).
  // 480 = 1.875 * 2^8 would be 0 1111 111 = 0x7f, which e4m3fn reserves for NaN.
  const Row rows[] = {
      {447.0f, 0x7e, "447: nearest 448 = 2^8*1.75 -> 0 1111 110"},
      {448.0f, 0x7e, "448 exact: max finite"},
      {456.0f, 0x7e, "456: not a tie (448 is 8 away, 480 is 24): 448"},
      {464.0f, 0x7e, "464: tie 448 (M=6 even) / 480 (M=7): even -> 448"},
      {465.0f, 0x7f, "465: nearer 480 -> M=7 -> the NaN code (c10 has no saturation)"},
      {479.99f, 0x7f, "479.99: below c10's 480 threshold, RNE to 480 -> 0x7f"},
      {480.0f, 0x7f, "480: c10 threshold |x| >= 480 -> 0x7f"},
      {1e6f, 0x7f, "1e6 >= 480 -> 0x7f"},
      {kInf, 0x7f, "+Inf -> 0x7f"},
      {-kInf, 0xff, "-Inf -> 0x7f | sign"},
      {kNaN, 0x7f, "NaN -> 0x7f"},
      {kNegNaN, 0xff, "-NaN -> 0x7f | sign"},
      {-464.0f, 0xfe, "-464: tie to even, sign kept"},
      {0x1p-6f, 0x08, "2^-6: min normal 0 0001 000"},
      {0x1p-9f, 0x01, "2^-9: min subnormal M=1"},
      {0x1p-10f, 0x00, "2^-10: tie 0 (even) / 2^-9 -> 0"},
      {0x3p-10f, 0x02, "3*2^-10 = 1.5 units of 2^-9: tie M=1 / M=2 -> even M=2"},
      {0x1p-7f * 1.0625f, 0x04, "2^-7*1.0625 = 4.25 units of 2^-9 -> M=4 (subnormal)"},
      {-0.0f, 0x80, "-0 -> sign only"},
      {0.0f, 0x00, "+0"},
  };
  check_table(rows, std::size(rows), Fp8Format::e4m3, Overflow::torch);
}

TEST_CASE("e5m2 torch policy (c10 cast): hand-derived codes") {
  // In [32768, 65536) E = 30 and the step is 2^15/4 = 8192: 57344 = 1.75 * 2^15 = 0 11110 11.
  const Row rows[] = {
      {57344.0f, 0x7b, "57344 = 2^15*1.75 -> 0 11110 11: max finite"},
      {61439.0f, 0x7b, "61439: below the midpoint 61440 -> 57344"},
      {61440.0f, 0x7c, "61440: tie 57344 (M=3 odd) / 65536 -> even = 2^16 = Inf 0 11111 00"},
      {65536.0f, 0x7c, "65536: c10 threshold -> Inf"},
      {kInf, 0x7c, "+Inf"},
      {-kInf, 0xfc, "-Inf"},
      {kNaN, 0x7f, "NaN -> 0x7f"},
      {kNegNaN, 0xff, "-NaN -> 0x7f | sign"},
      {0x1p-14f, 0x04, "2^-14: min normal 0 00001 00"},
      {0x1p-16f, 0x01, "2^-16: min subnormal M=1"},
      {0x1p-17f, 0x00, "2^-17: tie 0 (even) / 2^-16 -> 0"},
      {0x3p-17f, 0x02, "3*2^-17: tie M=1 / M=2 -> even M=2"},
      {-0.0f, 0x80, "-0"},
  };
  check_table(rows, std::size(rows), Fp8Format::e5m2, Overflow::torch);
}

TEST_CASE("satfinite policy (CUDA __NV_SATFINITE): clamps to +-max, NaN -> 0x7f") {
  const Row e4m3[] = {
      {464.0f, 0x7e, "tie to 448"}, {465.0f, 0x7e, "rounds to 480: clamps to 448"},
      {480.0f, 0x7e, "clamps"},     {1e6f, 0x7e, "clamps"},
      {kInf, 0x7e, "Inf clamps"},   {-kInf, 0xfe, "-Inf clamps to -448"},
      {kNaN, 0x7f, "NaN"},          {kNegNaN, 0x7f, "-NaN: sign dropped (CUDA)"},
      {0x1p-10f, 0x00, "tie to 0"}, {0x3p-10f, 0x02, "tie to even"},
  };
  check_table(e4m3, std::size(e4m3), Fp8Format::e4m3, Overflow::satfinite);
  const Row e5m2[] = {
      {61440.0f, 0x7b, "tie rounds to 65536: clamps to 57344"}, {65536.0f, 0x7b, "clamps"},
      {kInf, 0x7b, "Inf clamps"},                               {-kInf, 0xfb, "-Inf clamps"},
      {kNaN, 0x7f, "NaN"},                                      {kNegNaN, 0x7f, "-NaN: sign dropped"},
  };
  check_table(e5m2, std::size(e5m2), Fp8Format::e5m2, Overflow::satfinite);
}

TEST_CASE("fp8_decode: hand-derived values") {
  CHECK(fp8_decode(0x7e, Fp8Format::e4m3) == 448.0f);
  CHECK(fp8_decode(0xfe, Fp8Format::e4m3) == -448.0f);
  CHECK(fp8_decode(0x01, Fp8Format::e4m3) == 0x1p-9f);
  CHECK(fp8_decode(0x07, Fp8Format::e4m3) == 0x7p-9f);
  CHECK(fp8_decode(0x08, Fp8Format::e4m3) == 0x1p-6f);
  CHECK(fp8_decode(0x38, Fp8Format::e4m3) == 1.0f);
  CHECK(std::isnan(fp8_decode(0x7f, Fp8Format::e4m3)));
  CHECK(std::isnan(fp8_decode(0xff, Fp8Format::e4m3)));
  CHECK(bits_of(fp8_decode(0x80, Fp8Format::e4m3)) == 0x80000000u);
  CHECK(fp8_decode(0x7b, Fp8Format::e5m2) == 57344.0f);
  CHECK(fp8_decode(0x01, Fp8Format::e5m2) == 0x1p-16f);
  CHECK(fp8_decode(0x3c, Fp8Format::e5m2) == 1.0f);
  CHECK(fp8_decode(0x7c, Fp8Format::e5m2) == kInf);
  CHECK(fp8_decode(0xfc, Fp8Format::e5m2) == -kInf);
  for (unsigned c : {0x7du, 0x7eu, 0x7fu, 0xfdu, 0xfeu, 0xffu}) CHECK(std::isnan(fp8_decode(static_cast<std::uint8_t>(c), Fp8Format::e5m2)));
}

TEST_CASE("bf16_bits_rne: ties to even, overflow, subnormals, NaN preserved") {
  struct B {
    std::uint32_t in;
    std::uint16_t out;
    const char* why;
  };
  const B rows[] = {
      {0x3f808000u, 0x3f80, "1+2^-8: tie, 0x3f80 even stays"},
      {0x3f818000u, 0x3f82, "1+3*2^-8: tie, 0x3f81 odd rounds up"},
      {0x3f808001u, 0x3f81, "just above the tie"},
      {0x3f807fffu, 0x3f80, "just below the tie"},
      {0xbf818000u, 0xbf82, "negative tie to even"},
      {0x7f7f7fffu, 0x7f7f, "just below max + half ulp: max"},
      {0x7f7f8000u, 0x7f80, "max + half ulp: tie, 0x7f7f odd -> Inf"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX -> Inf"},
      {0x00008000u, 0x0000, "subnormal tie to even 0"},
      {0x00018000u, 0x0002, "subnormal tie to even 2"},
      {0x80000000u, 0x8000, "-0"},
      {0x7f800000u, 0x7f80, "+Inf"},
      {0xff800000u, 0xff80, "-Inf"},
  };
  for (const B& r : rows) {
    CAPTURE(r.why);
    CHECK(bf16_bits_rne(fbits(r.in)) == r.out);
  }
  // NaNs, including payloads only in the low 16 bits (truncation would make them Inf) and the
  // all-ones pattern (rounding would carry into the sign).
  for (std::uint32_t n : {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffffffffu}) {
    CAPTURE(n);
    const std::uint16_t b = bf16_bits_rne(fbits(n));
    CHECK((b & 0x7f80u) == 0x7f80u);
    CHECK((b & 0x7fu) != 0u);
    CHECK(std::isnan(round_bf16(fbits(n))));
    CHECK(std::isnan(round_bf16(static_cast<double>(fbits(n)))));
  }
}

// Exact bf16 rounding of a double by integer arithmetic on its 53-bit significand: |x| = S 2^(e-53)
// with S in [2^52, 2^53); bf16 keeps 8 significant bits, so its ulp is 2^(e-8), never below the
// subnormal step 2^-133. Round S to that ulp, ties to even; 2^128 and above is Inf.
float bf16_exact(double x) {
  if (std::isnan(x)) return std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(x) || x == 0.0) return static_cast<float>(x);
  int e = 0;
  const double m = std::frexp(std::fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  const auto S = static_cast<std::uint64_t>(std::ldexp(m, 53));
  const int ulp_exp = std::max(e - 8, -133);
  const int shift = ulp_exp - (e - 53);  // >= 45
  std::uint64_t q = 0;
  if (shift < 64) {
    q = S >> shift;
    const std::uint64_t rem = S & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  const double r = std::ldexp(static_cast<double>(q), ulp_exp);
  const float mag = r >= 0x1p128 ? std::numeric_limits<float>::infinity() : static_cast<float>(r);
  return x < 0 ? -mag : mag;
}

bool same_bits(float a, float b) { return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b)); }

TEST_CASE("round_bf16(double) rounds once: random doubles vs exact integer rounding") {
  const std::uint64_t seed = fp8moe::test::seed_for(11);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> exp_dist(-170, 130);  // below fp32 subnormals to past overflow
  std::int64_t bad = 0;
  double first_bad = 0.0;
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint64_t mant = rng() & 0x000fffffffffffffull;
    const std::uint64_t sign = (rng() & 1) << 63;
    const std::uint64_t biased = static_cast<std::uint64_t>(exp_dist(rng) + 1023);
    const double x = f64_from_bits(sign | (biased << 52) | mant);
    if (!same_bits(round_bf16(x), bf16_exact(x))) {
      if (bad++ == 0) first_bad = x;
    }
  }
  CAPTURE(first_bad);
  CHECK(bad == 0);
}

TEST_CASE("round_bf16(double) where double->float->bf16 would round twice") {
  // x = midpoint of two bf16 neighbours +- delta with delta below half a float ulp: the cast to
  // float lands exactly on the midpoint, and the second rounding goes to even instead of toward x.
  const std::uint64_t seed = fp8moe::test::seed_for(12);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::int64_t bad = 0, double_rounding_wrong = 0;
  double first_bad = 0.0;
  for (int i = 0; i < 1'000'000; ++i) {
    const auto b = static_cast<std::uint16_t>(1 + rng() % 0x7f7e);  // a finite positive bf16 below max
    const double lo = bf16_to_f32(b), hi = bf16_to_f32(static_cast<std::uint16_t>(b + 1));
    const double mid = lo + (hi - lo) / 2;                  // exact: 9 significant bits
    const int k = 17 + static_cast<int>(rng() % 29);        // delta = ulp * 2^-k, k in [17, 45]
    const bool up = (rng() & 1) != 0;
    const bool neg = (rng() & 1) != 0;
    double x = mid + (up ? 1 : -1) * std::ldexp(hi - lo, -k);
    if (neg) x = -x;
    const float want = static_cast<float>(neg ? -(up ? hi : lo) : (up ? hi : lo));
    if (!same_bits(bf16_exact(x), want) || !same_bits(round_bf16(x), want)) {
      if (bad++ == 0) first_bad = x;
    }
    if (!same_bits(round_bf16(static_cast<float>(x)), want)) ++double_rounding_wrong;
  }
  CAPTURE(first_bad);
  CHECK(bad == 0);
  CHECK(double_rounding_wrong > 100'000);  // the trap is real: about half the cases
}

TEST_CASE("round_bf16(double): range edges") {
  const double max_bf16 = 0x1.fep127;  // 0x7f7f
  const double cases[] = {
      max_bf16,
      max_bf16 + 0x1p119,                   // max + half ulp: tie, odd -> Inf
      max_bf16 + 0x1p119 - 0x1p90,          // just below the tie -> max
      static_cast<double>(std::numeric_limits<float>::max()) * (1 + 0x1p-30),
      0x1p128,
      -0x1p128,
      0x1p-134,                             // half the min subnormal: tie -> 0
      0x1p-134 * (1 + 0x1p-40),             // just above -> 2^-133
      0x1p-134 + 0x1p-160,                  // float would hold 2^-134 exactly, rounding twice to 0
      0x3p-134,                             // 1.5 units: tie -> 2 units
      0x1p-1074,
      -0x1p-1074,
      0x1p-126 * (1 - 0x1p-30),             // just below the normal range
      1e300,
      -1e300,
  };
  for (double x : cases) {
    CAPTURE(x);
    CHECK(same_bits(round_bf16(x), bf16_exact(x)));
  }
  CHECK(round_bf16(max_bf16 + 0x1p119) == std::numeric_limits<float>::infinity());
  CHECK(round_bf16(0x1p-134 + 0x1p-160) == 0x1p-133f);
  CHECK(bits_of(round_bf16(-0x1p-1074)) == 0x80000000u);
  CHECK(round_bf16(std::numeric_limits<double>::infinity()) == std::numeric_limits<float>::infinity());
}

TEST_CASE("round_bf16(float) on random floats vs exact rounding") {
  const std::uint64_t seed = fp8moe::test::seed_for(13);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::int64_t bad = 0;
  std::uint32_t first_bad = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const auto u = static_cast<std::uint32_t>(rng());
    const float x = fbits(u);
    if (!same_bits(round_bf16(x), bf16_exact(static_cast<double>(x)))) {
      if (bad++ == 0) first_bad = u;
    }
  }
  CAPTURE(first_bad);
  CHECK(bad == 0);
}

}  // namespace
