#pragma once
// FP8MOE_HD marks functions compiled for host and device. Every formula that the CPU reference and
// the CUDA kernels share (FP8 codec, scale formula, block index math, RNG) lives in a header that
// uses it, so there is one definition of each (reference/SPEC.md 1.3).
#if defined(__CUDACC__)
#define FP8MOE_HD __host__ __device__ __forceinline__
#else
#define FP8MOE_HD inline
#endif

#include <cstdint>
#include <cstring>

namespace fp8moe {

FP8MOE_HD std::uint32_t f32_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
FP8MOE_HD float f32_from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
FP8MOE_HD std::uint64_t f64_bits(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
FP8MOE_HD double f64_from_bits(std::uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace fp8moe
