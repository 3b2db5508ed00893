// B x B tiles of a grouped weight w (E,N,K) (the 128x128 recipes): one block per tile. Pass 1
// reads the tile with 4-element vector loads (B/4 threads per row) and reduces its amax; pass 2
// re-reads it (L2-resident) and writes codes in place (E,N,K), or, for the dgrad orientation
// (E,K,N), stages 32 rows at a time in shared memory so that consecutive threads write
// consecutive n of one k.
#include "kernels/quant_device.cuh"
#include "kernels/quantize.hpp"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kChunk = 32;

// grid (K/B, N/B, E). fwd: codes (E,N,K), scales (E,N/B,K/B); transposed: codes (E,K,N), scales (E,K/B,N/B).
template <class T, int B, bool kTranspose, Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    quant_tile_kernel(const T* __restrict__ w, std::int64_t N, std::int64_t K, std::uint8_t* __restrict__ codes,
                      float* __restrict__ scales, bool pow2) {
  constexpr int kTpr = B / 4;                 // threads per tile row
  constexpr int kRowStep = kThreads / kTpr;   // rows per sweep: 16, 8 or 4
  static_assert(kChunk % kRowStep == 0, "a staging chunk is whole sweeps");
  __shared__ float warp_max[kWarps];
  __shared__ float mult;
  // (k, n) codes; the odd pitch kChunk+1 spreads a warp's k over the banks
  __shared__ std::uint8_t stage[kTranspose ? B : 1][kTranspose ? kChunk + 1 : 1];
  const std::int64_t e = blockIdx.z, bn = blockIdx.y, bk = blockIdx.x;
  const std::int64_t nb = N / B, kb = K / B;
  const T* src = w + e * N * K + (bn * B) * K + bk * B;  // tile origin, row stride K
  const int tr = threadIdx.x / kTpr, tc = (threadIdx.x % kTpr) * 4;

  // B <= 128: the thread's B/kRowStep rows x 4 columns stay in registers between the amax pass
  // and the quantize pass (all loads in flight at once, no second read); B = 256 re-reads.
  // Measured on the H200 (results/bench/2026-12-02-h200-bench-kernels-lt.log without the cache,
  // -regcache.log with it for both input types): fp32 input gains
  // (1x128T 47% -> 61% of the copy, 128x128 58% -> 78%), bf16 input loses (128x1 51% -> 22%), so
  // bf16 keeps the re-read.
  constexpr bool kCache = B <= 128 && sizeof(T) == 4;
  constexpr int kR = kCache ? B / kRowStep : 1;
  float cache[kR][4];
  float amax = 0.0f;
  if constexpr (kCache) {
#pragma unroll
    for (int i = 0; i < kR; ++i) dev::load_vec<T, 4>(src + (tr + i * kRowStep) * K + tc, cache[i]);
#pragma unroll
    for (int i = 0; i < kR; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) amax = amax_update(amax, cache[i][j]);
    }
  } else {
#pragma unroll 4
    for (int r = tr; r < B; r += kRowStep) {
      float v[4];
      dev::load_vec<T, 4>(src + r * K + tc, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) amax = amax_update(amax, v[j]);
    }
  }
  amax = dev::warp_amax(amax);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float a = warp_max[0];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) a = amax_update(a, warp_max[i]);
    const BlockScale bs = block_scale(a, F, pow2);
    mult = bs.scale;
    scales[kTranspose ? (e * kb + bk) * nb + bn : (e * nb + bn) * kb + bk] = bs.s_inv;
  }
  __syncthreads();
  const float m = mult;

  if constexpr (!kTranspose) {
    std::uint8_t* dst = codes + e * N * K + (bn * B) * K + bk * B;
#pragma unroll
    for (int i = 0; i < B / kRowStep; ++i) {  // a compile-time trip count keeps cache[] in registers
      const int r = tr + i * kRowStep;
      float v[4];
      if constexpr (kCache) {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = cache[i][j];
      } else {
        dev::load_vec<T, 4>(src + r * K + tc, v);
      }
      std::uint8_t q[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) q[j] = quantize_element(v[j], m, F);
      dev::store_vec<4>(dst + r * K + tc, q);
    }
  } else {
    // codes (E,K,N): element (n, k) of the tile goes to dst[k*N + n]
    std::uint8_t* dst = codes + e * K * N + (bk * B) * N + bn * B;
#pragma unroll
    for (int n0 = 0; n0 < B; n0 += kChunk) {
#pragma unroll
      for (int k = 0; k < kChunk / kRowStep; ++k) {
        const int r = tr + k * kRowStep, i = n0 / kRowStep + k;
        float v[4];
        if constexpr (kCache) {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = cache[i][j];
        } else {
          dev::load_vec<T, 4>(src + (n0 + r) * K + tc, v);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) stage[tc + j][r] = quantize_element(v[j], m, F);
      }
      __syncthreads();
      // four bytes per thread and store (N is a multiple of B, so every row start is 4-aligned)
      for (int idx = threadIdx.x * 4; idx < B * kChunk; idx += kThreads * 4) {
        const int k = idx / kChunk, n = idx % kChunk;
        const std::uint32_t v = static_cast<std::uint32_t>(stage[k][n]) | static_cast<std::uint32_t>(stage[k][n + 1]) << 8 |
                                static_cast<std::uint32_t>(stage[k][n + 2]) << 16 |
                                static_cast<std::uint32_t>(stage[k][n + 3]) << 24;
        *reinterpret_cast<std::uint32_t*>(dst + static_cast<std::int64_t>(k) * N + n0 + n) = v;
      }
      __syncthreads();
    }
  }
}

