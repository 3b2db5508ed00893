// Blockwise quantizers: each one enumerates its scaling groups and hands every group to
// quantize_group(), the single place where the scale formula of reference/scale.hpp is applied.
#include "reference/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/checked.hpp"

namespace fp8moe {

const char* recipe_name(Recipe r) {
  switch (r) {
    case Recipe::act_lhs: return "1x128";
    case Recipe::act_rhs: return "128x1";
    case Recipe::act_lhs_t: return "1x128T";
    case Recipe::weight_fwd: return "128x128";
    case Recipe::weight_dgrad: return "128x128T";
    case Recipe::kgrouped_lhs: return "kgrouped-lhs";
    case Recipe::kgrouped_rhs: return "kgrouped-rhs";
  }
  return "?";
}

void require_recipe(Recipe got, Recipe want, const char* what) {
  if (got != want) fail(what, " must be quantized with the ", recipe_name(want), " recipe, got ", recipe_name(got));
}

const char* format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

Fp8Format parse_format(const std::string& s) {
  if (s == "e4m3" || s == "e4m3fn") return Fp8Format::e4m3;
  if (s == "e5m2") return Fp8Format::e5m2;
  fail("unknown FP8 format '", s, "': use e4m3 or e5m2");
}

std::string block_sizes_text() {
  const std::vector<int> sizes = []<int... Bs>(std::integer_sequence<int, Bs...>) { return std::vector<int>{Bs...}; }(BlockSizes{});
  std::string s;
  for (std::size_t i = 0; i < sizes.size(); ++i) s += cat(i == 0 ? "" : i + 1 == sizes.size() ? " or " : ", ", sizes[i]);
  return s;
}

bool is_block_size(int block) {
  return []<int... Bs>(int b, std::integer_sequence<int, Bs...>) { return ((b == Bs) || ...); }(block, BlockSizes{});
}

void fail_block_size(const char* who, int block) {
  fail(who, "block size ", block, " is not supported: use ", block_sizes_text());
}

void check_quant_options(const QuantOptions& opt) {
  if (!is_block_size(opt.block)) fail_block_size("", opt.block);
}

float Quantized::scale_at(std::int64_t e, std::int64_t r, std::int64_t c) const {
  return scales.data[static_cast<std::size_t>(layout.scale_index(e, r, c))];
}

double OperandStats::scale_std() const {
  if (scaled_blocks == 0) return std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(scaled_blocks), mean = scale_sum / n;
  return std::sqrt(std::max(0.0, scale_sumsq / n - mean * mean));
}

double OperandStats::dynamic_range() const {
  if (scaled_blocks == 0 || !(amax_min > 0)) return std::numeric_limits<double>::quiet_NaN();
  return amax_max / amax_min;
}

void OperandStats::merge(const OperandStats& o) {
  auto lo = [](double a, double b) { return std::isnan(a) ? b : std::isnan(b) ? a : std::min(a, b); };
  auto hi = [](double a, double b) { return std::isnan(a) ? b : std::isnan(b) ? a : std::max(a, b); };
  elements += o.elements;
  blocks += o.blocks;
  empty_blocks += o.empty_blocks;
  underflow += o.underflow;
  overflow += o.overflow;
  nonfinite += o.nonfinite;
  scaled_blocks += o.scaled_blocks;
  scale_sum += o.scale_sum;
  scale_sumsq += o.scale_sumsq;
  scale_min = lo(scale_min, o.scale_min);
  scale_max = hi(scale_max, o.scale_max);
  amax_min = lo(amax_min, o.amax_min);
  amax_max = hi(amax_max, o.amax_max);
}

OperandStats operand_stats(const TensorF& x, const Quantized& q) {
  if (x.shape != q.codes.shape) {
    fail("operand_stats: the input's shape does not match the codes' (give the input in the codes' layout)");
  }
  const QuantLayout& L = q.layout;
  const std::int64_t nblocks = L.batch * L.scale_rows() * L.scale_cols();
  std::vector<float> amax(static_cast<std::size_t>(nblocks), 0.0f);
  std::vector<char> any_nonzero(static_cast<std::size_t>(nblocks), 0), any_nonfinite(static_cast<std::size_t>(nblocks), 0);
  OperandStats s;
  s.elements = x.numel();
  s.blocks = nblocks;
  // Pass 1: each block's amax over its finite inputs.
  for (std::int64_t e = 0; e < L.batch; ++e) {
    for (std::int64_t r = 0; r < L.rows; ++r) {
      for (std::int64_t c = 0; c < L.cols; ++c) {
        const float v = x.data[static_cast<std::size_t>(L.code_index(e, r, c))];
        const auto b = static_cast<std::size_t>(L.scale_index(e, r, c));
        if (!std::isfinite(v)) {
          any_nonfinite[b] = 1;
          continue;
        }
        if (v != 0.0f) any_nonzero[b] = 1;
        amax[b] = std::max(amax[b], std::fabs(v));
      }
    }
  }
  for (std::size_t b = 0; b < amax.size(); ++b) {
    if (!any_nonzero[b] && !any_nonfinite[b]) {
      ++s.empty_blocks;
      continue;
    }
    if (any_nonfinite[b]) continue;  // its scale says nothing of the data
    const double sinv = q.scales.data[b], a = amax[b];
    ++s.scaled_blocks;
    s.scale_sum += sinv;
    s.scale_sumsq += sinv * sinv;
    s.scale_min = std::isnan(s.scale_min) ? sinv : std::min(s.scale_min, sinv);
    s.scale_max = std::isnan(s.scale_max) ? sinv : std::max(s.scale_max, sinv);
    s.amax_min = std::isnan(s.amax_min) ? a : std::min(s.amax_min, a);
    s.amax_max = std::isnan(s.amax_max) ? a : std::max(s.amax_max, a);
  }
  // Pass 2: per element, against its block's multiplier and code.
  const double fmax = fp8_max(q.format);
  for (std::int64_t e = 0; e < L.batch; ++e) {
    for (std::int64_t r = 0; r < L.rows; ++r) {
      for (std::int64_t c = 0; c < L.cols; ++c) {
        const std::int64_t i = L.code_index(e, r, c);
        const float v = x.data[static_cast<std::size_t>(i)];
        if (!std::isfinite(v)) {
          ++s.nonfinite;
          continue;
        }
        const auto b = static_cast<std::size_t>(L.scale_index(e, r, c));
        if (any_nonfinite[b]) continue;  // a NaN or Inf amax: the block's codes are not the data's
        // Beyond what the block's stored scale can represent: fmax * s_inv, with a margin of one
        // part in 2^20 for the fp32 rounding of the scale (a block's own amax lands on the max by
        // construction; only a scale not made from the block's data leaves values beyond it).
        if (static_cast<double>(std::fabs(v)) > fmax * static_cast<double>(q.scales.data[b]) * (1.0 + 0x1p-20)) {
          ++s.overflow;
        }
        if (v != 0.0f && fp8_decode(q.codes.data[static_cast<std::size_t>(i)], q.format) == 0.0f) ++s.underflow;
      }
    }
  }
  return s;
}

namespace {


void require_multiple(const char* what, std::int64_t value, int block, const char* fix) {
  if (value % block != 0) {
    fail(what, " = ", value, " is not a multiple of the quantization block ", block, ": ", fix);
  }
}

// Quantize one scaling group: `n` elements read from src[i * src_stride] and written to
// dst[i * dst_stride]. Returns s_inv and accumulates the group's statistics.
float quantize_group(const float* src, std::int64_t src_stride, std::uint8_t* dst, std::int64_t dst_stride,
                     std::int64_t n, const QuantOptions& opt, QuantStats& st) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) amax = amax_update(amax, src[i * src_stride]);
  if (amax < kAmaxFloor) ++st.zero_blocks;
  const BlockScale bs = block_scale(amax, opt.format, opt.pow2_scales);
  const Fp8Spec spec = fp8_spec(opt.format);
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = src[i * src_stride];
    const std::uint8_t q = quantize_element(x, bs.scale, opt.format);
    dst[i * dst_stride] = q;
    const bool finite = (f32_bits(x) & 0x7f800000u) != 0x7f800000u;
    if (!finite) ++st.nonfinite_inputs;
    else if (x != 0.0f && (q & 0x7f) == 0) ++st.underflow;
    if ((q & 0x7f) == spec.max_code) ++st.saturated;
  }
  st.elements += n;
  return bs.s_inv;
}

