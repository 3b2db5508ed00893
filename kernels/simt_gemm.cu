// The simt block GEMM kernels (promote-fp32 and hopper-tc) and their launcher (see simt_gemm.hpp
// for the contract). A block computes a 64 x 64 output tile with 256 threads (4 x 4 outputs
// each), staging 32-wide k chunks of both operands in shared memory.
// - promote-fp32 stages integer units (fp8_units: e4m3 int32, e5m2 int64), accumulates the exact
//   partial in int64 (e4m3) or int128 (e5m2) and rounds it once to fp32, so nothing depends on the
//   order of the integer sum;
// - hopper-tc stages the raw codes and chains reference/tensor_core.hpp's tc_step per chunk.
// Both fold partials with tensor_core.hpp's promote() and split_combine() (explicit
// __fmul_rn/__fmaf_rn/__fadd_rn on the device), the CPU's operations in the CPU's order.
#include "reference/block_partial.hpp"
#include "reference/tensor_core.hpp"
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

__device__ __forceinline__ std::uint8_t code_at(const BlockOperand& op, std::int64_t r, std::int64_t k) { return op.code(r, k); }
__device__ __forceinline__ float scale_at(const BlockOperand& op, std::int64_t r, std::int64_t b) { return op.scale(r, b); }

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

// cuBLASLt's split-K runs of one GEMM: q blocks per run, `runs` runs (1: no split).
struct RunSplit {
  std::int64_t q;
  int runs;
};

// A thread's 4 x 4 outputs: the running split run and the total of the closed runs
// (tensor_core.hpp's split_combine, in run order, trailing empty runs adding +0).
struct Outputs {
  float run[kPer][kPer];
  float total[kPer][kPer];
  __device__ Outputs() {
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
#pragma unroll
      for (int y = 0; y < kPer; ++y) run[x][y] = total[x][y] = 0.0f;
    }
  }
  __device__ void close_run(int r) {
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
#pragma unroll
      for (int y = 0; y < kPer; ++y) {
        total[x][y] = split_combine(total[x][y], run[x][y], r);
        run[x][y] = 0.0f;
      }
    }
  }
  // Before block b: close the previous run where b starts a new one.
  __device__ void begin_block(std::int64_t b, const RunSplit& s) {
    if (b > 0 && b % s.q == 0) close_run(static_cast<int>(b / s.q) - 1);
  }
  // After the last block: close the open run and the empty trailing ones, then write the tile.
  __device__ void store(std::int64_t nkb, const RunSplit& s, std::int64_t rows, std::int64_t cols, std::int64_t i0,
                        std::int64_t j0, float* C, std::int64_t ldc, OutDtype out) {
    const int open = nkb == 0 ? 0 : static_cast<int>((nkb - 1) / s.q);  // index of the run left open
    for (int r = open; r < s.runs; ++r) close_run(r);
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
      const std::int64_t i = i0 + 16 * x;
      if (i >= rows) continue;
#pragma unroll
      for (int y = 0; y < kPer; ++y) {
        const std::int64_t j = j0 + 16 * y;
        if (j < cols) C[i * ldc + j] = out == OutDtype::bf16 ? round_bf16(total[x][y]) : total[x][y];
      }
    }
  }
};

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
                           std::int64_t ldc, Promotion promo, ScaleConfig cfg, RunSplit split, OutDtype out) {
  using Unit = typename Units<F>::Unit;
  using Acc = typename Units<F>::Acc;
  __shared__ Unit sL[kKc][kTile];
  __shared__ Unit sR[kKc][kTile];
  __shared__ int nfL[kTile], nfR[kTile];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kTile, j0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  Outputs acc;
  for (std::int64_t b = 0; b < nkb; ++b) {
    acc.begin_block(b, split);
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
        acc.run[x][y] = promote(promo, cfg, pf, sa, sb, acc.run[x][y]);
      }
    }
    __syncthreads();  // the flags are reset at the top of the next block
  }
  acc.store(nkb, split, L.rows, R.rows, i0 + ty, j0 + tx, C, ldc, out);
}

// hopper-tc: per k-block the tensor-core partial (B/32 chained tc_step calls on the staged codes),
// then the same promotion and split runs as above. Codes are staged row-major with k contiguous
// (kKc bytes per row, padded against bank conflicts) for the 4 x 4 outputs of each thread.
constexpr int kCodePitch = kKc + 4;