template <class T, int B, bool kTranspose>
void launch(const T* w, std::int64_t E, std::int64_t N, std::int64_t K, std::uint8_t* codes, float* scales,
            const QuantOptions& opt, cudaStream_t stream) {
  const std::int64_t nb = N / B, kb = K / B;
  if (nb > 65535 || E > 65535) fail("quant_tile: grid (", kb, ",", nb, ",", E, ") exceeds the y/z limit 65535");
  const dim3 grid(static_cast<unsigned>(kb), static_cast<unsigned>(nb), static_cast<unsigned>(E));
  // The format is a template argument so that fp8_spec() folds into constants in the codec.
  if (opt.format == Fp8Format::e4m3) {
    quant_tile_kernel<T, B, kTranspose, Fp8Format::e4m3><<<grid, kThreads, 0, stream>>>(w, N, K, codes, scales, opt.pow2_scales);
  } else {
    quant_tile_kernel<T, B, kTranspose, Fp8Format::e5m2><<<grid, kThreads, 0, stream>>>(w, N, K, codes, scales, opt.pow2_scales);
  }
  FP8MOE_CUDA_CHECK_LAUNCH("quant_tile_kernel", "E=", E, " N=", N, " K=", K, " B=", B, " transpose=", kTranspose);
}

template <class T, bool kTranspose>
void launch_b(const T* w, std::int64_t E, std::int64_t N, std::int64_t K, std::uint8_t* codes, float* scales,
              const QuantOptions& opt, cudaStream_t stream) {
  switch (opt.block) {
    case 64: return launch<T, 64, kTranspose>(w, E, N, K, codes, scales, opt, stream);
    case 128: return launch<T, 128, kTranspose>(w, E, N, K, codes, scales, opt, stream);
    case 256: return launch<T, 256, kTranspose>(w, E, N, K, codes, scales, opt, stream);
    default: fail("quant_tile: block ", opt.block, " is not supported: use 64, 128 or 256");
  }
}

}  // namespace

template <class T>
void launch_quant_tile(const T* w, std::int64_t E, std::int64_t N, std::int64_t K, bool transpose,
                       std::uint8_t* codes, float* scales, const QuantOptions& opt, cudaStream_t stream) {
  if (E == 0 || N == 0 || K == 0) return;
  if (transpose) {
    launch_b<T, true>(w, E, N, K, codes, scales, opt, stream);
  } else {
    launch_b<T, false>(w, E, N, K, codes, scales, opt, stream);
  }
}

template void launch_quant_tile<float>(const float*, std::int64_t, std::int64_t, std::int64_t, bool, std::uint8_t*,
                                       float*, const QuantOptions&, cudaStream_t);
template void launch_quant_tile<Bf16Bits>(const Bf16Bits*, std::int64_t, std::int64_t, std::int64_t, bool,
                                          std::uint8_t*, float*, const QuantOptions&, cudaStream_t);

}  // namespace fp8moe::kernels
