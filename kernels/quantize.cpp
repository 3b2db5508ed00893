// Host side of the GPU quantizers: reference/quantize.cpp's layouts (quant_layout, which checks
// the preconditions) and the dispatch of each recipe to its kernel.
#include "kernels/quantize.hpp"

#include <cstdint>

#include "reference/checked.hpp"

namespace fp8moe::kernels {
template <class T>
void quantize_into(Recipe r, const T* x, const std::vector<std::int64_t>& s, std::span<const std::int32_t> offs,
                   std::uint8_t* codes, float* scales, const QuantOptions& opt, cudaStream_t stream) {
  const QuantLayout l = quant_layout(r, s, offs, opt);  // preconditions, and where codes and scales go
  if ((r == Recipe::weight_fwd || r == Recipe::weight_dgrad) && s.size() != 3) {
    fail("the GPU ", recipe_name(r), " quantizer takes grouped weights (E,N,K), got shape ", shape_str(s));
  }
  // The kernels move 16-byte vectors of x and 4- to 16-byte runs of codes (cudaMalloc gives 256).
  const auto misaligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 != 0; };
  if (misaligned(x) || misaligned(codes)) {
    fail("quantize ", recipe_name(r), ": x (", static_cast<const void*>(x), ") and codes (", static_cast<void*>(codes),
         ") must be 16-byte aligned: pass buffers from cudaMalloc, or offsets that are multiples of 16 bytes");
  }
  switch (r) {
    case Recipe::act_lhs: return launch_quant_rowwise(x, s[0] * (s[1] / opt.block), codes, scales, opt, stream);
    case Recipe::act_rhs:
    case Recipe::kgrouped_rhs: return launch_quant_colwise(x, s[0], s[1], false, l, codes, scales, opt, stream);
    case Recipe::act_lhs_t:
    case Recipe::kgrouped_lhs: return launch_quant_colwise(x, s[0], s[1], true, l, codes, scales, opt, stream);
    case Recipe::weight_fwd: return launch_quant_tile(x, s[0], s[1], s[2], false, l, codes, scales, opt, stream);
    case Recipe::weight_dgrad: return launch_quant_tile(x, s[0], s[1], s[2], true, l, codes, scales, opt, stream);
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
  h.codes = TensorU8(layout.code_shape());
  h.scales = TensorF(layout.scale_shape());
  h.codes.data = codes.download();
  h.scales.data = scales.download();
  h.layout = layout;
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
