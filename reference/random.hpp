#pragma once
// Counter-based random numbers keyed by (seed, tensor id, global element index), host+device
// (reference/SPEC.md 13 data generation; nccl-tests' verifiable data habit). Any rank on any device
// can generate any slice of a global tensor bit-identically: element i of tensor t under seed s is
// a pure function of (s, t, i).
//
// The transforms use only +, *, / and sqrt, written without contraction-sensitive expressions
// (explicit fma() where fused), so host and device produce the same bits; no libm calls.
#include <cmath>

#include "reference/formats.hpp"

namespace fp8moe {

struct Philox4 {
  std::uint32_t v[4];
};

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
FP8MOE_HD Philox4 philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                                std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Four random words for (seed, tensor, index, stream).
FP8MOE_HD Philox4 keyed_random(std::uint64_t seed, std::uint32_t tensor_id, std::uint64_t index,
                               std::uint32_t stream) {
  return philox4x32_10(static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), tensor_id,
                       stream, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Uniform double in (0, 1) from 32 random bits (never 0, never 1).
FP8MOE_HD double uniform_open01(std::uint32_t r) { return (static_cast<double>(r) + 0.5) * 0x1p-32; }

// Natural log for x in (0, inf), deterministic: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(f), f = (m-1)/(m+1), |f| <= 0.1716; the odd series to f^29 is below 1e-22.
FP8MOE_HD double det_log(double x) {
  std::uint64_t u = f64_bits(x);
  int e = static_cast<int>((u >> 52) & 0x7ff) - 1023;
  u = (u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m = f64_from_bits(u);
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    e += 1;
  }
  const double f = (m - 1.0) / (m + 1.0);
  const double f2 = f * f;
  double p = 1.0 / 29.0;
  for (int k = 27; k >= 1; k -= 2) p = fma(p, f2, 1.0 / k);
  return fma(static_cast<double>(e), 0.69314718055994530942, 2.0 * f * p);
}

// sin and cos of 2*pi*t for t in [0, 1), deterministic: reduce to an octant-free quarter turn
// and evaluate Taylor polynomials on |x| <= pi/4 (error below 1e-16).
FP8MOE_HD void det_sincos_2pi(double t, double* s, double* c) {
  // quadrant q and remainder r in [-1/8, 1/8) turns
  const double t4 = t * 4.0;
  int q = static_cast<int>(t4 + 0.5);
  const double r = (t4 - q) * 0.25;  // exact: t4 and q are close, scaling by a power of two
  const double x = r * 6.283185307179586476925;
  const double x2 = x * x;
  double ps = -1.0 / 1307674368000.0;  // -1/15!
  double pc = 1.0 / 20922789888000.0;  // 1/16!
  const double inv_fact_odd[] = {1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0,
                                 1.0 / 120.0,        -1.0 / 6.0,        1.0};
  const double inv_fact_even[] = {-1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0, 1.0 / 40320.0,
                                  -1.0 / 720.0,         1.0 / 24.0,        -0.5,              1.0};
  for (double k : inv_fact_odd) ps = fma(ps, x2, k);
  for (double k : inv_fact_even) pc = fma(pc, x2, k);
  const double sx = ps * x, cx = pc;
  switch (q & 3) {
    case 0: *s = sx; *c = cx; break;
    case 1: *s = cx; *c = -sx; break;
    case 2: *s = -sx; *c = -cx; break;
    default: *s = -cx; *c = sx; break;
  }
}

// Two independent standard normals from two random words (Box-Muller).
FP8MOE_HD void normal_pair(std::uint32_t r0, std::uint32_t r1, double* z0, double* z1) {
  const double rad = sqrt(-2.0 * det_log(uniform_open01(r0)));
  double s, c;
  det_sincos_2pi(uniform_open01(r1), &s, &c);
  *z0 = rad * c;
  *z1 = rad * s;
}

enum class Dist : std::uint8_t { normal, uniform, student_t3, outlier_channels };

// Outlier channels: a column is an outlier when its keyed hash says so (about 1 in 64 columns),
// and its values are scaled by 100; the values themselves are standard normal.
inline constexpr std::uint32_t kOutlierStream = 0x1Fu;
inline constexpr float kOutlierGain = 100.0f;
FP8MOE_HD bool is_outlier_column(std::uint64_t seed, std::uint32_t tensor_id, std::uint64_t col) {
  return (keyed_random(seed, tensor_id ^ 0x5bd1e995u, col, kOutlierStream).v[0] & 63u) == 0u;
}

// Element `index` of a tensor with distribution `dist`, rounded to bf16 (returned as float).
// `col` is the element's column (last-dim index), used by outlier_channels.
FP8MOE_HD float generate_element(Dist dist, std::uint64_t seed, std::uint32_t tensor_id, std::uint64_t index,
                                 std::uint64_t col) {
  const Philox4 r = keyed_random(seed, tensor_id, index, 0);
  double v = 0.0;
  switch (dist) {
    case Dist::uniform:
      v = 2.0 * uniform_open01(r.v[0]) - 1.0;  // U(-1, 1)
      break;
    case Dist::normal:
    case Dist::outlier_channels: {
      double z0, z1;
      normal_pair(r.v[0], r.v[1], &z0, &z1);
      v = z0;
      if (dist == Dist::outlier_channels && is_outlier_column(seed, tensor_id, col)) v *= kOutlierGain;
      break;
    }
    case Dist::student_t3: {
      // t = Z / sqrt(V/3) with V ~ chi^2(3): four normals from one Philox block.
      double z0, z1, z2, z3;
      normal_pair(r.v[0], r.v[1], &z0, &z1);
      normal_pair(r.v[2], r.v[3], &z2, &z3);
      const double chi = fma(z1, z1, fma(z2, z2, z3 * z3));
      v = z0 / sqrt(chi / 3.0);
      break;
    }
  }
  return round_bf16(v);
}

}  // namespace fp8moe
