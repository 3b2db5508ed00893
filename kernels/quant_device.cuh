#pragma once
// Device helpers shared by the quantization kernels (device code only; launchers live in the .cu
// files next to each kernel). The formula itself is reference/scale.hpp's, never re-derived here.
#include <cstdint>

#include "reference/scale.hpp"

namespace fp8moe::kernels::dev {

// Input element types: fp32, or bf16 given as its 16 raw bits.
template <class T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_f32<std::uint16_t>(std::uint16_t x) {
  return bf16_to_f32(x);
}

// V consecutive elements as one aligned vector access (16 bytes or less per instruction).
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  const Vec<T, V> raw = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_f32(raw.v[j]);
}

template <int V>
__device__ __forceinline__ void store_vec(std::uint8_t* p, const std::uint8_t (&q)[V]) {
  Vec<std::uint8_t, V> raw;
#pragma unroll
  for (int j = 0; j < V; ++j) raw.v[j] = q[j];
  *reinterpret_cast<Vec<std::uint8_t, V>*>(p) = raw;
}

// amax over a warp with amax_update's NaN propagation (inputs are amaxes: >= 0 or NaN, so taking
// |.| again changes nothing). max is exact, so the order of the reduction cannot change the bits
// of a finite amax; a NaN amax stays NaN (its payload may differ from the CPU's: DESIGN.md 3.2
// only promises that a non-finite block is reported).
__device__ __forceinline__ float warp_amax(float a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = amax_update(a, __shfl_xor_sync(0xffffffffu, a, o));
  return a;
}

}  // namespace fp8moe::kernels::dev
