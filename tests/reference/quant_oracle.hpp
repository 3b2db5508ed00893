#pragma once
// An independent, deliberately plain blockwise quantizer: reference/SPEC.md 3.1 written out literally, for
// test_quantize.cpp. It shares no code with reference/formats.hpp, scale.hpp or quantize.cpp:
//   - codes are decoded from their fields with ldexp, and encoded by searching the sorted table of
//     all finite decoded codes for the nearest value (ties to the even code = even mantissa);
//   - the pow2 multiplier is rounded down with frexp/ldexp;
//   - every layout is built by gathering 1xB row groups of a (transposed) copy of the input.
// Codes of NaN values are 0x7f|sign in both formats (c10's cast after torch.clamp keeps NaN).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/formats.hpp"  // for the Fp8Format enum only

namespace fp8moe::oracle {

// Value of an FP8 code from its fields (e4m3fn: S EEEE MMM bias 7, 0x7f NaN, no Inf;
// e5m2: S EEEEE MM bias 15, E=31 Inf/NaN).
inline double decode(std::uint8_t c, Fp8Format f) {
  const bool e4 = f == Fp8Format::e4m3;
  const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15, emax_field = e4 ? 15 : 31;
  const int E = (c & 0x7f) >> mbits, M = c & ((1 << mbits) - 1);
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if (e4 && E == emax_field && M == (1 << mbits) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (!e4 && E == emax_field) return M ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (E == 0) return sign * std::ldexp(M, 1 - bias - mbits);
  return sign * std::ldexp((1 << mbits) + M, E - bias - mbits);
}

// Non-negative finite values of codes 0 .. max_code, indexed by code (ascending).
struct CodeTable {
  std::vector<double> value;
  double max_value;
  int max_code;
};
inline CodeTable code_table(Fp8Format f) {
  CodeTable t;
  for (int c = 0; c < 0x80; ++c) {
    const double v = decode(static_cast<std::uint8_t>(c), f);
    if (!std::isfinite(v)) break;
    t.value.push_back(v);
  }
  t.max_code = static_cast<int>(t.value.size()) - 1;
  t.max_value = t.value.back();
  return t;
}

// Nearest code to y (|y| <= max or NaN), ties to the even code. 2|y| vs lo + hi decides exactly:
// all three are small-precision values far inside double's range.
inline std::uint8_t encode(float y, const CodeTable& t) {
  const std::uint8_t sign = std::signbit(y) ? 0x80 : 0x00;
  if (std::isnan(y)) return static_cast<std::uint8_t>(sign | 0x7f);
  const double a = std::fabs(static_cast<double>(y));
  const auto it = std::upper_bound(t.value.begin(), t.value.end(), a);
  int code;
  if (it == t.value.end()) {
    code = t.max_code;  // a == max (clamped)
  } else {
    const int hi = static_cast<int>(it - t.value.begin()), lo = hi - 1;
    const double twice = 2.0 * a, mid2 = t.value[lo] + t.value[hi];
    code = twice < mid2 ? lo : twice > mid2 ? hi : (lo % 2 == 0 ? lo : hi);
  }
  return static_cast<std::uint8_t>(sign | code);
}

struct Options {
  int block = 128;
  bool pow2 = false;
  Fp8Format format = Fp8Format::e4m3;
};

struct Stats {
  std::int64_t elements = 0, nonfinite = 0, underflow = 0, saturated = 0, zero_blocks = 0;
  void add(const Stats& s) {
    elements += s.elements;
    nonfinite += s.nonfinite;
    underflow += s.underflow;
    saturated += s.saturated;
    zero_blocks += s.zero_blocks;
  }
};

// One scaling group, SPEC.md 3.1 line by line. Returns s_inv.
inline float quantize_group(const float* x, std::int64_t n, std::uint8_t* codes, const Options& o,
                            const CodeTable& t, Stats& st) {
  bool has_nan = false;
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) has_nan = true;
    else amax = std::max(amax, std::fabs(x[i]));
  }
  if (has_nan) {
    amax = std::numeric_limits<float>::quiet_NaN();
  } else if (amax < 1e-12f) {
    amax = 1e-12f;
    ++st.zero_blocks;
  }
  float scale = static_cast<float>(t.max_value / static_cast<double>(amax));
  if (o.pow2 && std::isfinite(scale) && scale > 0.0f) {
    int e = 0;
    std::frexp(scale, &e);  // scale = m 2^e, m in [0.5, 1): round down to 2^(e-1)
    scale = std::ldexp(1.0f, e - 1);
  }
  const float s_inv = 1.0f / scale;
  const auto fmax = static_cast<float>(t.max_value);
  for (std::int64_t i = 0; i < n; ++i) {
    float y = x[i] * scale;
    if (y > fmax) y = fmax;
    if (y < -fmax) y = -fmax;
    codes[i] = encode(y, t);
    if (!std::isfinite(x[i])) ++st.nonfinite;
    else if (x[i] != 0.0f && (codes[i] & 0x7f) == 0) ++st.underflow;
    if ((codes[i] & 0x7f) == t.max_code) ++st.saturated;
  }
  st.elements += n;
  return s_inv;
}

