#pragma once
// Inputs of the wgmma probe (kernels/wgmma_probe.hpp), host+device: every code and every C of a
// probe case is a pure function of (seed, tile, element) through reference/random.hpp's keyed
// Philox, so the device generator, the device check, the host spot check and a person replaying a
// failure all see the same numbers (STYLE.md: data from (seed, global index)).
//
// Each tile draws one code class and one C class (probe_tile_class):
//   codes  finite          uniform over the format's finite codes (both zeros included)
//          narrow          exponent fields in a window of 3 (many terms of one scale: carries)
//          small           exponent fields 0 and 1 (subnormals and the smallest normals)
//          sparse          3 in 4 codes +-0, the rest finite uniform
//          all             uniform over all 256 codes (e4m3 NaN 0x7f/0xff, e5m2 Inf and NaN)
//          rare_nonfinite  1 in 32 a non-finite code, 1 in 16 a zero (Inf*0, Inf-Inf), else finite
//   C      zero (+-0), normal (exponent near the largest product), subnormal, huge (2^126..2^128),
//          cancel (minus the sum of the products, rounded to fp32: results near zero), far_above
//          and far_below (exponent 14..40 above/below the largest product), random_bits (any
//          finite fp32), nonfinite (+-Inf, NaN payloads; only in tiles of non-finite codes)
// The first four code classes are finite: their tiles never see NaN or Inf.
#include <cstdint>

#include "reference/formats.hpp"
#include "reference/random.hpp"
#include "reference/tensor_core.hpp"

namespace fp8moe::kernels::wgmma {

constexpr int kM = 64;  // rows of A, C and D per tile (wgmma's M)
constexpr int kK = 32;  // K of one FP8 wgmma step

// One probe case: the operand formats, the wgmma N and the seed of its data. force_codes /
// force_c >= 0 pin every tile's class (the layout check uses finite codes and C = 0).
struct ProbeCase {
  Fp8Format fa = Fp8Format::e4m3;
  Fp8Format fb = Fp8Format::e4m3;
  int n = 8;
  std::uint64_t seed = 0;
  int force_codes = -1;
  int force_c = -1;
};

enum class CodeClass : std::uint8_t { finite, narrow, small, sparse, all, rare_nonfinite, count };
enum class CClass : std::uint8_t {
  zero, normal, subnormal, huge, cancel, far_above, far_below, random_bits, nonfinite, count
};
constexpr int kCodeClasses = static_cast<int>(CodeClass::count);
constexpr int kCClasses = static_cast<int>(CClass::count);

inline const char* probe_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }
inline const char* code_class_name(int c) {
  constexpr const char* names[] = {"finite", "narrow", "small", "sparse", "all", "rare_nonfinite"};
  return c >= 0 && c < kCodeClasses ? names[c] : "?";
}
inline const char* c_class_name(int c) {
  constexpr const char* names[] = {"zero",      "normal",    "subnormal",   "huge",     "cancel",
                                   "far_above", "far_below", "random_bits", "nonfinite"};
  return c >= 0 && c < kCClasses ? names[c] : "?";
}

// Tensor ids of the probe's keyed streams (distinct from reference/datagen.hpp's ids).
constexpr std::uint32_t kProbeTensorClass = 0x77C1A550u;
constexpr std::uint32_t kProbeTensorA = 0x77A00001u;
constexpr std::uint32_t kProbeTensorB = 0x77B00002u;
constexpr std::uint32_t kProbeTensorC = 0x77C00003u;

struct TileClass {
  CodeClass codes;
  CClass c;
  int narrow_lo;  // lowest exponent field of the narrow class
};

FP8MOE_HD bool code_class_finite(CodeClass c) { return static_cast<int>(c) < static_cast<int>(CodeClass::all); }

// Largest exponent field of a finite code: e4m3 15 (0x7e = 448; 0x7f is NaN), e5m2 30.
FP8MOE_HD int fp8_max_field(Fp8Format f) { return f == Fp8Format::e4m3 ? 15 : 30; }

