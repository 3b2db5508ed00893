#pragma once
// Blockwise FP8 quantizers (reference/SPEC.md 3.1, 4.1). All inputs are float tensors holding fp32 or
// bf16-valued data; every quantizer applies the one scale formula of reference/scale.hpp.
//
// | quantizer                 | input   | codes        | scales (s_inv)             | block (rows x cols of codes) |
// |---------------------------|---------|--------------|----------------------------|------------------------------|
// | quantize_act_lhs          | (M,K)   | (M,K)        | (M, K/B)                   | 1 x B                        |
// | quantize_act_rhs          | (M,K)   | (M,K)        | (ceil(M/B), K)             | B x 1                        |
// | quantize_act_lhs_t        | (M,K)   | (K,M)        | (K, ceil(M/B))             | 1 x B                        |
// | quantize_weight           | (N,K)   | (N,K)        | (N/B, K/B)                 | B x B                        |
// | quantize_grouped_weight   | (E,N,K) | (E,N,K) fwd  | (E, N/B, K/B)              | B x B                        |
// |                           |         | (E,K,N) dgrad| (E, K/B, N/B)              | B x B                        |
// | quantize_kgrouped_lhs     | (M,D)   | (D,M)        | (D, sum M_e/B)             | 1 x B, within each expert    |
// | quantize_kgrouped_rhs     | (M,D)   | (M,D)        | (sum M_e/B, D)             | B x 1, within each expert    |
// Ragged M is zero-filled (a partial block's amax is over its real rows). K, N, D and, for the
// K-grouped quantizers, every expert's token count must be multiples of B.
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference/formats.hpp"
#include "reference/quant_layout.hpp"
#include "reference/scale.hpp"
#include "reference/tensor.hpp"

namespace fp8moe {

// The quantization blocks fp8moe supports (SPEC.md 4): one list, and one dispatch from a run-time
// block to code compiled for it (the GPU quantizers' templates).
using BlockSizes = std::integer_sequence<int, 64, 128, 256>;
std::string block_sizes_text();  // "64, 128 or 256"
bool is_block_size(int block);
[[noreturn]] void fail_block_size(const char* who, int block);

// Calls f(std::integral_constant<int, B>{}) for the B of BlockSizes equal to `block`; an Error
// naming `who` and the sizes otherwise.
template <class F, int... Bs>
void dispatch_block_in(const char* who, int block, F&& f, std::integer_sequence<int, Bs...>) {
  const bool found = ((block == Bs ? (f(std::integral_constant<int, Bs>{}), true) : false) || ...);
  if (!found) fail_block_size(who, block);
}
template <class F>
void dispatch_block(const char* who, int block, F&& f) {
  dispatch_block_in(who, block, std::forward<F>(f), BlockSizes{});
}

struct QuantOptions {
  int block = 128;  // one of BlockSizes
  bool pow2_scales = false;
  Fp8Format format = Fp8Format::e4m3;
};

struct QuantStats {
  std::int64_t elements = 0;
  std::int64_t nonfinite_inputs = 0;  // NaN or Inf in the input
  std::int64_t underflow = 0;         // non-zero finite inputs whose code is a zero
  std::int64_t saturated = 0;         // codes at +-max (the clamp hit, or the value landed there)
  std::int64_t zero_blocks = 0;       // groups whose amax took the 1e-12 floor
};

// The quantizers (one per operand layout), named for the backends that dispatch on them.
enum class Recipe : std::uint8_t {
  act_lhs,       // 1x128 along the last dim, (M,K) -> codes (M,K)
  act_rhs,       // 128x1 along tokens, (M,K) -> codes (M,K)
  act_lhs_t,     // 1x128 along tokens of x^T, (M,K) -> codes (K,M)
  weight_fwd,    // grouped 128x128, (E,N,K) -> codes (E,N,K)
  weight_dgrad,  // grouped 128x128 transposed, (E,N,K) -> codes (E,K,N)
  kgrouped_lhs,  // per-expert 1x128 along tokens, (M,D) -> codes (D,M)
  kgrouped_rhs,  // per-expert 128x1 along tokens, (M,D) -> codes (M,D)
};
const char* recipe_name(Recipe r);  // "1x128", "128x1", "1x128T", "128x128", "128x128T", "kgrouped-lhs", ...
inline std::ostream& operator<<(std::ostream& os, Recipe r) { return os << recipe_name(r); }

// The operand check of every grouped pass (CPU, simt, cuBLASLt): an operand quantized with another
// recipe is an Error naming `what`, both recipes.
void require_recipe(Recipe got, Recipe want, const char* what);

// The layout recipe r gives an input of shape `in` (offs: the K-grouped recipes' token groups),
// after the recipe's preconditions: its rank, the dims that must be multiples of the block, the
// groups' offsets (an Error naming the dim, the value and the fix). The CPU and GPU quantizers
// both take their code and scale shapes from here.
QuantLayout quant_layout(Recipe r, const std::vector<std::int64_t>& in, std::span<const std::int32_t> offs,
                         const QuantOptions& opt);

struct Quantized {
  TensorU8 codes;       // layout.code_shape()
  TensorF scales;       // the stored reciprocal s_inv, one per block: layout.scale_shape()
  QuantLayout layout;   // block extents along the codes' last two dims, and the index math
  Fp8Format format = Fp8Format::e4m3;
  Recipe recipe = Recipe::act_lhs;  // recipe_name(): "1x128", "128x1", "1x128T", "128x128", ...
  QuantStats stats;