struct Result {
  std::vector<std::int64_t> code_shape, scale_shape;
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  Stats stats;
};

template <class T>
std::vector<T> transpose(const std::vector<T>& a, std::int64_t rows, std::int64_t cols) {
  std::vector<T> t(a.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) t[static_cast<std::size_t>(c * rows + r)] = a[static_cast<std::size_t>(r * cols + c)];
  }
  return t;
}

// 1xB groups along each row of x (R, C); the last group of a row may be short.
// Codes (R, C), scales (R, ceil(C/B)).
inline Result rows(const float* x, std::int64_t R, std::int64_t C, const Options& o) {
  const CodeTable t = code_table(o.format);
  const std::int64_t B = o.block, nb = (C + B - 1) / B;
  Result res{{R, C}, {R, nb}, std::vector<std::uint8_t>(static_cast<std::size_t>(R * C)),
             std::vector<float>(static_cast<std::size_t>(R * nb)), {}};
  std::int64_t el = 0, nf = 0, uf = 0, sat = 0, zb = 0;
#pragma omp parallel for schedule(static) reduction(+ : el, nf, uf, sat, zb)
  for (std::int64_t r = 0; r < R; ++r) {
    Stats st;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t c0 = b * B, n = std::min(B, C - c0);
      res.scales[static_cast<std::size_t>(r * nb + b)] =
          quantize_group(x + r * C + c0, n, res.codes.data() + r * C + c0, o, t, st);
    }
    el += st.elements;
    nf += st.nonfinite;
    uf += st.underflow;
    sat += st.saturated;
    zb += st.zero_blocks;
  }
  res.stats = Stats{el, nf, uf, sat, zb};
  return res;
}

// The 1x128 recipe: groups along K of x (M, K).
inline Result act_lhs(const std::vector<float>& x, std::int64_t M, std::int64_t K, const Options& o) {
  return rows(x.data(), M, K, o);
}

// Transposed lhs: 1xB groups along M of x^T (K, M).
inline Result act_lhs_t(const std::vector<float>& x, std::int64_t M, std::int64_t K, const Options& o) {
  const std::vector<float> xt = transpose(x, M, K);
  return rows(xt.data(), K, M, o);
}

// The 128x1 recipe: groups of B rows of one column = the transposed lhs result, transposed back.
inline Result act_rhs(const std::vector<float>& x, std::int64_t M, std::int64_t K, const Options& o) {
  Result t = act_lhs_t(x, M, K, o);  // codes (K, M), scales (K, nb)
  const std::int64_t nb = t.scale_shape[1];
  return Result{{M, K}, {nb, K}, transpose(t.codes, K, M), transpose(t.scales, K, nb), t.stats};
}

// BxB tiles of w (N, K): each tile gathered into one group. Codes (N, K), scales (N/B, K/B).
inline Result weight(const float* w, std::int64_t N, std::int64_t K, const Options& o) {
  const CodeTable t = code_table(o.format);
  const std::int64_t B = o.block, nb = N / B, kb = K / B;
  Result res{{N, K}, {nb, kb}, std::vector<std::uint8_t>(static_cast<std::size_t>(N * K)),
             std::vector<float>(static_cast<std::size_t>(nb * kb)), {}};
  std::vector<float> tile(static_cast<std::size_t>(B * B));
  std::vector<std::uint8_t> q(static_cast<std::size_t>(B * B));
  for (std::int64_t bn = 0; bn < nb; ++bn) {
    for (std::int64_t bk = 0; bk < kb; ++bk) {
      for (std::int64_t i = 0; i < B; ++i) {
        for (std::int64_t j = 0; j < B; ++j) tile[static_cast<std::size_t>(i * B + j)] = w[(bn * B + i) * K + bk * B + j];
      }
      res.scales[static_cast<std::size_t>(bn * kb + bk)] = quantize_group(tile.data(), B * B, q.data(), o, t, res.stats);
      for (std::int64_t i = 0; i < B; ++i) {
        for (std::int64_t j = 0; j < B; ++j) res.codes[static_cast<std::size_t>((bn * B + i) * K + bk * B + j)] = q[static_cast<std::size_t>(i * B + j)];
      }
    }
  }
  return res;
}

}  // namespace fp8moe::oracle
