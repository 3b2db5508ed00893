#pragma once
// The Hopper FP8 tensor-core model and the promotion rules, host+device: the one definition used by
// the CPU scalar path (reference/block_gemm.cpp), the simt kernels (kernels/simt_gemm.cu) and the
// wgmma probe tests. README.md "Arithmetic modes" states the model and where it was measured.
//
// One wgmma.mma_async m64nNk32 step (FP8 inputs, fp32 accumulator), per output element:
//   D = W(a[0..31], b[0..31], C)
// - every FP8 code is an integer significand s and an exponent e (value = s * 2^(e - mant_bits));
//   subnormals keep exponent emin (e4m3 -6, e5m2 -14); a product term is s_a * s_b at exponent
//   e_a + e_b, not renormalised; C is a term (fp32 significand, subnormal C at -126); zero terms
//   drop out;
// - E = the largest exponent among the non-zero terms; each term is truncated toward zero to an
//   integer multiple of 2^(E-13); the integers are summed exactly;
// - the sum is truncated toward zero to 14 significant bits (never finer than 2^-139); an exact
//   zero is +0. NaN in, Inf * 0 and Inf - Inf give the canonical NaN 0x7fffffff; otherwise an Inf
//   term gives that Inf.
// A K-block of B elements (B a multiple of 32) is B/32 such steps chained in ascending k from +0.
//
// Promotion of block partials P into the fp32 output y (y = +0, K blocks ascending, one IEEE
// rounding per operation, nothing fused that is not written as fma):
//   act x weight (1x128 x 128x128, 128x128 x 1x128), both families:  y = fma(P, fl(sa*sb), y)
//   act x act (1x128 x 1x128, wgrad):  deepgemm  y = fma(P, fl(sa*sb), y)
//                                      cublas    y = fma(fl(P*s_lhs), s_rhs, y)
// with s_lhs the scale of the operand torch._scaled_mm calls mat1 (fp8moe's lhs).
// cuBLASLt's split-K (numSplitsK = S > 1): the K blocks are cut into runs of
// q = u * ceil(KB / (u S)) blocks (u = 4 for act x weight, 1 for act x act: split_unit), each run
// promoted from +0, the runs' results added in order in fp32 (((y0 + y1) + y2) + ...; an empty
// trailing run adds +0).
#include <cstdint>

#include "reference/formats.hpp"
#include "reference/hd.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cmath>
#endif

