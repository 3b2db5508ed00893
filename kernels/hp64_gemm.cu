// The fp64 CUDA-core GEMM behind the GPU hp64 reference (see hp64_gemm.hpp). A block computes a
// 64 x 64 tile with 256 threads (4 x 4 outputs each), staging 16-wide k chunks of both operands
// as doubles in shared memory; loads run along whichever of rows and k is contiguous. Products and
// sums are explicit __dmul_rn/__dadd_rn so that no fused multiply-add changes the roundings.
#include "kernels/check.hpp"
#include "kernels/hp64_gemm.hpp"
#include "reference/groups.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256, kTile = 64, kKc = 16, kPer = 4;

__device__ __forceinline__ void stage(const Hp64Operand& op, std::int64_t r0, std::int64_t k0, std::int64_t kc,
                                      double (*s)[kTile + 1]) {
  for (int idx = threadIdx.x; idx < kTile * kKc; idx += kThreads) {
    const int r = op.ks == 1 ? idx / kKc : idx % kTile;
    const int k = op.ks == 1 ? idx % kKc : idx / kTile;
    const std::int64_t row = r0 + r, kk = k0 + k;
    s[k][r] = row < op.rows && kk < kc ? static_cast<double>(op.p[row * op.rs + kk * op.ks]) : 0.0;
  }
}

// grid (ceil(R.rows/64), ceil(L.rows/64))
__global__ void __launch_bounds__(kThreads)
    hp64_gemm_kernel(Hp64Operand L, Hp64Operand R, std::int64_t kc, double* __restrict__ C, std::int64_t ldc) {
  __shared__ double sL[kKc][kTile + 1];
  __shared__ double sR[kKc][kTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kTile, j0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  double acc[kPer][kPer];
#pragma unroll
  for (int a = 0; a < kPer; ++a) {
#pragma unroll
    for (int c = 0; c < kPer; ++c) acc[a][c] = 0.0;
  }
  for (std::int64_t k0 = 0; k0 < kc; k0 += kKc) {
    stage(L, i0, k0, kc, sL);
    stage(R, j0, k0, kc, sR);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kKc; ++k) {
      double a[kPer], w[kPer];
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        a[t] = sL[k][ty + 16 * t];
        w[t] = sR[k][tx + 16 * t];
      }
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
#pragma unroll
        for (int y = 0; y < kPer; ++y) acc[x][y] = __dadd_rn(acc[x][y], __dmul_rn(a[x], w[y]));
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const std::int64_t i = i0 + ty + 16 * x;
    if (i >= L.rows) continue;
#pragma unroll
    for (int y = 0; y < kPer; ++y) {
      const std::int64_t j = j0 + tx + 16 * y;
      if (j < R.rows) C[i * ldc + j] = acc[x][y];
    }
  }
}

}  // namespace

void hp64_gemm(const Hp64Operand& L, const Hp64Operand& R, std::int64_t kc, double* C, std::int64_t ldc,
               cudaStream_t stream) {
  if (L.rows == 0 || R.rows == 0) return;
  const std::int64_t gy = (L.rows + kTile - 1) / kTile, gx = (R.rows + kTile - 1) / kTile;
  if (gy > 65535) fail("hp64_gemm: ", L.rows, " lhs rows exceed the grid limit (", 65535 * kTile, ")");
  hp64_gemm_kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0, stream>>>(L, R, kc, C, ldc);
  FP8MOE_CUDA_CHECK_LAUNCH("hp64_gemm_kernel", "L.rows=", L.rows, " R.rows=", R.rows, " kc=", kc);
}

void hp64_grouped_fwd(const float* A, const float* W, std::int64_t M, std::int64_t N, std::int64_t K,
                      std::span<const std::int32_t> offs, double* out, cudaStream_t stream) {
  check_offsets(offs, M);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    const Hp64Operand L{A + s * K, K, 1, offs[e] - s};
    const Hp64Operand R{W + static_cast<std::int64_t>(e) * N * K, K, 1, N};
    hp64_gemm(L, R, K, out + s * N, N, stream);
    s = offs[e];
  }
}

void hp64_grouped_dgrad(const float* dOut, const float* W, std::int64_t M, std::int64_t N, std::int64_t K,
                        std::span<const std::int32_t> offs, double* out, cudaStream_t stream) {
  check_offsets(offs, M);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    // dA_e (M_e, K) = dOut_e (M_e, N) . W_e (N, K): rhs row j = column j of W_e, k step = a row
    const Hp64Operand L{dOut + s * N, N, 1, offs[e] - s};
    const Hp64Operand R{W + static_cast<std::int64_t>(e) * N * K, 1, K, K};
    hp64_gemm(L, R, N, out + s * K, K, stream);
    s = offs[e];
  }
}

void hp64_grouped_wgrad(const float* dOut, const float* A, std::int64_t M, std::int64_t N, std::int64_t K,
                        std::span<const std::int32_t> offs, double* out, cudaStream_t stream) {
  check_offsets(offs, M);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    // dW_e (N, K) = dOut_e^T (N, M_e) . A_e (M_e, K): contraction over the expert's tokens
    const std::int64_t Me = offs[e] - s;
    const Hp64Operand L{dOut + s * N, 1, N, N};
    const Hp64Operand R{A + s * K, 1, K, K};
    double* dw = out + static_cast<std::int64_t>(e) * N * K;
    hp64_gemm(L, R, Me, dw, K, stream);  // Me = 0: the k loop is empty and dW_e is written 0
    s = offs[e];
  }
}

}  // namespace fp8moe::kernels
