// GPU data generation: one thread per element, grid-stride, calling reference/random.hpp's
// generate_element (compiled with --fmad=false; the header writes its fused operations as fma()).
#include "kernels/datagen.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256;

template <class OutT>
__device__ __forceinline__ OutT store_as(float v);
template <>
__device__ __forceinline__ float store_as<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ std::uint16_t store_as<std::uint16_t>(float v) {
  return bf16_bits_rne(v);  // v is bf16-valued: exact
}

// out (count): element first + i of the tensor
template <class OutT>
__global__ void __launch_bounds__(kThreads)
    generate_kernel(Dist dist, std::uint64_t seed, std::uint32_t tensor_id, std::int64_t cols, std::int64_t first,
                    std::int64_t count, OutT* __restrict__ out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count; i += stride) {
    const std::int64_t idx = first + i;
    out[i] = store_as<OutT>(generate_element(dist, seed, tensor_id, static_cast<std::uint64_t>(idx),
                                             static_cast<std::uint64_t>(cols > 0 ? idx % cols : 0)));
  }
}

}  // namespace

template <class OutT>
void generate_slice_device(Dist dist, std::uint64_t seed, std::uint32_t tensor_id, std::int64_t cols,
                           std::int64_t first, std::int64_t count, OutT* out, cudaStream_t stream) {
  if (count <= 0) return;
  const std::int64_t want = (count + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 131072 ? want : 131072);
  generate_kernel<OutT><<<blocks, kThreads, 0, stream>>>(dist, seed, tensor_id, cols, first, count, out);
  FP8MOE_CUDA_CHECK_LAUNCH("generate_kernel", "first=", first, " count=", count, " cols=", cols);
}

DeviceBuffer<float> generate_device(const std::vector<std::int64_t>& shape, Dist dist, std::uint64_t seed,
                                    std::uint32_t tensor_id, cudaStream_t stream) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  DeviceBuffer<float> out(static_cast<std::size_t>(n));
  generate_slice_device<float>(dist, seed, tensor_id, shape.empty() ? 1 : shape.back(), 0, n, out.get(), stream);
  return out;
}

template void generate_slice_device<float>(Dist, std::uint64_t, std::uint32_t, std::int64_t, std::int64_t,
                                           std::int64_t, float*, cudaStream_t);
template void generate_slice_device<std::uint16_t>(Dist, std::uint64_t, std::uint32_t, std::int64_t, std::int64_t,
                                                   std::int64_t, std::uint16_t*, cudaStream_t);

}  // namespace fp8moe::kernels
