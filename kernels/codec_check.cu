#include "kernels/check.hpp"
#include "kernels/codec_check.hpp"
#include "reference/scale.hpp"

namespace fp8moe::kernels {
namespace {

// The integer path of quantize_element, written out: clamp, then fp8_encode(torch).
__device__ std::uint8_t clamped_encode(float x, Fp8Format f) {
  const float m = fp8_max(f);
  float y = x;
  if (y > m) y = m;
  if (y < -m) y = -m;
  return fp8_encode(y, f, Overflow::torch);
}

__global__ void codec_kernel(Fp8Format f, unsigned long long* count, unsigned int* first) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < (1ull << 32);
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const auto bits = static_cast<std::uint32_t>(i);
    const float x = f32_from_bits(bits);
    if (quantize_element(x, 1.0f, f) != clamped_encode(x, f)) {
      atomicAdd(count, 1ull);
      atomicMin(first, bits);
    }
  }
}

__device__ bool same_code(std::uint8_t a, std::uint8_t b, Fp8Format f) {
  return a == b || (fp8_is_nan(a, f) && fp8_is_nan(b, f));
}

template <Fp8Format F>
__global__ void pair_kernel(unsigned long long* count, unsigned int* first) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < (1ull << 32);
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const auto bits = static_cast<std::uint32_t>(i);
    const std::uint32_t partner = bits * 2654435761u ^ 0x9e3779b9u;  // another pattern in byte 1
    const float lo = f32_from_bits(bits), hi = f32_from_bits(partner);
    const std::uint16_t p = quantize_pair<F>(lo, 1.0f, hi, 1.0f);
    if (!same_code(static_cast<std::uint8_t>(p), clamped_encode(lo, F), F) ||
        !same_code(static_cast<std::uint8_t>(p >> 8), clamped_encode(hi, F), F)) {
      atomicAdd(count, 1ull);
      atomicMin(first, bits);
    }
  }
}

__device__ bool same_f32(float a, float b) { return f32_bits(a) == f32_bits(b) || (a != a && b != b); }

__global__ void scale_kernel(Fp8Format f, bool pow2, unsigned long long* count, unsigned int* first) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < (1ull << 31);
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const auto bits = static_cast<std::uint32_t>(i);
    const float amax = f32_from_bits(bits);
    const BlockScale got = block_scale(amax, f, pow2), want = block_scale_f64(amax, f, pow2);
    if (!same_f32(got.scale, want.scale) || !same_f32(got.s_inv, want.s_inv)) {
      atomicAdd(count, 1ull);
      atomicMin(first, bits);
    }
  }
}

// Runs launch(count, first) and collects its result.
template <class Launch>
CodecCheck run_check(const char* what, Launch launch) {
  DeviceBuffer<unsigned long long> count(1);
  DeviceBuffer<unsigned int> first(1);
  const unsigned long long zero = 0;
  const unsigned int none = 0xffffffffu;
  FP8MOE_CUDA_CHECK(cudaMemcpy(count.get(), &zero, sizeof zero, cudaMemcpyHostToDevice), what);
  FP8MOE_CUDA_CHECK(cudaMemcpy(first.get(), &none, sizeof none, cudaMemcpyHostToDevice), what);
  launch(count.get(), first.get());
  FP8MOE_CUDA_CHECK_LAUNCH("codec check kernel", what);
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), what);
  CodecCheck r;
  unsigned long long c = 0;
  unsigned int fb = 0;
  FP8MOE_CUDA_CHECK(cudaMemcpy(&c, count.get(), sizeof c, cudaMemcpyDeviceToHost), what);
  FP8MOE_CUDA_CHECK(cudaMemcpy(&fb, first.get(), sizeof fb, cudaMemcpyDeviceToHost), what);
  r.mismatches = c;
  r.first_bits = fb;
  return r;
}

constexpr int kGrid = 132 * 8, kBlock = 256;

}  // namespace

CodecCheck check_quantize_element_codec(Fp8Format f) {
  return run_check("quantize_element codec check", [&](unsigned long long* c, unsigned int* fb) {
    codec_kernel<<<kGrid, kBlock>>>(f, c, fb);
  });
}

CodecCheck check_quantize_pair_codec(Fp8Format f) {
  return run_check("quantize_pair codec check", [&](unsigned long long* c, unsigned int* fb) {
    if (f == Fp8Format::e4m3) {
      pair_kernel<Fp8Format::e4m3><<<kGrid, kBlock>>>(c, fb);
    } else {
      pair_kernel<Fp8Format::e5m2><<<kGrid, kBlock>>>(c, fb);
    }
  });
}

CodecCheck check_block_scale_device(Fp8Format f, bool pow2) {
  return run_check("block_scale device check", [&](unsigned long long* c, unsigned int* fb) {
    scale_kernel<<<kGrid, kBlock>>>(f, pow2, c, fb);
  });
}

}  // namespace fp8moe::kernels
