#include "kernels/check.hpp"
#include "kernels/codec_check.hpp"
#include "reference/scale.hpp"

namespace fp8moe::kernels {
namespace {

__global__ void codec_kernel(Fp8Format f, unsigned long long* count, unsigned int* first) {
  const float m = fp8_max(f);
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < (1ull << 32);
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const auto bits = static_cast<std::uint32_t>(i);
    const float x = f32_from_bits(bits);
    float y = x;  // the clamp of quantize_element, written out for the integer path
    if (y > m) y = m;
    if (y < -m) y = -m;
    const std::uint8_t fast = quantize_element(x, 1.0f, f);
    const std::uint8_t slow = fp8_encode(y, f, Overflow::torch);
    if (fast != slow) {
      atomicAdd(count, 1ull);
      atomicMin(first, bits);
    }
  }
}

}  // namespace

CodecCheck check_quantize_element_codec(Fp8Format f) {
  DeviceBuffer<unsigned long long> count(1);
  DeviceBuffer<unsigned int> first(1);
  const unsigned long long zero = 0;
  const unsigned int none = 0xffffffffu;
  FP8MOE_CUDA_CHECK(cudaMemcpy(count.get(), &zero, sizeof zero, cudaMemcpyHostToDevice), "codec check");
  FP8MOE_CUDA_CHECK(cudaMemcpy(first.get(), &none, sizeof none, cudaMemcpyHostToDevice), "codec check");
  codec_kernel<<<132 * 8, 256>>>(f, count.get(), first.get());
  FP8MOE_CUDA_CHECK_LAUNCH("codec_kernel", "all 2^32 fp32 inputs");
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "codec check");
  CodecCheck r;
  unsigned long long c = 0;
  unsigned int fb = 0;
  FP8MOE_CUDA_CHECK(cudaMemcpy(&c, count.get(), sizeof c, cudaMemcpyDeviceToHost), "codec check");
  FP8MOE_CUDA_CHECK(cudaMemcpy(&fb, first.get(), sizeof fb, cudaMemcpyDeviceToHost), "codec check");
  r.mismatches = c;
  r.first_bits = fb;
  return r;
}

}  // namespace fp8moe::kernels
