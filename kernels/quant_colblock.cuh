#pragma once
// The column-block quantizer behind quant_colwise.cu (B x 1 groups: act rhs 128x1, transposed
// lhs, K-grouped) and quant_tile.cu (B x B weight tiles): a CUDA block owns B rows x kCols
// columns of one (M,K) matrix (blockIdx.z picks the expert of a grouped weight).
//
// Threads: kLanesPerRow threads cover a row with 16-byte vectors (8 bf16 or 4 fp32 columns
// each); a thread owns kRowsPerThread consecutive rows of its columns, loads them all before
// using any (kCache: they stay in registers as raw bits, so the block reads its input once), and
// takes each column's amax as the integer max of magnitude bits (quant_device.cuh). The threads
// of a column meet in shared memory; one thread per column (or, for a tile, the whole block)
// forms the scale with block_scale's device path. Codes come two at a time from quantize_pair:
// adjacent columns of a row for the in-place layout (stored as 8- or 4-byte vectors), adjacent
// rows of a column for the transposed layout, staged in shared memory as 8-byte units (8 rows of
// one column) under an XOR swizzle that keeps a warp's stores on distinct banks, then written out
// as 16-byte runs of a column (16 consecutive rows of the (K,M) output).
// Measured on the H200 (results/bench/2026-12-04-h200-gpu-round3): 89-99.8% of a device copy for
// every recipe; the two kernels it replaced (4 columns per lane, bf16 input re-read from L2,
// float amax_update, scalar codes) reached 42-77% (2026-12-03-h200-gpu-round2).
#include "kernels/check.hpp"
#include "kernels/quant_device.cuh"
#include "reference/error.hpp"
#include "reference/quant_layout.hpp"