void merge(QuantStats& into, const QuantStats& s) {
  into.elements += s.elements;
  into.nonfinite_inputs += s.nonfinite_inputs;
  into.underflow += s.underflow;
  into.saturated += s.saturated;
  into.zero_blocks += s.zero_blocks;
}

// Row-group quantization of a (rows, cols) slab: groups of B consecutive elements along cols
// (`along_rows` false) or B consecutive rows of one column (`along_rows` true). Codes are written
// in place (same layout) or transposed (codes (cols, rows)). Scale tensors are (rows, cols/B)
// for row groups and (ceil(rows/B), cols) for column groups, transposed along with the codes.
struct Slab {
  const float* x;
  std::int64_t rows, cols;
};

void quantize_slab(const Slab& s, bool along_rows, bool transpose, std::uint8_t* codes, float* scales,
                   const QuantOptions& opt, QuantStats& stats) {
  const std::int64_t B = opt.block;
  if (!along_rows) {
    const std::int64_t kb = s.cols / B;
    QuantStats total;
#pragma omp parallel
    {
      QuantStats st;
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < s.rows; ++r) {
        for (std::int64_t b = 0; b < kb; ++b) {
          const float* src = s.x + r * s.cols + b * B;
          if (!transpose) {
            scales[r * kb + b] = quantize_group(src, 1, codes + r * s.cols + b * B, 1, B, opt, st);
          } else {
            scales[b * s.rows + r] = quantize_group(src, 1, codes + (b * B) * s.rows + r, s.rows, B, opt, st);
          }
        }
      }
#pragma omp critical
      merge(total, st);
    }
    merge(stats, total);
    return;
  }
  const std::int64_t mb = ceil_div(s.rows, B);
  QuantStats total;
