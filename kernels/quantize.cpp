// Host side of the GPU quantizers: the preconditions and layouts of reference/quantize.cpp, and
// the dispatch of each recipe to its kernel.
#include "kernels/quantize.hpp"

#include <cstdint>

#include "reference/checked.hpp"

namespace fp8moe::kernels {
namespace {

void require_multiple(const char* what, std::int64_t value, int block) {
  if (value % block != 0) fail(what, " = ", value, " is not a multiple of the quantization block ", block);
}

void require_rank(const std::vector<std::int64_t>& s, std::size_t rank, Recipe r) {
  if (s.size() != rank) fail("the ", recipe_name(r), " quantizer expects a ", rank, "-D tensor, got shape ", shape_str(s));
}

// Token offsets for the K-grouped recipes: non-decreasing, each group a multiple of B, ending at M.
std::int64_t product(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace


std::int64_t QuantLayout::code_count() const { return product(codes); }
std::int64_t QuantLayout::scale_count() const { return product(scales); }

QuantLayout quant_layout(Recipe r, const std::vector<std::int64_t>& s, std::span<const std::int32_t> offs,
                         const QuantOptions& opt) {
  check_quant_options(opt);
  const int B = opt.block;
  QuantLayout l;
  switch (r) {
    case Recipe::act_lhs:
      require_rank(s, 2, r);
      require_multiple("K (the quantized dim of the 1x128 recipe)", s[1], B);
      return {{s[0], s[1]}, {s[0], s[1] / B}, 1, B};
    case Recipe::act_rhs:
      require_rank(s, 2, r);
      return {{s[0], s[1]}, {ceil_div(s[0], B), s[1]}, B, 1};
    case Recipe::act_lhs_t:
      require_rank(s, 2, r);
      return {{s[1], s[0]}, {s[1], ceil_div(s[0], B)}, 1, B};
    case Recipe::weight_fwd:
    case Recipe::weight_dgrad: {
      require_rank(s, 3, r);
      require_multiple("N (weight rows)", s[1], B);
      require_multiple("K (weight columns)", s[2], B);
      if (r == Recipe::weight_fwd) return {{s[0], s[1], s[2]}, {s[0], s[1] / B, s[2] / B}, B, B};
      return {{s[0], s[2], s[1]}, {s[0], s[2] / B, s[1] / B}, B, B};
    }
    case Recipe::kgrouped_lhs:
      require_rank(s, 2, r);
      check_kgroup_offsets(offs, s[0], B);
      return {{s[1], s[0]}, {s[1], s[0] / B}, 1, B};
    case Recipe::kgrouped_rhs:
      require_rank(s, 2, r);
      check_kgroup_offsets(offs, s[0], B);
      return {{s[0], s[1]}, {s[0] / B, s[1]}, B, 1};
  }
  return l;
}

template <class T>
void quantize_into(Recipe r, const T* x, const std::vector<std::int64_t>& s, std::span<const std::int32_t> offs,
                   std::uint8_t* codes, float* scales, const QuantOptions& opt, cudaStream_t stream) {
  (void)quant_layout(r, s, offs, opt);  // preconditions
  // The kernels move 16-byte vectors of x and 4- to 16-byte runs of codes (cudaMalloc gives 256).
  const auto misaligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 != 0; };
  if (misaligned(x) || misaligned(codes)) {
    fail("quantize ", recipe_name(r), ": x (", static_cast<const void*>(x), ") and codes (", static_cast<void*>(codes),
         ") must be 16-byte aligned: pass buffers from cudaMalloc, or offsets that are multiples of 16 bytes");
  }
  switch (r) {
    case Recipe::act_lhs: return launch_quant_rowwise(x, s[0] * (s[1] / opt.block), codes, scales, opt, stream);
    case Recipe::act_rhs:
    case Recipe::kgrouped_rhs: return launch_quant_colwise(x, s[0], s[1], false, codes, scales, opt, stream);
    case Recipe::act_lhs_t:
    case Recipe::kgrouped_lhs: return launch_quant_colwise(x, s[0], s[1], true, codes, scales, opt, stream);
    case Recipe::weight_fwd: return launch_quant_tile(x, s[0], s[1], s[2], false, codes, scales, opt, stream);
    case Recipe::weight_dgrad: return launch_quant_tile(x, s[0], s[1], s[2], true, codes, scales, opt, stream);
  }
}

template <class T>
DeviceQuantized quantize(Recipe r, const T* x, const std::vector<std::int64_t>& in_shape,
                         std::span<const std::int32_t> offs, const QuantOptions& opt, cudaStream_t stream) {
  DeviceQuantized q;
  q.layout = quant_layout(r, in_shape, offs, opt);
  q.codes = DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(q.layout.code_count()));
  q.scales = DeviceBuffer<float>(static_cast<std::size_t>(q.layout.scale_count()));
  q.format = opt.format;
  q.recipe = r;
  quantize_into(r, x, in_shape, offs, q.codes.get(), q.scales.get(), opt, stream);
  return q;
}

Quantized DeviceQuantized::to_host() const {
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "before copying the ", recipe, " quantization back");
  Quantized h;
  h.codes = TensorU8(layout.codes);
  h.scales = TensorF(layout.scales);
  h.codes.data = codes.download();
  h.scales.data = scales.download();
  h.block_rows = layout.block_rows;
  h.block_cols = layout.block_cols;
  h.format = format;
  h.recipe = recipe;
  return h;
}

template void quantize_into<float>(Recipe, const float*, const std::vector<std::int64_t>&,
                                   std::span<const std::int32_t>, std::uint8_t*, float*, const QuantOptions&,
                                   cudaStream_t);
template void quantize_into<Bf16Bits>(Recipe, const Bf16Bits*, const std::vector<std::int64_t>&,
                                      std::span<const std::int32_t>, std::uint8_t*, float*, const QuantOptions&,
                                      cudaStream_t);
template DeviceQuantized quantize<float>(Recipe, const float*, const std::vector<std::int64_t>&,
                                         std::span<const std::int32_t>, const QuantOptions&, cudaStream_t);
template DeviceQuantized quantize<Bf16Bits>(Recipe, const Bf16Bits*, const std::vector<std::int64_t>&,
                                            std::span<const std::int32_t>, const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
