#pragma once
// Independent oracles for the grouped GEMM tests, written from reference/SPEC.md 2/6/7 without the
// code under test: a table-free FP8 decoder in long double, and the exact / promote-fp32 models
// evaluated element by element with long double block partials.
#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/gemm.hpp"

namespace fp8moe::test {

// Value of an FP8 code straight from the bit fields (SPEC.md 2.1).
inline long double oracle_decode(std::uint8_t c, Fp8Format f) {
  const int mbits = f == Fp8Format::e4m3 ? 3 : 2, ebits = 7 - mbits, bias = f == Fp8Format::e4m3 ? 7 : 15;
  const int sign = c >> 7, e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
  if (f == Fp8Format::e4m3 && e == 15 && m == 7) return NAN;
  if (f == Fp8Format::e5m2 && e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
  const long double mag = e == 0 ? std::ldexp(static_cast<long double>(m), 1 - bias - mbits)
                                 : std::ldexp(static_cast<long double>((1 << mbits) + m), e - bias - mbits);
  return sign ? -mag : mag;
}

// A logical (rows, kc) quantized operand: codes and s_inv per element, filled by the test from a
// Quantized through its documented layout.
struct DenseQ {
  std::int64_t rows = 0, kc = 0;
  std::vector<std::uint8_t> code;  // (rows, kc)
  std::vector<float> s_inv;        // (rows, kc): the block scale of each element
};

// One output element in the exact and promote-fp32 models. Block partials are exact in long
// double for e4m3 (below 2^44 units of 2^-18) and e5m2 block sums are exact too (64-bit mantissa,
// products below 2^64 units... only up to rounding at the very top, far beyond test data).
struct OracleOut {
  long double exact_unrounded;  // sum over blocks of P * sa * sb, evaluated in fp64 like the spec
  float promote_deepgemm;
  float promote_cublas;
  long double abs_sum;          // sum |a_k b_k|, for error bounds
};

// The promotion of README.md "Arithmetic modes" written out: fma(P, fl(sa*sb), y), except cuBLASLt's act x act
// (1x128 x 1x128, wgrad) order fma(fl(P*s_lhs), s_rhs, y).
inline float oracle_promote(bool cublas, bool act_act, float P, float sa, float sb, float y) {
  if (cublas && act_act) return std::fma(P * sa, sb, y);
  return std::fma(P, sa * sb, y);
}

inline OracleOut oracle_element(const DenseQ& L, std::int64_t i, const DenseQ& R, std::int64_t j, int B, Fp8Format f,
                                bool act_act) {
  OracleOut o{0, 0.0f, 0.0f, 0};
  double acc = 0;
  float dg = 0.0f, cb = 0.0f;
  for (std::int64_t b = 0; b * B < L.kc; ++b) {
    long double p = 0;
    for (std::int64_t k = b * B; k < (b + 1) * B; ++k) {
      const long double t = oracle_decode(L.code[i * L.kc + k], f) * oracle_decode(R.code[j * R.kc + k], f);
      p += t;
      o.abs_sum += std::fabs(t) * L.s_inv[i * L.kc + k] * R.s_inv[j * R.kc + k];
    }
    const float sa = L.s_inv[i * L.kc + b * B], sb = R.s_inv[j * R.kc + b * B];
    const double pd = static_cast<double>(p);
    const float pf = static_cast<float>(p);  // one rounding of the exact partial
    acc = std::fma(pd, static_cast<double>(sa) * static_cast<double>(sb), acc);
    dg = oracle_promote(false, act_act, pf, sa, sb, dg);
    cb = oracle_promote(true, act_act, pf, sa, sb, cb);
  }
  o.exact_unrounded = acc;
  o.promote_deepgemm = dg;
  o.promote_cublas = cb;
  return o;
}

}  // namespace fp8moe::test