#pragma omp parallel
  {
    QuantStats st;
#pragma omp for schedule(static) collapse(2)
    for (std::int64_t b = 0; b < mb; ++b) {
      for (std::int64_t c = 0; c < s.cols; ++c) {
        const std::int64_t r0 = b * B, n = std::min(B, s.rows - r0);
        const float* src = s.x + r0 * s.cols + c;
        if (!transpose) {
          scales[b * s.cols + c] = quantize_group(src, s.cols, codes + r0 * s.cols + c, s.cols, n, opt, st);
        } else {
          scales[c * mb + b] = quantize_group(src, s.cols, codes + c * s.rows + r0, 1, n, opt, st);
        }
      }
    }
#pragma omp critical
    merge(total, st);
  }
  merge(stats, total);
}

// 128x128 tiles of one (N, K) matrix; codes in place or transposed (K, N).
void quantize_tiles(const float* w, std::int64_t N, std::int64_t K, bool transpose, std::uint8_t* codes,
                    float* scales, const QuantOptions& opt, QuantStats& stats) {
  const std::int64_t B = opt.block, nb = N / B, kb = K / B;
  QuantStats total;
#pragma omp parallel
  {
    QuantStats st;
    std::vector<float> tile(static_cast<std::size_t>(B * B));
    std::vector<std::uint8_t> qt(static_cast<std::size_t>(B * B));
#pragma omp for schedule(static) collapse(2)
    for (std::int64_t bn = 0; bn < nb; ++bn) {
      for (std::int64_t bk = 0; bk < kb; ++bk) {
        for (std::int64_t i = 0; i < B; ++i) {
          std::copy_n(w + (bn * B + i) * K + bk * B, B, tile.data() + i * B);
        }
        const float s_inv = quantize_group(tile.data(), 1, qt.data(), 1, B * B, opt, st);
        for (std::int64_t i = 0; i < B; ++i) {
          for (std::int64_t j = 0; j < B; ++j) {
            const std::int64_t n = bn * B + i, k = bk * B + j;
            codes[transpose ? k * N + n : n * K + k] = qt[static_cast<std::size_t>(i * B + j)];
          }
        }
        scales[transpose ? bk * nb + bn : bn * kb + bk] = s_inv;
      }
    }
#pragma omp critical
    merge(total, st);
  }
  merge(stats, total);
}

// The codes and scales of recipe r for x, shaped by quant_layout (which checks the recipe's
// preconditions).
Quantized make(Recipe r, const std::vector<std::int64_t>& in, std::span<const std::int32_t> offs, const QuantOptions& opt) {
  check_quant_options(opt);
  Quantized q;
  q.layout = quant_layout(r, in, offs, opt);
  q.codes = TensorU8(q.layout.code_shape());
  q.scales = TensorF(q.layout.scale_shape());
  q.format = opt.format;
  q.recipe = r;
  return q;
}

void require_rank(const std::vector<std::int64_t>& s, std::size_t rank, Recipe r) {
  if (s.size() != rank) fail("the ", recipe_name(r), " quantizer expects a ", rank, "-D tensor, got shape ", shape_str(s));
}

QuantLayout layout_2d(std::int64_t rows, std::int64_t cols, int br, int bc) {
  return QuantLayout{false, 1, rows, cols, br, bc};
}

}  // namespace

