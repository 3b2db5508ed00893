#pragma once
// Blockwise FP8 quantizers on the GPU (reference/SPEC.md 3.1, 4.1), one per recipe, bitwise equal to
// reference/quantize.hpp: same row-major layouts, same scale formula (reference/scale.hpp).
//
// | recipe        | input   | codes         | scales (s_inv)   | kernel                  |
// |---------------|---------|---------------|------------------|-------------------------|
// | act_lhs       | (M,K)   | (M,K)         | (M, K/B)         | quant_rowwise.cu        |
// | act_rhs       | (M,K)   | (M,K)         | (ceil(M/B), K)   | quant_colwise.cu        |
// | act_lhs_t     | (M,K)   | (K,M)         | (K, ceil(M/B))   | quant_colwise.cu        |
// | weight_fwd    | (E,N,K) | (E,N,K)       | (E, N/B, K/B)    | quant_tile.cu           |
// | weight_dgrad  | (E,N,K) | (E,K,N)       | (E, K/B, N/B)    | quant_tile.cu           |
// | kgrouped_lhs  | (M,D)   | (D,M)         | (D, M/B)         | quant_colwise.cu        |
// | kgrouped_rhs  | (M,D)   | (M,D)         | (M/B, D)         | quant_colwise.cu        |
// The K-grouped recipes are the column recipes on the whole tensor: every expert's token count is
// a multiple of B, so expert boundaries fall on block boundaries and the layouts coincide with
// reference/quantize.cpp's per-expert concatenation. A 2-D weight (N,K) is the E = 1 case.
// Input elements are fp32 or bf16 (raw 16 bits, Bf16Bits). Statistics (QuantStats) are not
// computed on the GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "reference/grouped_plan.hpp"
#include "reference/quantize.hpp"

namespace fp8moe::kernels {

using Bf16Bits = std::uint16_t;

using fp8moe::Recipe;  // reference/quantize.hpp: the quantizers by name
inline constexpr Recipe kAllRecipes[] = {Recipe::act_lhs,      Recipe::act_rhs,      Recipe::act_lhs_t,
                                         Recipe::weight_fwd,   Recipe::weight_dgrad, Recipe::kgrouped_lhs,
                                         Recipe::kgrouped_rhs};

// The layout of each recipe's codes and scales, and its preconditions: reference/'s, one mapping
// for the CPU and GPU quantizers (reference/quantize.hpp quant_layout).
using fp8moe::QuantLayout;
using fp8moe::quant_layout;

// Quantize x (device, in_shape) into preallocated device buffers of quant_layout's sizes.
template <class T>
void quantize_into(Recipe r, const T* x, const std::vector<std::int64_t>& in_shape, std::span<const std::int32_t> offs,
                   std::uint8_t* codes, float* scales, const QuantOptions& opt, cudaStream_t stream = nullptr);

// Owning result, copyable to reference/'s Quantized for comparison.
struct DeviceQuantized {
  DeviceBuffer<std::uint8_t> codes;
  DeviceBuffer<float> scales;
  QuantLayout layout;
  Fp8Format format = Fp8Format::e4m3;
  Recipe recipe = Recipe::act_lhs;
  Quantized to_host() const;  // stats left at zero
};

// A device operand as reference/grouped_plan's plan takes it (codes and scales stay on the device).
inline QuantOperand operand(const DeviceQuantized& q) {
  return QuantOperand{q.layout, q.codes.get(), q.scales.get(), q.recipe, q.format};
}
template <class T>
DeviceQuantized quantize(Recipe r, const T* x, const std::vector<std::int64_t>& in_shape,
                         std::span<const std::int32_t> offs, const QuantOptions& opt, cudaStream_t stream = nullptr);

// Per-kernel launchers (quant_rowwise.cu, quant_colwise.cu, quant_tile.cu); shapes already checked.
// groups of B consecutive elements: x (groups*B) -> codes (groups*B), scales (groups)
template <class T>
void launch_quant_rowwise(const T* x, std::int64_t groups, std::uint8_t* codes, float* scales, const QuantOptions& opt,
                          cudaStream_t stream);
// B rows x 1 column groups of x (M,K); codes (M,K) or, transposed, (K,M), written through `out`
// (quant_layout's layout of the recipe: the kernels index codes and scales with its formulas)
template <class T>
void launch_quant_colwise(const T* x, std::int64_t M, std::int64_t K, bool transpose, const QuantLayout& out,
                          std::uint8_t* codes, float* scales, const QuantOptions& opt, cudaStream_t stream);
// B x B tiles of w (E,N,K); codes (E,N,K) or, transposed, (E,K,N), written through `out`
template <class T>
void launch_quant_tile(const T* w, std::int64_t E, std::int64_t N, std::int64_t K, bool transpose,
                       const QuantLayout& out, std::uint8_t* codes, float* scales, const QuantOptions& opt,
                       cudaStream_t stream);

}  // namespace fp8moe::kernels
