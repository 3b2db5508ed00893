#pragma once
// An independent statement of the Hopper FP8 tensor-core step and of the promotion rules, for tests
// only. It shares no code with reference/tensor_core.hpp: values come from the codes through
// gemm_oracle.hpp's table-free bit-field decoder, exponents through std::ilogb, and the
// alignment, truncation and sum are exact fp64 operations (powers of two, std::trunc, sums of
// integers below 2^53), where the model under test works on integer significands and fp32 bits.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tests/reference/gemm_oracle.hpp"

namespace fp8moe::test {

// Exponent a code's significand is aligned at: its binade, subnormals pinned at the format's emin.
inline int oracle_code_exp(double v, Fp8Format f) {
  return std::max(std::ilogb(std::fabs(v)), f == Fp8Format::e4m3 ? -6 : -14);
}

// D = W(a[0..n), b[0..n), c) as README.md "Arithmetic modes" states it, in exact fp64 arithmetic.
inline float oracle_tc_step(const std::uint8_t* a, const std::uint8_t* b, int n, Fp8Format fa, Fp8Format fb, float c) {
  // Non-finite inputs: IEEE arithmetic on the decoded values decides NaN or which Inf.
  bool finite = std::isfinite(c);
  double naive = c;
  for (int i = 0; i < n; ++i) {
    const double x = static_cast<double>(oracle_decode(a[i], fa)), y = static_cast<double>(oracle_decode(b[i], fb));
    finite = finite && std::isfinite(x) && std::isfinite(y);
    naive += x * y;  // products of finite FP8 values cannot overflow fp64
  }
  if (!finite) {
    if (std::isnan(naive)) return std::numeric_limits<float>::quiet_NaN();
    return static_cast<float>(naive);  // +-Inf
  }
  int E = std::numeric_limits<int>::min();
  double vals[33];
  int exps[33];
  int nt = 0;
  for (int i = 0; i < n; ++i) {
    const double x = static_cast<double>(oracle_decode(a[i], fa)), y = static_cast<double>(oracle_decode(b[i], fb));
    if (x == 0 || y == 0) continue;
    vals[nt] = x * y;  // exact: at most 8 significant bits
    exps[nt++] = oracle_code_exp(x, fa) + oracle_code_exp(y, fb);
  }
  if (c != 0) {
    vals[nt] = c;
    exps[nt++] = std::max(std::ilogb(std::fabs(static_cast<double>(c))), -126);
  }
  for (int t = 0; t < nt; ++t) E = std::max(E, exps[t]);
  if (nt == 0) return 0.0f;
  double sum = 0;  // in units of 2^(E-13): each term truncated toward zero
  for (int t = 0; t < nt; ++t) sum += std::trunc(std::ldexp(vals[t], 13 - E));
  if (sum == 0) return 0.0f;
  // 14 significant bits, toward zero
  int ex = 0;
  const double frac = std::frexp(std::fabs(sum), &ex);  // |sum| = frac * 2^ex, frac in [0.5, 1)
  double kept = std::ldexp(std::trunc(std::ldexp(frac, 14)), ex - 14);
  double r = std::ldexp(kept, E - 13);
  r = std::ldexp(std::trunc(std::ldexp(r, 139)), -139);  // never finer than 2^-139
  if (r == 0) return 0.0f;
  return static_cast<float>(sum < 0 ? -r : r);  // exactly representable: a cast, not a rounding
}

// The block partial: B/32 steps from +0 (codes at strides as, bs).
inline float oracle_tc_block(const std::uint8_t* a, std::int64_t as, const std::uint8_t* b, std::int64_t bs, int B,
                             Fp8Format f) {
  float p = 0.0f;
  std::uint8_t x[32], y[32];
  for (int k0 = 0; k0 < B; k0 += 32) {
    for (int k = 0; k < 32; ++k) {
      x[k] = a[(k0 + k) * as];
      y[k] = b[(k0 + k) * bs];
    }
    p = oracle_tc_step(x, y, 32, f, f, p);
  }
  return p;
}

}  // namespace fp8moe::test

namespace fp8moe::test {

// One output element of hopper-tc: block partials from the oracle step, promoted in K order, in
// cuBLASLt's split-K runs when splits > 1 (measured: runs of 4*ceil(KB/(4*splits)) blocks for act x
// weight, ceil(KB/splits) for act x act; each from +0, added in run order; empty trailing runs
// add +0).
inline float oracle_hopper_element(const DenseQ& L, std::int64_t i, const DenseQ& R, std::int64_t j, int B,
                                   Fp8Format f, bool act_act, bool cublas, int splits = 1) {
  const std::int64_t kb = L.kc / B;
  const std::int64_t u = act_act ? 1 : 4;
  const std::int64_t q = splits <= 1 ? kb : u * ((kb + u * splits - 1) / (u * splits));
  float total = 0.0f;
  for (int s = 0; s < std::max(splits, 1); ++s) {
    float run = 0.0f;
    for (std::int64_t b = s * q; b < std::min((s + 1) * q, kb); ++b) {
      const float P = oracle_tc_block(&L.code[static_cast<std::size_t>(i * L.kc + b * B)], 1,
                                      &R.code[static_cast<std::size_t>(j * R.kc + b * B)], 1, B, f);
      run = oracle_promote(cublas, act_act, P, L.s_inv[static_cast<std::size_t>(i * L.kc + b * B)],
                           R.s_inv[static_cast<std::size_t>(j * R.kc + b * B)], run);
    }
    total = s == 0 ? run : total + run;
  }
  return total;
}

}  // namespace fp8moe::test
