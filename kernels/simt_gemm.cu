// The simt promote-fp32 block GEMM kernel and its launcher (see simt_gemm.hpp for the contract).
// A block computes a 64 x 64 output tile with 256 threads (4 x 4 outputs each). Per k-block it
// stages the codes as integer units (fp8_units: e4m3 int32, e5m2 int64) in 32-wide k chunks in
// shared memory, accumulates the exact partial in int64 (e4m3) or int128 (e5m2), rounds it once to
// fp32 and folds it with the block scales using explicit __fmul_rn/__fmaf_rn, so nothing depends
// on contraction or on the order of the integer sum.
#include "reference/block_partial.hpp"
#include "kernels/simt_gemm.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256, kTile = 64, kKc = 32, kPer = 4;  // 16 x 16 threads, 4 x 4 each

template <Fp8Format F>
struct Units;
template <>
struct Units<Fp8Format::e4m3> {
  using Unit = std::int32_t;  // |units| < 2^18
  using Acc = std::int64_t;   // |P| < 2^44 for B <= 256
};
template <>
struct Units<Fp8Format::e5m2> {
  using Unit = std::int64_t;  // |units| < 2^32
  using Acc = __int128;       // |P| < 2^72
};

__device__ __forceinline__ std::uint8_t code_at(const BlockOperand& op, std::int64_t r, std::int64_t k) {
  return op.codes[r * op.rs + k * op.ks];
}
__device__ __forceinline__ float scale_at(const BlockOperand& op, std::int64_t r, std::int64_t b) {
  return op.scales[(r / op.rblock) * op.srs + b * op.sks];
}

// A block with a NaN/Inf code: the fp64 sum of decoded products (reference's scalar path). Its
// value is +-Inf or NaN whatever the order, since finite products cannot overflow fp64.
template <Fp8Format F>
__device__ float nonfinite_partial(const BlockOperand& L, const BlockOperand& R, std::int64_t i, std::int64_t j,
                                   std::int64_t k0, int B) {
  double s = 0.0;
  for (int k = 0; k < B; ++k) {
    s = __dadd_rn(s, __dmul_rn(static_cast<double>(fp8_decode(code_at(L, i, k0 + k), F)),
                               static_cast<double>(fp8_decode(code_at(R, j, k0 + k), F))));
  }
  return __double2float_rn(s);
}

// Stage rows [r0, r0+64) x k [k0, k0+32) of op as units into s (k-major); flag rows holding a
// non-finite code in nf.
template <Fp8Format F>
__device__ __forceinline__ void stage(const BlockOperand& op, std::int64_t r0, std::int64_t k0,
                                      typename Units<F>::Unit (*s)[kTile], int* nf) {
  for (int idx = threadIdx.x; idx < kTile * kKc; idx += kThreads) {
    // consecutive threads along whichever of k and rows is contiguous in memory
    const int r = op.ks == 1 ? idx / kKc : idx % kTile;
    const int k = op.ks == 1 ? idx % kKc : idx / kTile;
    const std::int64_t row = r0 + r;
    typename Units<F>::Unit u = 0;
    if (row < op.rows) {
      const std::uint8_t c = code_at(op, row, k0 + k);
      if (fp8_is_finite(c, F)) {
        u = static_cast<typename Units<F>::Unit>(fp8_units(c, F));
      } else {
        nf[r] = 1;
      }
    }
    s[k][r] = u;
  }
}

template <Fp8Format F>
__device__ __forceinline__ float partial_to_f32(typename Units<F>::Acc p) {
  if constexpr (F == Fp8Format::e4m3) {
    return __fmul_rn(__ll2float_rn(p), 0x1p-18f);  // one RNE rounding; the 2^-18 scaling is exact
  } else {
    return i128_to_f32_scaled(p, 2 * 16);
  }
}

