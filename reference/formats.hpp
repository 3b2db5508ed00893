#pragma once
// FP8 (e4m3fn, e5m2) and bf16 codecs, host+device (reference/SPEC.md 2).
//
// Encoding is round-to-nearest-even computed on the integer bits of the fp32 input, so it needs
// no floating-point arithmetic (no flush-to-zero, rounding-mode or fusion hazards on either side).
// Two overflow policies:
//   satfinite: CUDA's __NV_SATFINITE. Out-of-range values and infinities clamp to +-max, NaN gives
//              the canonical NaN 0x7f (sign dropped), verified over all 2^32 inputs against
//              cuda_fp8.h (tests/reference/test_formats_exhaustive.cpp).
//   torch:     PyTorch's c10 cast. e4m3fn: |x| >= 480 (and NaN, Inf) gives 0x7f|sign, below that plain
//              RNE, so (464, 480) rounds into the NaN code. e5m2: NaN gives 0x7f|sign, |x| >= 65536
//              (and Inf) gives Inf 0x7c|sign, below that RNE (which also overflows to Inf).
#include "reference/hd.hpp"

namespace fp8moe {

enum class Fp8Format : std::uint8_t { e4m3, e5m2 };
enum class Overflow : std::uint8_t { satfinite, torch };

// Static description of a format. emin is the exponent of the smallest normal.
struct Fp8Spec {
  int mant_bits;
  int bias;
  std::uint8_t max_code;  // largest finite magnitude code
  float max_value;
  int emin;
};

FP8MOE_HD Fp8Spec fp8_spec(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Fp8Spec{3, 7, 0x7e, 448.0f, -6} : Fp8Spec{2, 15, 0x7b, 57344.0f, -14};
}

FP8MOE_HD float fp8_max(Fp8Format f) { return fp8_spec(f).max_value; }

// Round-to-nearest-even magnitude code of |x| given by its fp32 bits (sign cleared, finite).
// The result may exceed the format's largest finite code; callers apply the overflow policy.
FP8MOE_HD std::uint32_t fp8_rne_magnitude(std::uint32_t abs_bits, int mant_bits, int emin) {
  const int biased = static_cast<int>(abs_bits >> 23);
  if (biased == 0) return 0;  // fp32 zero or subnormal (< 2^-126): far below half the fp8 minimum
  const int e = biased - 127;
  const std::uint64_t sig = (abs_bits & 0x7fffffu) | 0x800000u;  // 24-bit significand
  // Value = sig * 2^(e-23). Units of the result's last place: 2^(max(e,emin) - mant_bits).
  const int unit_exp = (e >= emin ? e : emin) - mant_bits;
  const int shift = unit_exp - (e - 23);  // >= 23 - mant_bits > 0
  if (shift >= 40) return 0;              // sig < 2^24 <= half a unit: rounds to zero
  const std::uint64_t q = sig >> shift;
  const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  std::uint64_t mag = q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
  // mag counts units; normals carry the exponent field above the mantissa bits.
  if (e >= emin) mag += static_cast<std::uint64_t>(e - emin) << mant_bits;  // implicit 1 -> exponent 1
  return static_cast<std::uint32_t>(mag);
}

FP8MOE_HD std::uint8_t fp8_encode(float x, Fp8Format f, Overflow policy) {
  const Fp8Spec s = fp8_spec(f);
  const std::uint32_t bits = f32_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  const bool is_nan = abs_bits > 0x7f800000u;
  const bool is_inf = abs_bits == 0x7f800000u;
  if (policy == Overflow::satfinite) {
    if (is_nan) return 0x7f;
    if (is_inf) return static_cast<std::uint8_t>(sign | s.max_code);
    std::uint32_t mag = fp8_rne_magnitude(abs_bits, s.mant_bits, s.emin);
    if (mag > s.max_code) mag = s.max_code;
    return static_cast<std::uint8_t>(sign | mag);
  }
  if (f == Fp8Format::e4m3) {
    if (abs_bits >= 0x43f00000u) return static_cast<std::uint8_t>(sign | 0x7f);  // >= 480, Inf, NaN
    return static_cast<std::uint8_t>(sign | fp8_rne_magnitude(abs_bits, s.mant_bits, s.emin));
  }
  if (is_nan) return static_cast<std::uint8_t>(sign | 0x7f);
  if (abs_bits >= 0x47800000u) return static_cast<std::uint8_t>(sign | 0x7c);  // >= 65536, Inf
  std::uint32_t mag = fp8_rne_magnitude(abs_bits, s.mant_bits, s.emin);
  if (mag > 0x7c) mag = 0x7c;  // cannot happen below 65536, kept as a guard
  return static_cast<std::uint8_t>(sign | mag);
}

// Exact fp32 value of a code.
FP8MOE_HD float fp8_decode(std::uint8_t code, Fp8Format f) {
  const Fp8Spec s = fp8_spec(f);
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t mag = code & 0x7fu;
  const int exp_bits = 7 - s.mant_bits;
  const std::uint32_t exp_field = mag >> s.mant_bits;
  const std::uint32_t mant = mag & ((1u << s.mant_bits) - 1);
  if (f == Fp8Format::e4m3 && mag == 0x7f) return f32_from_bits(sign | 0x7fc00000u);
  if (f == Fp8Format::e5m2 && exp_field == (1u << exp_bits) - 1) {
    return f32_from_bits(sign | (mant ? 0x7fc00000u : 0x7f800000u));
  }
  if (exp_field == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: mant * 2^(emin - mant_bits); normalise into fp32 bits
    int e = s.emin;
    std::uint32_t m = mant;
    while ((m & (1u << s.mant_bits)) == 0) {
      m <<= 1;
      --e;
    }
    m &= (1u << s.mant_bits) - 1;
    return f32_from_bits(sign | (static_cast<std::uint32_t>(e + 127) << 23) | (m << (23 - s.mant_bits)));
  }
  const int e = static_cast<int>(exp_field) - s.bias;
  return f32_from_bits(sign | (static_cast<std::uint32_t>(e + 127) << 23) | (mant << (23 - s.mant_bits)));
}

// Integer value of a finite code in units of the format's smallest subnormal
// (2^-9 for e4m3, 2^-16 for e5m2): decode(c) == fp8_units(c) * 2^-unit_shift.
FP8MOE_HD int fp8_unit_shift(Fp8Format f) { return f == Fp8Format::e4m3 ? 9 : 16; }
FP8MOE_HD std::int64_t fp8_units(std::uint8_t code, Fp8Format f) {
  const Fp8Spec s = fp8_spec(f);
  const std::uint32_t mag = code & 0x7fu;
  const std::uint32_t exp_field = mag >> s.mant_bits;
  const std::uint32_t mant = mag & ((1u << s.mant_bits) - 1);
  const std::int64_t v = exp_field == 0
      ? static_cast<std::int64_t>(mant)
      : static_cast<std::int64_t>((1u << s.mant_bits) | mant) << (exp_field - 1);
  return (code & 0x80u) ? -v : v;
}

FP8MOE_HD bool fp8_is_nan(std::uint8_t code, Fp8Format f) {
  const std::uint32_t mag = code & 0x7fu;
  return f == Fp8Format::e4m3 ? mag == 0x7f : mag > 0x7c;
}
FP8MOE_HD bool fp8_is_finite(std::uint8_t code, Fp8Format f) {
  const std::uint32_t mag = code & 0x7fu;
  return f == Fp8Format::e4m3 ? mag != 0x7f : mag < 0x7c;
}

// bf16 from fp32, round-to-nearest-even; NaN stays NaN (quiet bit set, sign kept).
FP8MOE_HD std::uint16_t bf16_bits_rne(float x) {
  const std::uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}
FP8MOE_HD float bf16_to_f32(std::uint16_t b) { return f32_from_bits(static_cast<std::uint32_t>(b) << 16); }
FP8MOE_HD float round_bf16(float x) { return bf16_to_f32(bf16_bits_rne(x)); }

// bf16 from fp64 with a single rounding. In bf16's normal range, round the fp64 significand to
// 8 bits (RNE) directly on the bits; the result is a bf16 value, so the cast to fp32 is exact.
// Elsewhere (zero, bf16 subnormals, overflow, NaN): round to fp32 with round-to-odd, which keeps
// the sticky information (fp32 has 16 more bits than bf16), then RNE to bf16.
FP8MOE_HD float round_bf16(double x) {
  const double ax = x < 0 ? -x : x;
  if (ax >= 0x1p-126 && ax < 0x1p127) {
    std::uint64_t u = f64_bits(x);
    u += (std::uint64_t{1} << 44) - 1 + ((u >> 45) & 1);
    u &= ~((std::uint64_t{1} << 45) - 1);
    return static_cast<float>(f64_from_bits(u));
  }
  float f = static_cast<float>(x);
  if (f == f && static_cast<double>(f) != x) {
    std::uint32_t u = f32_bits(f);
    const double df = static_cast<double>(f);
    const bool away = (df > x) == (x > 0);  // f was rounded away from zero: step back to truncation
    if (away && (u & 0x7fffffffu) != 0) u -= 1;
    if ((u & 0x7f800000u) != 0x7f800000u) u |= 1u;  // sticky: odd
    f = f32_from_bits(u);
  }
  return round_bf16(f);
}

}  // namespace fp8moe