void check_kgroup_offsets(std::span<const std::int32_t> offs, std::int64_t M, int B) {
  std::int32_t prev = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    if (offs[e] < prev) fail("offsets must not decrease: offs[", e, "] = ", offs[e], " < ", prev);
    if ((offs[e] - prev) % B != 0) {
      fail("expert ", e, " has ", offs[e] - prev, " tokens, not a multiple of the quantization block ", B,
           ": turn token-group padding on");
    }
    prev = offs[e];
  }
  if (prev != M) fail("the last offset is ", prev, " but the tensor has ", M, " rows: offs[E-1] must equal M");
}


QuantLayout quant_layout(Recipe r, const std::vector<std::int64_t>& s, std::span<const std::int32_t> offs,
                         const QuantOptions& opt) {
  check_quant_options(opt);
  const int B = opt.block;
  switch (r) {
    case Recipe::act_lhs:  // 1 x B along K: (M, K) -> codes (M, K)
      require_rank(s, 2, r);
      require_multiple("K (the quantized dim of the 1x128 recipe)", s[1], B, "pad K to a multiple of the block");
      return layout_2d(s[0], s[1], 1, B);
    case Recipe::act_rhs:  // B x 1 along tokens, a ragged last block: (M, K) -> codes (M, K)
      require_rank(s, 2, r);
      return layout_2d(s[0], s[1], B, 1);
    case Recipe::act_lhs_t:  // 1 x B along tokens of x^T: (M, K) -> codes (K, M)
      require_rank(s, 2, r);
      return layout_2d(s[1], s[0], 1, B);
    case Recipe::weight_fwd:
    case Recipe::weight_dgrad: {  // B x B tiles: (E, N, K) -> codes (E, N, K), or (E, K, N) for dgrad; also 2-D (N, K)
      if (s.size() != 2) require_rank(s, 3, r);
      const std::size_t d = s.size() - 2;
      require_multiple("N (weight rows)", s[d], B, "use a weight dim that is a multiple of the block");
      require_multiple("K (weight columns)", s[d + 1], B, "use a weight dim that is a multiple of the block");
      const bool t = r == Recipe::weight_dgrad;
      return QuantLayout{s.size() == 3, s.size() == 3 ? s[0] : 1, t ? s[d + 1] : s[d], t ? s[d] : s[d + 1], B, B};
    }
    case Recipe::kgrouped_lhs:  // per-expert 1 x B along tokens: (M, D) -> codes (D, M)
      require_rank(s, 2, r);
      check_kgroup_offsets(offs, s[0], B);
      return layout_2d(s[1], s[0], 1, B);
    case Recipe::kgrouped_rhs:  // per-expert B x 1 along tokens: (M, D) -> codes (M, D)
      require_rank(s, 2, r);
      check_kgroup_offsets(offs, s[0], B);
      return layout_2d(s[0], s[1], B, 1);
  }
  fail("unknown recipe ", static_cast<int>(r));
}

Quantized quantize_act_lhs(const TensorF& x, const QuantOptions& opt) {
  check_quant_options(opt);
  Quantized q = make(Recipe::act_lhs, x.shape, {}, opt);
  const std::int64_t M = x.dim(0), K = x.dim(1);
  quantize_slab({x.ptr(), M, K}, false, false, q.codes.ptr(), q.scales.ptr(), opt, q.stats);
  return q;
}

Quantized quantize_act_rhs(const TensorF& x, const QuantOptions& opt) {
  check_quant_options(opt);
  Quantized q = make(Recipe::act_rhs, x.shape, {}, opt);
  const std::int64_t M = x.dim(0), K = x.dim(1);
  quantize_slab({x.ptr(), M, K}, true, false, q.codes.ptr(), q.scales.ptr(), opt, q.stats);
  return q;
}

Quantized quantize_act_lhs_t(const TensorF& x, const QuantOptions& opt) {
  check_quant_options(opt);
  Quantized q = make(Recipe::act_lhs_t, x.shape, {}, opt);
  const std::int64_t M = x.dim(0), K = x.dim(1);
  quantize_slab({x.ptr(), M, K}, true, true, q.codes.ptr(), q.scales.ptr(), opt, q.stats);
  return q;
}

Quantized quantize_weight(const TensorF& w, const QuantOptions& opt) {
  check_quant_options(opt);
  if (w.rank() != 2) fail("the 128x128 weight quantizer expects a 2-D tensor, got shape ", shape_str(w.shape));
  Quantized q = make(Recipe::weight_fwd, w.shape, {}, opt);
  const std::int64_t N = w.dim(0), K = w.dim(1);
  quantize_tiles(w.ptr(), N, K, false, q.codes.ptr(), q.scales.ptr(), opt, q.stats);
  return q;
}

