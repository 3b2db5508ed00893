#pragma once
// The GPU `hp64` reference (reference/SPEC.md 7.2): an fp64 CUDA-core grouped GEMM of the unquantized
// fp32 (bf16-valued) inputs, so large GPU sweeps need no CPU reference. Each product of two fp32
// values is exact in fp64; the sum runs in fp64 in k order per thread, so it is not bitwise the
// CPU's Eigen GEMM (a different summation order) but agrees to fp64 rounding (tests ask >= 250 dB,
// measured values in tests/kernels/test_kernels_hp64.cpp). Outputs are fp64, unrounded.
//
// Shapes as reference/gemm.hpp's grouped_* (row-major, device pointers):
//   fwd:   A (M,K), W (E,N,K)     -> out (M,N)
//   dgrad: dOut (M,N), W (E,N,K)  -> out (M,K)
//   wgrad: dOut (M,N), A (M,K)    -> out (E,N,K)   (an empty expert's dW is zero)
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace fp8moe::kernels {

// One strided fp64 GEMM: C(i,j) = sum_k L[i*lrs + k*lks] * R[j*rrs + k*rks], C row stride ldc.
struct Hp64Operand {
  const float* p = nullptr;
  std::int64_t rs = 0, ks = 0;  // strides of a row and of a k step
  std::int64_t rows = 0;
};
void hp64_gemm(const Hp64Operand& L, const Hp64Operand& R, std::int64_t kc, double* C, std::int64_t ldc,
               cudaStream_t stream = nullptr);

void hp64_grouped_fwd(const float* A, const float* W, std::int64_t M, std::int64_t N, std::int64_t K,
                      std::span<const std::int32_t> offs, double* out, cudaStream_t stream = nullptr);
void hp64_grouped_dgrad(const float* dOut, const float* W, std::int64_t M, std::int64_t N, std::int64_t K,
                        std::span<const std::int32_t> offs, double* out, cudaStream_t stream = nullptr);
void hp64_grouped_wgrad(const float* dOut, const float* A, std::int64_t M, std::int64_t N, std::int64_t K,
                        std::span<const std::int32_t> offs, double* out, cudaStream_t stream = nullptr);

}  // namespace fp8moe::kernels