namespace fp8moe {

// Promotion family of promote-fp32 and hopper-tc: which kernel's order of scale multiplications.
enum class Promotion : std::uint8_t { deepgemm, cublas };
// The scaling of one GEMM's two operands: an activation/gradient (1x128) against a 128x128 weight,
// or two 1x128 operands (wgrad, contracted along tokens).
enum class ScaleConfig : std::uint8_t { act_weight, act_act };

constexpr int kTcStepK = 32;       // K of one wgmma step for FP8 inputs
constexpr int kTcFracBits = 13;    // terms are aligned to 2^(E-13)
constexpr int kTcSigBits = 14;     // the sum keeps 14 significant bits
constexpr std::uint32_t kTcNaN = 0x7fffffffu;

// One IEEE fp32 multiply and fma, unfused on either side (host code builds with -ffp-contract=off).
FP8MOE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FP8MOE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FP8MOE_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// One promotion step: fold block partial P (scales sa of the lhs row, sb of the rhs row) into y.
FP8MOE_HD float promote(Promotion p, ScaleConfig c, float P, float sa, float sb, float y) {
  if (p == Promotion::cublas && c == ScaleConfig::act_act) return fma_rn(mul_rn(P, sa), sb, y);
  return fma_rn(P, mul_rn(sa, sb), y);
}

// cuBLASLt's split-K runs: blocks per run for KB K-blocks and S splits (S >= 1), cut in whole
// units of `unit` blocks: q = unit * ceil(KB / (unit * S)).
FP8MOE_HD std::int64_t split_run_blocks(std::int64_t kb, int s, int unit = 4) {
  if (s <= 1) return kb;
  const std::int64_t u = unit < 1 ? 1 : unit;
  const std::int64_t units = (kb + u * s - 1) / (u * s);
  return u * units;
}
// The run unit of a scale config, measured on the H200 (cuBLASLt 13.1, results/bench/
// 2026-12-04-h200-hopper-tc-round3): act x weight splits cut whole units of 4 blocks (512 of K);
// act x act (wgrad, contracted along tokens) splits cut single blocks, q = ceil(KB/S) (units of 2
// and 4 fail where ceil(KB/S) is odd or not a multiple of 4: 67, 97, 134 blocks). `override` > 0
// replaces it (GemmOptions::split_unit, for measuring other rules on a device).
constexpr int kActWeightSplitUnit = 4;
constexpr int kActActSplitUnit = 1;
FP8MOE_HD int split_unit(ScaleConfig c, int override) {
  if (override > 0) return override;
  return c == ScaleConfig::act_act ? kActActSplitUnit : kActWeightSplitUnit;
}

// Closing split run `run_index` (0-based) with result `run` into the call's total.
FP8MOE_HD float split_combine(float total, float run, int run_index) { return run_index == 0 ? run : add_rn(total, run); }

// An FP8 code as an integer significand and exponent: value = sig * 2^(exp - mant_bits), sig >= 0.
struct Fp8Sig {
  std::int32_t sig;
  std::int32_t exp;
  bool neg;
};
FP8MOE_HD Fp8Sig fp8_sig(std::uint8_t code, Fp8Format f) {
  const Fp8Spec s = fp8_spec(f);
  const std::uint32_t mag = code & 0x7fu;
  const std::int32_t ef = static_cast<std::int32_t>(mag >> s.mant_bits);
  const std::int32_t m = static_cast<std::int32_t>(mag & ((1u << s.mant_bits) - 1));
  if (ef == 0) return {m, s.emin, (code & 0x80u) != 0};
  return {m | (1 << s.mant_bits), ef - s.bias, (code & 0x80u) != 0};
}

// Magnitude truncated toward zero to a multiple of 2^(-shift) units: v * 2^shift rounded to zero.
FP8MOE_HD std::int32_t tc_align(std::int64_t v, int shift) {
  if (shift >= 0) return static_cast<std::int32_t>(v << shift);
  return -shift >= 62 ? 0 : static_cast<std::int32_t>(v >> -shift);
}

// fp32 bits of +-m * 2^e for 0 < m < 2^31 after truncating m to 14 significant bits and the value
// to a multiple of 2^-139. Finite products and C cannot overflow fp32 here (|sum| < 2^128).
FP8MOE_HD float tc_pack(std::uint32_t m, int e, bool neg) {
  int msb = 31;
  while (((m >> msb) & 1u) == 0) --msb;
  if (msb >= kTcSigBits) {
    const int drop = msb - (kTcSigBits - 1);
    m = (m >> drop) << drop;
  }
  if (e < -139) {  // a multiple of 2^-139 at most: drop finer bits (toward zero)
    const int drop = -139 - e;
    m = drop >= 32 ? 0u : m >> drop;
    e = -139;
    if (m == 0) return 0.0f;  // a truncation to zero is +0, like an exact zero
    msb = 31;
    while (((m >> msb) & 1u) == 0) --msb;
  }
  const int vexp = e + msb;  // exponent of the leading bit
  std::uint32_t bits;
  if (vexp >= -126) {
    bits = (static_cast<std::uint32_t>(vexp + 127) << 23) | ((m << (23 - msb)) & 0x7fffffu);
  } else {
    bits = m << (e + 149);  // a subnormal: units of 2^-149; e + 149 >= 10
  }
  return f32_from_bits(bits | (neg ? 0x80000000u : 0u));
}

// The signed product term of lane i (0 when either code is zero) and its exponent.
FP8MOE_HD std::int32_t tc_product(std::uint8_t ca, Fp8Format fa, std::uint8_t cb, Fp8Format fb, int& exp) {
  const Fp8Sig x = fp8_sig(ca, fa), y = fp8_sig(cb, fb);
  exp = x.exp + y.exp;
  const std::int32_t p = x.sig * y.sig;
  return x.neg != y.neg ? -p : p;
}

// One wgmma k32 step: D = W(a[0..n), b[0..n), c) for n <= 32 codes at strides as and bs. Two
// sweeps over the codes (the largest exponent, then the aligned sum) rather than a stored array
// of terms, so the device version keeps everything in registers.
FP8MOE_HD float tc_step(const std::uint8_t* a, std::int64_t as, Fp8Format fa, const std::uint8_t* b, std::int64_t bs,
                        Fp8Format fb, int n, float c) {
  const int frac = fp8_spec(fa).mant_bits + fp8_spec(fb).mant_bits;
  // Sweep 1: non-finite inputs (NaN anywhere, Inf * 0 and opposite Infs give NaN; else an Inf
  // wins) and E, the largest exponent of a non-zero term.
  bool nan = false, pinf = false, ninf = false;
  int E = -1000;
  for (int i = 0; i < n; ++i) {
    const std::uint8_t ca = a[i * as], cb = b[i * bs];
    const bool fin_a = fp8_is_finite(ca, fa), fin_b = fp8_is_finite(cb, fb);
    if (!fin_a || !fin_b) {
      if (fp8_is_nan(ca, fa) || fp8_is_nan(cb, fb)) {
        nan = true;
      } else if ((fin_a && (ca & 0x7fu) == 0) || (fin_b && (cb & 0x7fu) == 0)) {
        nan = true;  // Inf * 0
      } else {
        ((((ca ^ cb) & 0x80u) != 0) ? ninf : pinf) = true;
      }
      continue;
    }
    int e = 0;
    if (tc_product(ca, fa, cb, fb, e) != 0 && e > E) E = e;
  }
  const std::uint32_t cu = f32_bits(c);
  const std::uint32_t cabs = cu & 0x7fffffffu;
  if (cabs > 0x7f800000u) nan = true;
  if (cabs == 0x7f800000u) ((cu >> 31) ? ninf : pinf) = true;
  if (nan || (pinf && ninf)) return f32_from_bits(kTcNaN);
  if (pinf) return f32_from_bits(0x7f800000u);
  if (ninf) return f32_from_bits(0xff800000u);
  std::int32_t csig = 0, cexp = 0;
  if (cabs != 0) {
    const int biased = static_cast<int>(cabs >> 23);
    csig = static_cast<std::int32_t>((cabs & 0x7fffffu) | (biased ? 0x800000u : 0u));
    cexp = biased ? biased - 127 : -126;
    if (cexp > E) E = cexp;
  }
  if (E == -1000) return 0.0f;  // every term zero
  // Sweep 2: the terms in units of 2^(E-13), truncated toward zero; |each| < 2^15, so 33 of them
  // fit in int32.
  std::int32_t sum = 0;
  for (int i = 0; i < n; ++i) {
    int e = 0;
    const std::int32_t p = tc_product(a[i * as], fa, b[i * bs], fb, e);
    if (p == 0) continue;
    const std::int32_t t = tc_align(p < 0 ? -p : p, e - E + kTcFracBits - frac);
    sum += p < 0 ? -t : t;
  }
  if (csig != 0) {
    const std::int32_t t = tc_align(csig, cexp - E + kTcFracBits - 23);
    sum += (cu >> 31) ? -t : t;
  }
  if (sum == 0) return 0.0f;
  const bool neg = sum < 0;
  return tc_pack(static_cast<std::uint32_t>(neg ? -sum : sum), E - kTcFracBits, neg);
}

// The block partial of B codes (B a multiple of 32): B/32 steps chained from +0 in ascending k.
FP8MOE_HD float tc_block_partial(const std::uint8_t* a, std::int64_t as, const std::uint8_t* b, std::int64_t bs,
                                 Fp8Format f, int B) {
  float p = 0.0f;
  for (int k = 0; k < B; k += kTcStepK) p = tc_step(a + k * as, as, f, b + k * bs, bs, f, kTcStepK, p);
  return p;
}

}  // namespace fp8moe