FP8MOE_HD TileClass probe_tile_class(const ProbeCase& pc, std::uint64_t tile) {
  const Philox4 r = keyed_random(pc.seed, kProbeTensorClass, tile, 0);
  // 11 in 16 tiles have finite codes: finite 6, narrow 3, small 1, sparse 1; then all 2, rare 3.
  constexpr CodeClass table[16] = {CodeClass::finite, CodeClass::finite, CodeClass::finite, CodeClass::finite,
                                   CodeClass::finite, CodeClass::finite, CodeClass::narrow, CodeClass::narrow,
                                   CodeClass::narrow, CodeClass::small,  CodeClass::sparse, CodeClass::all,
                                   CodeClass::all,    CodeClass::rare_nonfinite, CodeClass::rare_nonfinite,
                                   CodeClass::rare_nonfinite};
  TileClass t;
  t.codes = pc.force_codes >= 0 ? static_cast<CodeClass>(pc.force_codes) : table[r.v[0] & 15u];
  const std::uint32_t n_c = code_class_finite(t.codes) ? kCClasses - 1 : kCClasses;  // nonfinite C last
  t.c = pc.force_c >= 0 ? static_cast<CClass>(pc.force_c) : static_cast<CClass>(r.v[1] % n_c);
  // The window [lo, lo+2] of the narrow class lies inside both formats' finite fields.
  const int max_lo = (fp8_max_field(pc.fa) < fp8_max_field(pc.fb) ? fp8_max_field(pc.fa) : fp8_max_field(pc.fb)) - 2;
  t.narrow_lo = static_cast<int>(r.v[2] % static_cast<std::uint32_t>(max_lo + 1));
  return t;
}

// A finite code chosen uniformly by r: e4m3 has 2 x 127 finite codes, e5m2 2 x 124.
FP8MOE_HD std::uint8_t finite_code(std::uint32_t r, Fp8Format f) {
  const std::uint32_t half = f == Fp8Format::e4m3 ? 127u : 124u;
  const std::uint32_t i = r % (2 * half);
  return static_cast<std::uint8_t>((i >= half ? 0x80u : 0u) | (i % half));
}

// A non-finite code chosen by r: e4m3 NaN 0x7f/0xff; e5m2 Inf 0x7c/0xfc, NaN 0x7d..0x7f/0xfd..0xff.
FP8MOE_HD std::uint8_t nonfinite_code(std::uint32_t r, Fp8Format f) {
  const std::uint32_t sign = (r & 1u) ? 0x80u : 0u;
  if (f == Fp8Format::e4m3) return static_cast<std::uint8_t>(sign | 0x7fu);
  return static_cast<std::uint8_t>(sign | (0x7cu + ((r >> 1) & 3u)));
}

// Code `index` of operand tensor `tensor_id` (A: (tile*64 + row)*32 + k; B: (tile*N + col)*32 + k).
FP8MOE_HD std::uint8_t probe_code(const ProbeCase& pc, const TileClass& tc, Fp8Format f, std::uint32_t tensor_id,
                                  std::uint64_t index) {
  const Philox4 r = keyed_random(pc.seed, tensor_id, index, 0);
  const std::uint32_t mant_bits = static_cast<std::uint32_t>(fp8_spec(f).mant_bits);
  const std::uint32_t sign = (r.v[2] & 1u) ? 0x80u : 0u;
  switch (tc.codes) {
    case CodeClass::finite:
      return finite_code(r.v[0], f);
    case CodeClass::narrow: {
      const std::uint32_t field = static_cast<std::uint32_t>(tc.narrow_lo) + r.v[0] % 3u;
      std::uint32_t mag = (field << mant_bits) | (r.v[1] & ((1u << mant_bits) - 1u));
      if (f == Fp8Format::e4m3 && mag == 0x7fu) mag = 0x7eu;  // field 15 mantissa 7 is NaN
      return static_cast<std::uint8_t>(sign | mag);
    }
    case CodeClass::small:
      return static_cast<std::uint8_t>(sign | (((r.v[0] & 1u) << mant_bits) | (r.v[1] & ((1u << mant_bits) - 1u))));
    case CodeClass::sparse:
      return (r.v[0] & 3u) != 0 ? static_cast<std::uint8_t>(sign) : finite_code(r.v[1], f);
    case CodeClass::all:
      return static_cast<std::uint8_t>(r.v[0] & 0xffu);
    case CodeClass::rare_nonfinite:
    default:
      if ((r.v[0] & 31u) == 0) return nonfinite_code(r.v[1], f);
      if ((r.v[0] >> 5) % 16u == 1) return static_cast<std::uint8_t>(sign);
      return finite_code(r.v[1], f);
  }
}