  // s_inv for element (e, r, c) of the codes (e = 0 for 2-D codes).
  float scale_at(std::int64_t e, std::int64_t r, std::int64_t c) const;
};

// An operand's quantization as TransformerEngine's debug features report it, per operand role
// (SPEC.md 8.4). Blocks whose inputs are all zero (token-group padding, zero rows) are "empty":
// counted, and left out of the scale and dynamic-range figures, whose floor-clamped amax would
// otherwise dominate them (TransformerEngine issue 2628: padding made its scale min always 0).
// Mergeable: the layer's operands of one role are summed with `merge`.
struct OperandStats {
  std::int64_t elements = 0;
  std::int64_t blocks = 0;
  std::int64_t empty_blocks = 0;   // every input zero: no scale statistics from them
  std::int64_t underflow = 0;      // non-zero finite inputs whose code is a zero
  std::int64_t overflow = 0;       // finite inputs beyond fmax * s_inv of their block (clamped)
  std::int64_t nonfinite = 0;      // NaN or Inf inputs
  // Over the non-empty blocks with a finite amax: the stored scale s_inv (count, sum, sum of
  // squares, min, max) and the amax (min, max).
  std::int64_t scaled_blocks = 0;
  double scale_sum = 0, scale_sumsq = 0;
  double scale_min = std::numeric_limits<double>::quiet_NaN(), scale_max = std::numeric_limits<double>::quiet_NaN();
  double amax_min = std::numeric_limits<double>::quiet_NaN(), amax_max = std::numeric_limits<double>::quiet_NaN();

  double scale_std() const;      // population standard deviation of s_inv; NaN without a block
  double dynamic_range() const;  // amax_max / amax_min over the non-empty blocks; NaN without one
  void merge(const OperandStats& o);
};

// The statistics of `q`, the quantization of `x` (x in the codes' layout, the operand as the
// quantizer saw it, padding rows included). `q` may hold scales not made from x (a user's codes
// and scales): overflow counts the inputs beyond what their block's stored scale represents.
OperandStats operand_stats(const TensorF& x, const Quantized& q);

enum class WeightOrientation { fwd, dgrad };


// Offsets for the K-grouped quantizers: non-decreasing, ending at M, every expert's token count a
// multiple of B (else an Error naming the expert and saying to turn padding on).
void check_kgroup_offsets(std::span<const std::int32_t> offs, std::int64_t M, int B);

Quantized quantize_act_lhs(const TensorF& x, const QuantOptions& opt);
Quantized quantize_act_rhs(const TensorF& x, const QuantOptions& opt);
Quantized quantize_act_lhs_t(const TensorF& x, const QuantOptions& opt);
Quantized quantize_weight(const TensorF& w, const QuantOptions& opt);
Quantized quantize_grouped_weight(const TensorF& w, WeightOrientation orient, const QuantOptions& opt);
Quantized quantize_kgrouped_lhs(const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt);
Quantized quantize_kgrouped_rhs(const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt);

// The quantizer named by `r` (offs for the K-grouped recipes only).
Quantized quantize(Recipe r, const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt);

// decode(code) * s_inv for every element, in the codes' shape (fp32 products, as torchao's
// dequantize does). Non-finite codes give NaN.
TensorF dequantize(const Quantized& q);
// torchao's emulated path: bf16(code) * bf16(s_inv), rounded to bf16.
TensorF dequantize_bf16(const Quantized& q);

void check_quant_options(const QuantOptions& opt);
const char* format_name(Fp8Format f);
Fp8Format parse_format(const std::string& s);  // "e4m3" | "e5m2", else Error naming the allowed values

}  // namespace fp8moe