Quantized quantize_grouped_weight(const TensorF& w, WeightOrientation orient, const QuantOptions& opt) {
  check_quant_options(opt);
  if (w.rank() != 3) fail("the grouped weight quantizer expects a 3-D tensor, got shape ", shape_str(w.shape));
  const bool t = orient == WeightOrientation::dgrad;
  Quantized q = make(t ? Recipe::weight_dgrad : Recipe::weight_fwd, w.shape, {}, opt);
  const std::int64_t E = w.dim(0), N = w.dim(1), K = w.dim(2), B = opt.block;
  for (std::int64_t e = 0; e < E; ++e) {
    quantize_tiles(w.ptr() + e * N * K, N, K, t, q.codes.ptr() + e * N * K, q.scales.ptr() + e * (N / B) * (K / B),
                   opt, q.stats);
  }
  return q;
}

Quantized quantize_kgrouped_lhs(const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt) {
  check_quant_options(opt);
  // Codes (D, M): expert e owns columns [start_e, end_e) and scale columns [start_e/B, end_e/B).
  Quantized q = make(Recipe::kgrouped_lhs, x.shape, offs, opt);
  const std::int64_t M = x.dim(0), D = x.dim(1), B = opt.block;
  std::int64_t start = 0;
  for (std::int32_t end : offs) {
    const std::int64_t Me = end - start;
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(D * Me));
    std::vector<float> scales(static_cast<std::size_t>(D * (Me / B)));
    quantize_slab({x.ptr() + start * D, Me, D}, true, true, codes.data(), scales.data(), opt, q.stats);
    for (std::int64_t d = 0; d < D; ++d) {
      std::copy_n(codes.data() + d * Me, Me, q.codes.ptr() + d * M + start);
      std::copy_n(scales.data() + d * (Me / B), Me / B, q.scales.ptr() + d * (M / B) + start / B);
    }
    start = end;
  }
  return q;
}

Quantized quantize_kgrouped_rhs(const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt) {
  check_quant_options(opt);
  // Codes (M, D) in place; expert e owns scale rows [start_e/B, end_e/B).
  Quantized q = make(Recipe::kgrouped_rhs, x.shape, offs, opt);
  const std::int64_t M = x.dim(0), D = x.dim(1), B = opt.block;
  std::int64_t start = 0;
  for (std::int32_t end : offs) {
    const std::int64_t Me = end - start;
    quantize_slab({x.ptr() + start * D, Me, D}, true, false, q.codes.ptr() + start * D,
                  q.scales.ptr() + (start / B) * D, opt, q.stats);
    start = end;
  }
  return q;
}

Quantized quantize(Recipe r, const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt) {
  switch (r) {
    case Recipe::act_lhs: return quantize_act_lhs(x, opt);
    case Recipe::act_rhs: return quantize_act_rhs(x, opt);
    case Recipe::act_lhs_t: return quantize_act_lhs_t(x, opt);
    case Recipe::weight_fwd: return quantize_grouped_weight(x, WeightOrientation::fwd, opt);
    case Recipe::weight_dgrad: return quantize_grouped_weight(x, WeightOrientation::dgrad, opt);
    case Recipe::kgrouped_lhs: return quantize_kgrouped_lhs(x, offs, opt);
    case Recipe::kgrouped_rhs: return quantize_kgrouped_rhs(x, offs, opt);
  }
  fail("unknown recipe ", static_cast<int>(r));
}

namespace {

// value(code, s_inv) for every element of q, in the codes' shape.
template <class F>
TensorF dequantize_with(const Quantized& q, F value) {
  TensorF out(q.codes.shape);
  const std::int64_t E = q.codes.rank() == 3 ? q.codes.dim(0) : 1;
  const std::int64_t R = q.codes.dim(q.codes.rank() - 2), C = q.codes.dim(q.codes.rank() - 1);
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t e = 0; e < E; ++e) {
    for (std::int64_t r = 0; r < R; ++r) {
      for (std::int64_t c = 0; c < C; ++c) {
        const std::size_t i = static_cast<std::size_t>((e * R + r) * C + c);
        out.data[i] = value(fp8_decode(q.codes.data[i], q.format), q.scale_at(e, r, c));
      }
    }
  }
  return out;
}

}  // namespace

TensorF dequantize(const Quantized& q) {
  return dequantize_with(q, [](float v, float s) { return v * s; });
}

TensorF dequantize_bf16(const Quantized& q) {
  return dequantize_with(q, [](float v, float s) { return round_bf16(round_bf16(v) * round_bf16(s)); });
}

}  // namespace fp8moe