// C (L.rows, R.rows): grid (ceil(R.rows/64), ceil(L.rows/64)).
template <Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    simt_block_gemm_kernel(BlockOperand L, BlockOperand R, std::int64_t nkb, int B, float* __restrict__ C,
                           std::int64_t ldc, Promotion promo, OutDtype out) {
  using Unit = typename Units<F>::Unit;
  using Acc = typename Units<F>::Acc;
  __shared__ Unit sL[kKc][kTile];
  __shared__ Unit sR[kKc][kTile];
  __shared__ int nfL[kTile], nfR[kTile];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kTile, j0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  float acc[kPer][kPer];
#pragma unroll
  for (int a = 0; a < kPer; ++a) {
#pragma unroll
    for (int c = 0; c < kPer; ++c) acc[a][c] = 0.0f;
  }
  for (std::int64_t b = 0; b < nkb; ++b) {
    if (threadIdx.x < kTile) {
      nfL[threadIdx.x] = 0;
      nfR[threadIdx.x] = 0;
    }
    Acc p[kPer][kPer];
#pragma unroll
    for (int a = 0; a < kPer; ++a) {
#pragma unroll
      for (int c = 0; c < kPer; ++c) p[a][c] = 0;
    }
    __syncthreads();
    for (int kk = 0; kk < B; kk += kKc) {
      stage<F>(L, i0, b * B + kk, sL, nfL);
      stage<F>(R, j0, b * B + kk, sR, nfR);
      __syncthreads();
#pragma unroll 4
      for (int k = 0; k < kKc; ++k) {
        Unit a[kPer], w[kPer];
#pragma unroll
        for (int t = 0; t < kPer; ++t) {
          a[t] = sL[k][ty + 16 * t];
          w[t] = sR[k][tx + 16 * t];
        }
#pragma unroll
        for (int x = 0; x < kPer; ++x) {
#pragma unroll
          for (int y = 0; y < kPer; ++y) p[x][y] += static_cast<Acc>(a[x]) * static_cast<Acc>(w[y]);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      const std::int64_t i = i0 + ty + 16 * x;
      if (i >= L.rows) continue;
      const float sa = scale_at(L, i, b);
#pragma unroll
      for (int y = 0; y < kPer; ++y) {
        const std::int64_t j = j0 + tx + 16 * y;
        if (j >= R.rows) continue;
        const float sb = scale_at(R, j, b);
        const float pf = (nfL[ty + 16 * x] | nfR[tx + 16 * y]) ? nonfinite_partial<F>(L, R, i, j, b * B, B)
                                                               : partial_to_f32<F>(p[x][y]);
        acc[x][y] = promo == Promotion::deepgemm ? __fmaf_rn(__fmul_rn(sa, sb), pf, acc[x][y])
                                                 : __fmaf_rn(__fmul_rn(pf, sa), sb, acc[x][y]);
      }
    }
    __syncthreads();  // the flags are reset at the top of the next block
  }
#pragma unroll
  for (int x = 0; x < kPer; ++x) {
    const std::int64_t i = i0 + ty + 16 * x;
    if (i >= L.rows) continue;
#pragma unroll
    for (int y = 0; y < kPer; ++y) {
      const std::int64_t j = j0 + tx + 16 * y;
      if (j < R.rows) C[i * ldc + j] = out == OutDtype::bf16 ? round_bf16(acc[x][y]) : acc[x][y];
    }
  }
}

}  // namespace

void simt_block_gemm(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, float* C, std::int64_t ldc,
                     const GemmOptions& opt, cudaStream_t stream) {
  if (opt.mode != Mode::promote_fp32) fail("the simt GEMM computes promote-fp32, not ", mode_name(opt.mode));
  if (opt.out == OutDtype::fp64) fail("the simt GEMM writes bf16 or fp32 output, not fp64");
  check_quant_options(opt.quant);
  const int B = opt.quant.block;
  if (kc % B != 0) fail("simt_block_gemm: contraction ", kc, " is not a multiple of the block ", B);
  if (L.rows == 0 || R.rows == 0) return;
  const std::int64_t gy = (L.rows + kTile - 1) / kTile, gx = (R.rows + kTile - 1) / kTile;
  if (gy > 65535) fail("simt_block_gemm: ", L.rows, " lhs rows exceed the grid limit (", 65535 * kTile, ")");
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  if (opt.quant.format == Fp8Format::e4m3) {
    simt_block_gemm_kernel<Fp8Format::e4m3>
        <<<grid, kThreads, 0, stream>>>(L, R, kc / B, B, C, ldc, opt.promotion, opt.out);
  } else {
    simt_block_gemm_kernel<Fp8Format::e5m2>
        <<<grid, kThreads, 0, stream>>>(L, R, kc / B, B, C, ldc, opt.promotion, opt.out);
  }
  FP8MOE_CUDA_CHECK_LAUNCH("simt_block_gemm_kernel", "L.rows=", L.rows, " R.rows=", R.rows, " kc=", kc, " B=", B,
                           " format=", format_name(opt.quant.format));
}

}  // namespace fp8moe::kernels