namespace fp8moe::kernels::colblock {

enum class Amax { column, tile };

constexpr int rows_per_thread(int B, int lanes_per_row) {
  int r = 8;
  while ((B / r) * lanes_per_row > 512) r *= 2;
  return r;
}

template <class T, int B, Amax kAmax>
struct Cfg {
  static constexpr int V = dev::kVecElems<T>;
  static constexpr int kCols = kAmax == Amax::tile ? B : 128;  // columns per block
  static constexpr int kLanesPerRow = kCols / V;
  static constexpr int kRowsPerThread = rows_per_thread(B, kLanesPerRow);
  static constexpr int kThreadRows = B / kRowsPerThread;
  static constexpr int kThreads = kThreadRows * kLanesPerRow;
  // Registers hold the whole block's input (kRowsPerThread x 4 words) when that is at most 64
  // words; beyond (fp32 256 x 256 tiles) the rows go in chunks of 8 and pass 2 re-reads them
  // (L2-resident).
  static constexpr bool kCache = kRowsPerThread <= 16;
  static constexpr int kChunk = kCache ? kRowsPerThread : 8;
  static constexpr int kChunks = kRowsPerThread / kChunk;
  static_assert(kThreads <= 512 && kThreads >= kCols && kThreads % 32 == 0, "block shape");
  static_assert(B % 16 == 0 && kRowsPerThread % 8 == 0, "8-row units, 16-byte output runs");
  // dynamic shared memory: multipliers, tile keys of the warps, then either the per-thread-row
  // column keys (pass 1) or the staged transposed codes (pass 2)
  static constexpr std::size_t kPartBytes = sizeof(std::uint32_t) * kThreadRows * kCols;
  static constexpr std::size_t kStageBytes = static_cast<std::size_t>(kCols) * B;
  static std::size_t smem_bytes(bool transpose) {
    const std::size_t body = transpose && kStageBytes > kPartBytes ? kStageBytes : kPartBytes;
    return sizeof(float) * kCols + sizeof(std::uint32_t) * 32 + body;
  }
};

struct Args {
  std::int64_t M;  // rows of one matrix (tokens, or N of a weight)
  std::int64_t K;  // columns
  // The stored codes and scales, as the host allocated them (reference/quantize.hpp's quant_layout):
  // (E, M, K) or, transposed, (E, K, M); every code and scale index is its code_index/scale_index.
  QuantLayout out;
};

// x (E, M, K) -> codes (E, M, K) or, kTranspose, (E, K, M); scales per a.out.
// Grid (ceil(K / kCols), ceil(M / B), E).
template <class T, int B, Amax kAmax, bool kTranspose, bool kAligned, Fp8Format F>
__global__ void __launch_bounds__(Cfg<T, B, kAmax>::kThreads)
    quant_colblock_kernel(const T* __restrict__ x, Args a, std::uint8_t* __restrict__ codes,
                          float* __restrict__ scales, bool pow2) {
  using C = Cfg<T, B, kAmax>;
  constexpr int V = C::V;
  extern __shared__ __align__(16) unsigned char smem[];
  float* mult = reinterpret_cast<float*>(smem);
  std::uint32_t* warp_keys = reinterpret_cast<std::uint32_t*>(smem + sizeof(float) * C::kCols);
  unsigned char* body = smem + sizeof(float) * C::kCols + sizeof(std::uint32_t) * 32;
  std::uint32_t* part = reinterpret_cast<std::uint32_t*>(body);  // [kThreadRows][kCols]
  unsigned char* stage = body;                                    // [kCols][B], swizzled units

  const int tid = threadIdx.x, cl = tid % C::kLanesPerRow, trow = tid / C::kLanesPerRow;
  const std::int64_t e = blockIdx.z, rb = blockIdx.y, bk = blockIdx.x;
  const std::int64_t r0 = rb * B, M = a.M, K = a.K;
  const int rows = static_cast<int>(M - r0 < B ? M - r0 : B);
  const std::int64_t col0 = bk * C::kCols + cl * V;  // the thread's first column
  const T* src = x + e * M * K;

  uint4 raw[C::kChunk];
  auto load_chunk = [&](int ch) {
#pragma unroll
    for (int i = 0; i < C::kChunk; ++i) {
      const int r = trow * C::kRowsPerThread + ch * C::kChunk + i;
      raw[i] = r < rows ? dev::load_row_vec<T, kAligned>(src + (r0 + r) * K, col0, K) : make_uint4(0, 0, 0, 0);
    }
  };

  // Pass 1: the thread's column keys over its rows.
  std::uint32_t key[V];
#pragma unroll
  for (int j = 0; j < V; ++j) key[j] = 0;
#pragma unroll
  for (int ch = 0; ch < C::kChunks; ++ch) {
    load_chunk(ch);
    if constexpr (sizeof(T) == 2) {
      std::uint32_t w[4] = {0, 0, 0, 0};  // packed 16-bit keys of column pairs
#pragma unroll
      for (int i = 0; i < C::kChunk; ++i) {
        w[0] = dev::max_u16x2(w[0], raw[i].x & 0x7fff7fffu);
        w[1] = dev::max_u16x2(w[1], raw[i].y & 0x7fff7fffu);
        w[2] = dev::max_u16x2(w[2], raw[i].z & 0x7fff7fffu);
        w[3] = dev::max_u16x2(w[3], raw[i].w & 0x7fff7fffu);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) key[j] = max(key[j], (j & 1) ? (w[j >> 1] & 0xffff0000u) : (w[j >> 1] << 16));
    } else {
#pragma unroll
      for (int i = 0; i < C::kChunk; ++i) {
#pragma unroll
        for (int j = 0; j < V; ++j) key[j] = max(key[j], dev::elem_amax_bits<T>(raw[i], j));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; j += 4) {
    *reinterpret_cast<uint4*>(part + trow * C::kCols + cl * V + j) = make_uint4(key[j], key[j + 1], key[j + 2], key[j + 3]);
  }
  __syncthreads();

  // The scales: one thread per column, then (tile) one for the block.
  if (tid < C::kCols) {
    std::uint32_t k = part[tid];
#pragma unroll
    for (int t = 1; t < C::kThreadRows; ++t) k = max(k, part[t * C::kCols + tid]);
    if constexpr (kAmax == Amax::column) {
      const BlockScale bs = block_scale(__uint_as_float(k), F, pow2);
      mult[tid] = bs.scale;
      const std::int64_t col = bk * C::kCols + tid;
      if (col < K) scales[kTranspose ? a.out.scale_index(e, col, r0) : a.out.scale_index(e, r0, col)] = bs.s_inv;
    } else {
      k = __reduce_max_sync(0xffffffffu, k);  // kCols is a multiple of 32: whole warps
      if ((tid & 31) == 0) warp_keys[tid >> 5] = k;
    }
  }
  if constexpr (kAmax == Amax::tile) {
    __syncthreads();
    if (tid == 0) {
      std::uint32_t k = warp_keys[0];
#pragma unroll
      for (int w = 1; w < C::kCols / 32; ++w) k = max(k, warp_keys[w]);
      const BlockScale bs = block_scale(__uint_as_float(k), F, pow2);
      mult[0] = bs.scale;
      const std::int64_t c0 = bk * C::kCols;  // the tile's first column
      scales[kTranspose ? a.out.scale_index(e, c0, r0) : a.out.scale_index(e, r0, c0)] = bs.s_inv;
    }
  }
  __syncthreads();  // also: pass 2 may overwrite part with staged codes
  float m[V];
#pragma unroll
  for (int j = 0; j < V; ++j) m[j] = mult[kAmax == Amax::column ? cl * V + j : 0];

  // Pass 2: codes.
#pragma unroll
  for (int ch = 0; ch < C::kChunks; ++ch) {
    if constexpr (!C::kCache) load_chunk(ch);
    const int rbase = trow * C::kRowsPerThread + ch * C::kChunk;  // the chunk's first row in the block
    if constexpr (!kTranspose) {
#pragma unroll
      for (int i = 0; i < C::kChunk; ++i) {
        const int r = rbase + i;
        if (r >= rows || col0 >= K) continue;
        const uint2 q = dev::quantize_vec<T, F>(raw[i], m);
        std::uint8_t* dst = codes + a.out.code_index(e, r0 + r, col0);
        if (kAligned) {
          dev::store_codes<T>(dst, q);
        } else {
          dev::store_codes_partial<T>(dst, q, K - col0);
        }
      }
    } else {
      constexpr int kSwzMask = B / 8 - 1;
      const int swz = cl & kSwzMask;
#pragma unroll
      for (int j = 0; j < V; ++j) {
#pragma unroll
        for (int u8 = 0; u8 < C::kChunk; u8 += 8) {  // 8 rows of column j: one 8-byte unit
          std::uint32_t w[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = u8 + 4 * h;
            const std::uint32_t p0 = quantize_pair<F>(dev::elem<T>(raw[i], j), m[j], dev::elem<T>(raw[i + 1], j), m[j]);
            const std::uint32_t p1 = quantize_pair<F>(dev::elem<T>(raw[i + 2], j), m[j], dev::elem<T>(raw[i + 3], j), m[j]);
            w[h] = p0 | p1 << 16;
          }
          const int unit = (rbase + u8) / 8;
          *reinterpret_cast<uint2*>(stage + (cl * V + j) * B + 8 * (unit ^ swz)) = make_uint2(w[0], w[1]);
        }
      }
    }
  }
  if constexpr (kTranspose) {
    __syncthreads();
    // codes (E,K,M): column col's block is `rows` consecutive bytes from code_index(e, col, r0).
    constexpr int kQ = B / 16;
    const bool vec16 = M % 16 == 0;
    for (int idx = tid; idx < C::kCols * kQ; idx += C::kThreads) {
      const int c = idx / kQ, q = idx % kQ, r = 16 * q;
      const std::int64_t col = bk * C::kCols + c;
      if (col >= K || r >= rows) continue;
      const int swz = (c / V) & (B / 8 - 1);
      uint4 v = *reinterpret_cast<const uint4*>(stage + c * B + 16 * (q ^ (swz >> 1)));
      if (swz & 1) v = make_uint4(v.z, v.w, v.x, v.y);
      std::uint8_t* out = codes + a.out.code_index(e, col, r0 + r);
      if (vec16 && r + 16 <= rows) {
        *reinterpret_cast<uint4*>(out) = v;
      } else {
        const std::uint32_t ws[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int b = 0; b < 16; ++b) {
          if (r + b < rows) out[b] = static_cast<std::uint8_t>(ws[b >> 2] >> (8 * (b & 3)));
        }
      }
    }
  }
}

// Launches the kernel for x (E, M, K); the format and layout flags become template arguments.
// `out` is the layout of codes and scales (quant_layout's); it must be the one this kernel's
// blocks make: B rows x 1 column (column) or B x B (tile) of x, transposed with the codes.
template <class T, int B, Amax kAmax, bool kTranspose>
void launch(const T* x, std::int64_t E, std::int64_t M, std::int64_t K, const QuantLayout& out, std::uint8_t* codes,
            float* scales, bool pow2, Fp8Format f, cudaStream_t stream, const char* what) {
  using C = Cfg<T, B, kAmax>;
  const int along_k = kAmax == Amax::tile ? B : 1;
  const bool fits = out.batch == E && (kTranspose ? out.rows == K && out.cols == M && out.block_rows == along_k &&
                                                        out.block_cols == B
                                                  : out.rows == M && out.cols == K && out.block_rows == B &&
                                                        out.block_cols == along_k);
  if (!fits) {
    fail(what, ": internal: the layout (", out.batch, ",", out.rows, ",", out.cols, ") in ", out.block_rows, "x",
         out.block_cols, " blocks is not what this kernel writes for x (", E, ",", M, ",", K, "), B=", B,
         kTranspose ? ", transposed" : "");
  }
  const std::int64_t mb = (M + B - 1) / B, cb = (K + C::kCols - 1) / C::kCols;
  if (mb > 65535 || E > 65535) {
    fail(what, ": grid (", cb, ",", mb, ",", E, ") exceeds the y/z limit 65535 (M=", M, ", K=", K, ", B=", B, ")");
  }
  const Args a{M, K, out};
  const dim3 grid(static_cast<unsigned>(cb), static_cast<unsigned>(mb), static_cast<unsigned>(E));
  const std::size_t smem = C::smem_bytes(kTranspose);
  const bool aligned = K % C::V == 0;
  auto go = [&](auto kernel) {
    if (smem > 48 * 1024) {
      FP8MOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                        what, " shared memory ", smem, " bytes (B=", B, ")");
    }
    kernel<<<grid, C::kThreads, smem, stream>>>(x, a, codes, scales, pow2);
  };
  if (aligned && f == Fp8Format::e4m3) {
    go(quant_colblock_kernel<T, B, kAmax, kTranspose, true, Fp8Format::e4m3>);
  } else if (aligned) {
    go(quant_colblock_kernel<T, B, kAmax, kTranspose, true, Fp8Format::e5m2>);
  } else if constexpr (kAmax == Amax::column) {  // a tile's K is a multiple of B: always aligned
    if (f == Fp8Format::e4m3) {
      go(quant_colblock_kernel<T, B, kAmax, kTranspose, false, Fp8Format::e4m3>);
    } else {
      go(quant_colblock_kernel<T, B, kAmax, kTranspose, false, Fp8Format::e5m2>);
    }
  } else {
    fail(what, ": K=", K, " is not a multiple of ", C::V, " (the tile recipes need K % B == 0)");
  }
  FP8MOE_CUDA_CHECK_LAUNCH("quant_colblock_kernel", what, ": E=", E, " M=", M, " K=", K, " B=", B, " transpose=", kTranspose);
}

}  // namespace fp8moe::kernels::colblock