// The finite products a[k]*b[k] of one output: the exponent of the largest one's leading bit
// (0 when all are zero) and their sum in fp64, added in ascending k (each product is exact in
// fp64; the sum is only used to make a C that cancels, so its rounding does not matter, but it
// is the same on host and device: IEEE adds in a fixed order).
struct ProductScale {
  int max_exp;
  double sum;
};
FP8MOE_HD ProductScale product_scale(const std::uint8_t* a, Fp8Format fa, const std::uint8_t* b, Fp8Format fb) {
  const int frac = fp8_spec(fa).mant_bits + fp8_spec(fb).mant_bits;
  int max_exp = -1000;
  double sum = 0.0;
  for (int k = 0; k < kK; ++k) {
    if (!fp8_is_finite(a[k], fa) || !fp8_is_finite(b[k], fb)) continue;
    const Fp8Sig x = fp8_sig(a[k], fa), y = fp8_sig(b[k], fb);
    const std::int32_t p = x.sig * y.sig;
    if (p == 0) continue;
    int msb = 0;
    while ((p >> (msb + 1)) != 0) ++msb;
    const int e = x.exp + y.exp - frac + msb;  // p * 2^(x.exp + y.exp - frac) has its leading bit at e
    if (e > max_exp) max_exp = e;
    sum = sum + static_cast<double>(fp8_decode(a[k], fa)) * static_cast<double>(fp8_decode(b[k], fb));
  }
  return {max_exp == -1000 ? 0 : max_exp, sum};
}

// fp32 bits with sign bit s, unbiased exponent e clamped to the normal range, mantissa m.
FP8MOE_HD std::uint32_t f32_normal_bits(std::uint32_t s, int e, std::uint32_t m) {
  if (e < -126) e = -126;
  if (e > 127) e = 127;
  return (s << 31) | (static_cast<std::uint32_t>(e + 127) << 23) | (m & 0x7fffffu);
}

// C of output (row, col) of `tile`: a and b are that row of A and that column of B (32 codes each).
FP8MOE_HD float probe_c(const ProbeCase& pc, const TileClass& tc, std::uint64_t tile, int row, int col,
                        const std::uint8_t* a, const std::uint8_t* b) {
  const std::uint64_t index = (tile * kM + static_cast<std::uint64_t>(row)) * static_cast<std::uint64_t>(pc.n) +
                              static_cast<std::uint64_t>(col);
  const Philox4 r = keyed_random(pc.seed, kProbeTensorC, index, 0);
  const std::uint32_t s = r.v[0] & 1u, m = r.v[1] & 0x7fffffu;
  const ProductScale ps = product_scale(a, pc.fa, b, pc.fb);
  switch (tc.c) {
    case CClass::zero:
      return f32_from_bits(s << 31);
    case CClass::normal:
      return f32_from_bits(f32_normal_bits(s, ps.max_exp - 12 + static_cast<int>(r.v[2] % 17u), m));
    case CClass::subnormal:
      return f32_from_bits((s << 31) | (m == 0 ? 1u : m));
    case CClass::huge:
      if ((r.v[2] & 15u) == 0) return f32_from_bits((s << 31) | 0x7f7fffffu);  // FLT_MAX
      return f32_from_bits(f32_normal_bits(s, 126 + static_cast<int>(r.v[2] & 1u), m));
    case CClass::cancel:
      return static_cast<float>(-ps.sum);
    case CClass::far_above:
      return f32_from_bits(f32_normal_bits(s, ps.max_exp + 14 + static_cast<int>(r.v[2] % 27u), m));
    case CClass::far_below:
      return f32_from_bits(f32_normal_bits(s, ps.max_exp - 14 - static_cast<int>(r.v[2] % 27u), m));
    case CClass::random_bits: {
      std::uint32_t u = r.v[3];
      if ((u & 0x7f800000u) == 0x7f800000u) u &= ~0x40000000u;  // exponent 255 -> 127: finite
      return f32_from_bits(u);
    }
    case CClass::nonfinite:
    default: {
      const std::uint32_t pick = r.v[2] % 6u;
      if (pick == 0) return f32_from_bits(0x7f800000u);
      if (pick == 1) return f32_from_bits(0xff800000u);
      if (pick == 2) return f32_from_bits(0x7fc00000u);
      if (pick == 3) return f32_from_bits(0xffc00000u);
      if (pick == 4) return f32_from_bits(0x7f800001u);  // signalling NaN
      return f32_from_bits((s << 31) | 0x7f800000u | (m == 0 ? 0x400001u : m));
    }
  }
}

}  // namespace fp8moe::kernels::wgmma