__device__ __forceinline__ void stage_codes(const BlockOperand& op, std::int64_t r0, std::int64_t k0,
                                            std::uint8_t (*s)[kCodePitch]) {
  for (int idx = threadIdx.x; idx < kTile * kKc; idx += kThreads) {
    const int r = op.ks == 1 ? idx / kKc : idx % kTile;
    const int k = op.ks == 1 ? idx % kKc : idx / kTile;
    const std::int64_t row = r0 + r;
    s[r][k] = row < op.rows ? code_at(op, row, k0 + k) : std::uint8_t{0};
  }
}

template <Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    simt_tc_gemm_kernel(BlockOperand L, BlockOperand R, std::int64_t nkb, int B, float* __restrict__ C,
                        std::int64_t ldc, Promotion promo, ScaleConfig cfg, RunSplit split, OutDtype out) {
  __shared__ std::uint8_t sL[kTile][kCodePitch];
  __shared__ std::uint8_t sR[kTile][kCodePitch];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kTile, j0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  Outputs acc;
  for (std::int64_t b = 0; b < nkb; ++b) {
    acc.begin_block(b, split);
    float p[kPer][kPer];
#pragma unroll
    for (int x = 0; x < kPer; ++x) {
#pragma unroll
      for (int y = 0; y < kPer; ++y) p[x][y] = 0.0f;
    }
    for (int kk = 0; kk < B; kk += kKc) {
      stage_codes(L, i0, b * B + kk, sL);
      stage_codes(R, j0, b * B + kk, sR);
      __syncthreads();
#pragma unroll
      for (int x = 0; x < kPer; ++x) {
#pragma unroll
        for (int y = 0; y < kPer; ++y) {
          p[x][y] = tc_step(&sL[ty + 16 * x][0], 1, F, &sR[tx + 16 * y][0], 1, F, kKc, p[x][y]);
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
        if (j < R.rows) acc.run[x][y] = promote(promo, cfg, p[x][y], sa, scale_at(R, j, b), acc.run[x][y]);
      }
    }
  }
  acc.store(nkb, split, L.rows, R.rows, i0 + ty, j0 + tx, C, ldc, out);
}

}  // namespace

void simt_block_gemm(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, float* C, std::int64_t ldc,
                     const GemmOptions& opt, cudaStream_t stream, int splits) {
  if (!is_promoted(opt.mode)) fail("the simt GEMM computes promote-fp32 and hopper-tc, not ", mode_name(opt.mode));
  if (splits < 1) fail("simt_block_gemm: split count ", splits, " must be >= 1");
  if (opt.out == OutDtype::fp64) fail("the simt GEMM writes bf16 or fp32 output, not fp64");
  check_quant_options(opt.quant);
  const int B = opt.quant.block;
  if (kc % B != 0) fail("simt_block_gemm: contraction ", kc, " is not a multiple of the block ", B);
  if (L.rows == 0 || R.rows == 0) return;
  const std::int64_t gy = (L.rows + kTile - 1) / kTile, gx = (R.rows + kTile - 1) / kTile;
  if (gy > 65535) fail("simt_block_gemm: ", L.rows, " lhs rows exceed the grid limit (", 65535 * kTile, ")");
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const std::int64_t nkb = kc / B;
  const ScaleConfig cfg = scale_config(L, R);
  const RunSplit split{std::max<std::int64_t>(split_run_blocks(nkb, splits, split_unit(cfg, opt.split_unit)), 1), splits};
  const bool tc = opt.mode == Mode::hopper_tc;
  if (opt.quant.format == Fp8Format::e4m3) {
    (tc ? simt_tc_gemm_kernel<Fp8Format::e4m3> : simt_block_gemm_kernel<Fp8Format::e4m3>)
        <<<grid, kThreads, 0, stream>>>(L, R, nkb, B, C, ldc, opt.promotion, cfg, split, opt.out);
  } else {
    (tc ? simt_tc_gemm_kernel<Fp8Format::e5m2> : simt_block_gemm_kernel<Fp8Format::e5m2>)
        <<<grid, kThreads, 0, stream>>>(L, R, nkb, B, C, ldc, opt.promotion, cfg, split, opt.out);
  }
  FP8MOE_CUDA_CHECK_LAUNCH("simt_block_gemm", "mode=", mode_name(opt.mode), " L.rows=", L.rows, " R.rows=", R.rows,
                           " kc=", kc, " B=", B, " splits=", splits, " format=", format_name(opt.quant.format));
}

}  // namespace fp8moe::kernels
