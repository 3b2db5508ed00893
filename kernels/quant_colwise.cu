// B rows x 1 column groups of x (M,K) (act rhs 128x1, transposed lhs, and the K-grouped recipes):
// a block owns B rows x 128 columns; each lane holds 4 consecutive columns (one vector load per
// row), the 8 warps split the rows, and the per-column amaxes meet in shared memory. Pass 2
// re-reads the rows (L2-resident) and writes codes in place, or stages them in shared memory to
// write the transposed (K,M) layout with consecutive threads on consecutive tokens.
#include "kernels/quant_device.cuh"
#include "kernels/quantize.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kCols = 128;

template <class T, bool kVec>
__device__ __forceinline__ void load4(const T* row, std::int64_t c0, std::int64_t K, float (&v)[4]) {
  if (kVec && c0 + 3 < K) {
    dev::load_vec<T, 4>(row + c0, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = c0 + j < K ? dev::to_f32(row[c0 + j]) : 0.0f;
}

// x (M,K); groups rows [rb*B, min(M, rb*B+B)) of one column.
// kTranspose false: codes (M,K), scales (ceil(M/B), K); true: codes (K,M), scales (K, ceil(M/B)).
template <class T, int B, bool kTranspose, bool kVec, Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    quant_colwise_kernel(const T* __restrict__ x, std::int64_t M, std::int64_t K, std::uint8_t* __restrict__ codes,
                         float* __restrict__ scales, bool pow2) {
  static_assert(kThreads == 32 * 4 * 2 && kCols == 32 * 4, "a warp covers 128 columns, 4 per lane");
  __shared__ float part[kWarps][kCols];  // per-warp column amaxes
  __shared__ float mult[kCols];          // the columns' quantize multipliers
  // (cols, rows) codes; the odd row pitch B+1 puts the 32 lanes' columns in 32 different banks
  __shared__ std::uint8_t tile[kTranspose ? kCols : 1][kTranspose ? B + 1 : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t rb = blockIdx.y, r0 = rb * B;
  const std::int64_t mb = (M + B - 1) / B;
  const int rows = static_cast<int>(M - r0 < B ? M - r0 : B);
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kCols + lane * 4;

  // B <= 128: a thread's B/8 rows x 4 columns stay in registers between the amax pass and the
  // quantize pass (all loads in flight at once, no second read); B = 256 re-reads (L2-resident).
  // Measured on the H200 (results/bench/2026-12-02-h200-bench-kernels-lt.log without the cache,
  // -regcache.log with it for both input types): fp32 input gains
  // (1x128T 47% -> 61% of the copy, 128x128 58% -> 78%), bf16 input loses (128x1 51% -> 22%), so
  // bf16 keeps the re-read.
  constexpr bool kCache = B <= 128 && sizeof(T) == 4;
  constexpr int kR = kCache ? B / kWarps : 1;
  float cache[kR][4];
  float amax[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (kCache) {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int r = warp + i * kWarps;
      if (r < rows) {
        load4<T, kVec>(x + (r0 + r) * K, c0, K, cache[i]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) cache[i][j] = 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kR; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) amax[j] = amax_update(amax[j], cache[i][j]);  // |0| changes no amax
    }
  } else {
#pragma unroll 4
    for (int r = warp; r < rows; r += kWarps) {
      float v[4];
      load4<T, kVec>(x + (r0 + r) * K, c0, K, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) amax[j] = amax_update(amax[j], v[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) part[warp][lane * 4 + j] = amax[j];
  __syncthreads();
  if (threadIdx.x < kCols) {
    float a = part[0][threadIdx.x];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) a = amax_update(a, part[w][threadIdx.x]);
    const BlockScale bs = block_scale(a, F, pow2);
    mult[threadIdx.x] = bs.scale;
    const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kCols + threadIdx.x;
    if (c < K) scales[kTranspose ? c * mb + rb : rb * K + c] = bs.s_inv;
  }
  __syncthreads();

  auto emit = [&](int r, const float (&v)[4]) {
    std::uint8_t q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = quantize_element(v[j], mult[lane * 4 + j], F);
    if constexpr (kTranspose) {
#pragma unroll
      for (int j = 0; j < 4; ++j) tile[lane * 4 + j][r] = q[j];
    } else {
      std::uint8_t* dst = codes + (r0 + r) * K;
      if (kVec && c0 + 3 < K) {
        dev::store_vec<4>(dst + c0, q);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (c0 + j < K) dst[c0 + j] = q[j];
        }
      }
    }
  };
  if constexpr (kCache) {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      if (warp + i * kWarps < rows) emit(warp + i * kWarps, cache[i]);
    }
  } else {
#pragma unroll 4
    for (int r = warp; r < rows; r += kWarps) {
      float v[4];
      load4<T, kVec>(x + (r0 + r) * K, c0, K, v);
      emit(r, v);
    }
  }
  if constexpr (kTranspose) {
    __syncthreads();
    // codes (K,M): column c's block is `rows` consecutive bytes at c*M + r0. Four bytes per thread
    // and store where the row is 4-aligned and whole (M % 4 == 0): a warp writes 128 contiguous
    // bytes of one column; the 4 shared-memory bytes are read one by one (the odd pitch).
    const bool vec4 = M % 4 == 0;
    for (int idx = threadIdx.x * 4; idx < kCols * B; idx += kThreads * 4) {
      const int cl = idx / B, r = idx % B;
      const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kCols + cl;
      if (c >= K) continue;
      std::uint8_t* dst = codes + c * M + r0 + r;
      if (vec4 && r + 3 < rows) {
        const std::uint32_t w = static_cast<std::uint32_t>(tile[cl][r]) | static_cast<std::uint32_t>(tile[cl][r + 1]) << 8 |
                                static_cast<std::uint32_t>(tile[cl][r + 2]) << 16 |
                                static_cast<std::uint32_t>(tile[cl][r + 3]) << 24;
        *reinterpret_cast<std::uint32_t*>(dst) = w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (r + j < rows) dst[j] = tile[cl][r + j];
        }
      }
    }
  }
}

template <class T, int B, bool kTranspose>
void launch(const T* x, std::int64_t M, std::int64_t K, std::uint8_t* codes, float* scales, const QuantOptions& opt,
            cudaStream_t stream) {
  const std::int64_t mb = (M + B - 1) / B, cb = (K + kCols - 1) / kCols;
  if (mb > 65535) fail("quant_colwise: ", mb, " row blocks exceed the grid's y limit 65535 (M=", M, ", B=", B, ")");
  const dim3 grid(static_cast<unsigned>(cb), static_cast<unsigned>(mb));
  // The format is a template argument so that fp8_spec() folds into constants in the codec.
  const bool vec = K % 4 == 0, e4m3 = opt.format == Fp8Format::e4m3;
  const bool p2 = opt.pow2_scales;
  if (vec && e4m3) {
    quant_colwise_kernel<T, B, kTranspose, true, Fp8Format::e4m3><<<grid, kThreads, 0, stream>>>(x, M, K, codes, scales, p2);
  } else if (vec) {
    quant_colwise_kernel<T, B, kTranspose, true, Fp8Format::e5m2><<<grid, kThreads, 0, stream>>>(x, M, K, codes, scales, p2);
  } else if (e4m3) {
    quant_colwise_kernel<T, B, kTranspose, false, Fp8Format::e4m3><<<grid, kThreads, 0, stream>>>(x, M, K, codes, scales, p2);
  } else {
    quant_colwise_kernel<T, B, kTranspose, false, Fp8Format::e5m2><<<grid, kThreads, 0, stream>>>(x, M, K, codes, scales, p2);
  }
  FP8MOE_CUDA_CHECK_LAUNCH("quant_colwise_kernel", "M=", M, " K=", K, " B=", B, " transpose=", kTranspose);
}

template <class T, bool kTranspose>
void launch_b(const T* x, std::int64_t M, std::int64_t K, std::uint8_t* codes, float* scales, const QuantOptions& opt,
              cudaStream_t stream) {
  switch (opt.block) {
    case 64: return launch<T, 64, kTranspose>(x, M, K, codes, scales, opt, stream);
    case 128: return launch<T, 128, kTranspose>(x, M, K, codes, scales, opt, stream);
    case 256: return launch<T, 256, kTranspose>(x, M, K, codes, scales, opt, stream);
    default: fail("quant_colwise: block ", opt.block, " is not supported: use 64, 128 or 256");
  }
}

}  // namespace

template <class T>
void launch_quant_colwise(const T* x, std::int64_t M, std::int64_t K, bool transpose, std::uint8_t* codes,
                          float* scales, const QuantOptions& opt, cudaStream_t stream) {
  if (M == 0 || K == 0) return;
  if (transpose) {
    launch_b<T, true>(x, M, K, codes, scales, opt, stream);
  } else {
    launch_b<T, false>(x, M, K, codes, scales, opt, stream);
  }
}

template void launch_quant_colwise<float>(const float*, std::int64_t, std::int64_t, bool, std::uint8_t*, float*,
                                          const QuantOptions&, cudaStream_t);
template void launch_quant_colwise<Bf16Bits>(const Bf16Bits*, std::int64_t, std::int64_t, bool, std::uint8_t*, float*,
                                             const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
