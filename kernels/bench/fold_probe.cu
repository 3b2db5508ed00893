// fp8moe-fold-probe: can the blockwise fold run under the tensor pipe's MMAs on this GPU?
//
// The backend's fwd/dgrad kernel (128x192 tiles, one fp32 partial per consumer warpgroup) holds the
// tensor pipe about 77 % busy on the H100 (SPEC 15.5): each 128-K block is four wgmma m64n192k32
// into a partial, a wait, then the fold acc = fma(P, sa*sb, acc), 96 FFMA a thread, and both
// warpgroups fold at the same time. This probe times that loop and its variants on one resident
// CTA per SM with the operands already in shared memory (no producer, no TMA, no epilogue: the
// MMA-side ceiling of each arrangement), so that what the schedule costs is separated from what
// the hardware allows:
//   stream      wgmma chains into one accumulator, never waited for (the per-tensor ceiling)
//   wait        the same, waited for after every 128-K block (the drain alone)
//   fold-step   a partial per block, waited for and folded; the warpgroups meet at a barrier
//               every block, as the backend's do at its shared-memory stages
//   fold-free   the same without the barrier
//   fold-offset fold-free, warpgroup w starting one block after warpgroup w-1 (round 12's idea)
//   halves      each warpgroup's 192 columns as two 96-wide chains (m64n96k32) in flight one
//               after the other, waited for one at a time, unfolded (the narrower wgmma's ceiling)
//   fold-halves the same, each half's partial folded while the other half's chain runs: the fold
//               under the warpgroup's own MMAs, in the registers of one 192-wide partial
//   side-ffma   `wait`, plus one more warpgroup doing the folds' FFMAs (same count, same scale
//               loads) on registers of its own: whether FFMAs and MMAs share the SM without cost
// for 2 warpgroups of 64x192 (the backend's tile), 2 of 64x128 and 3 of 64x128 (192x128 tiles),
// each with the operands in the 128-byte-swizzled layout (TMA's and CUTLASS's) and, as a
// control, the unswizzled canonical one.
//
// Every timed configuration is checked first, on the launch it times. The folded schedules: each
// output of the first and the last CTA against a double-precision sum (A B^T of a block, summed
// over the blocks under the fold's scales; bound 1e-3 of the sum of |products| as scaled). The
// unfolded ones carry one accumulator through every block, as a kernel without promotion does; the
// tensor cores' own accumulation keeps fewer bits than fp32 (SPEC 7.5: over 4096 equal blocks the
// sum came out 27 % low), so 64 outputs of each of those CTAs are checked bit for bit against
// reference/tensor_core.hpp's tc_step chained over the blocks instead. (They must keep the sum:
// restarted every block, ptxas drops the chains whose result is overwritten unread, and the row
// times less work than it claims.) The side warpgroup's FFMAs are checked exactly (all of its
// values are small multiples of powers of two). A row faster than the tensor pipe's peak (tensor %
// over 100) fails too: work the compiler removed; so does one whose last timed launch's outputs
// (every CTA's) differ from the checked launch's. A configuration that fails is reported and
// not timed; the exit status is then 1. TFLOP/s count the MMAs only (2 x 64 x N x 128 per
// warpgroup and block); "tensor %" is the MMA cycles (4096 FP8 MACs per SM and cycle, dense) over
// the CTA's measured cycles; "vs stream" is against the stream row of the same tile and layout,
// timed in the same run.
//   fp8moe-fold-probe [--blocks T=4096] [--runs R=7] [--layout swizzled|plain|both=both]
// Exit status: 0, 1 (a check failed), 2 (bad arguments), 77 (no sm_90 device: nothing to measure).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "kernels/wgmma_asm.cuh"
#include "kernels/wgmma_probe.hpp"
#include "reference/formats.hpp"
#include "reference/tensor_core.hpp"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8MOE_FOLD_PROBE_WGMMA 1
#else
#define FP8MOE_FOLD_PROBE_WGMMA 0
#endif

namespace fp8moe::kernels::fold_probe {
namespace {

enum class Sched { stream, wait, fold_step, fold_free, fold_offset, side_ffma, halves, fold_halves };
enum class Layout { swizzled, plain };

const char* sched_name(Sched s) {
  switch (s) {
    case Sched::stream: return "stream";
    case Sched::wait: return "wait";
    case Sched::fold_step: return "fold-step";
    case Sched::fold_free: return "fold-free";
    case Sched::fold_offset: return "fold-offset";
    case Sched::side_ffma: return "side-ffma";
    case Sched::halves: return "halves";
    case Sched::fold_halves: return "fold-halves";
  }
  return "?";
}
__host__ __device__ constexpr bool folds(Sched s) {
  return s == Sched::fold_step || s == Sched::fold_free || s == Sched::fold_offset || s == Sched::fold_halves;
}
__host__ __device__ constexpr bool in_halves(Sched s) { return s == Sched::halves || s == Sched::fold_halves; }

constexpr int kRows = 64;         // rows of a warpgroup's wgmma tile
constexpr int kBlockK = 128;      // K of one fold (one 128-K block: four k32 wgmmas)
constexpr int kWgBytes = kRows * kBlockK;  // one warpgroup's A tile (8 KiB, a multiple of 1024)
constexpr int kScaleSets = 2;     // blocks alternate between two sets of row scales (kb & 1)
constexpr int kSmemPad = 120 * 1024;  // dynamic shared memory a CTA asks for: one CTA per SM
constexpr int kSideInputs = 8;       // the side warpgroup's distinct FFMA inputs (few registers)
constexpr int kModelChecks = 64;     // outputs of a CTA checked against the model (unfolded schedules)

// Byte of (row, k) in an operand tile of `rows` rows by 128 K, K-major (PTX ISA 9.7.15.5.1.2).
// swizzled: 128-byte rows, the 16-byte chunk index XORed with row % 8 (the 128B swizzle; tile base
// 1024-aligned). plain: the no-swizzle canonical layout, 8x16-byte core matrices stacked along the
// rows, one K column of them after the other (kernels/wgmma_probe.hpp's smem_offset).
__host__ __device__ inline std::uint32_t operand_byte(Layout l, int row, int k, int rows) {
  if (l == Layout::swizzled) {
    return static_cast<std::uint32_t>(row * 128 + (((k / 16) ^ (row % 8)) * 16) + k % 16);
  }
  return wgmma::smem_offset(row, k, rows);
}

// The matrix descriptor of k32 step `ks` (0..3) of a tile at shared address `base` (PTX ISA
// 9.7.15.5.1.2.2: start, leading and stride byte offsets >> 4 in bits 0-13, 16-29, 32-45; bits
// 62-63 the swizzle, 1 = 128B). Swizzled: the step starts 32 bytes further (the hardware swizzles
// the address it forms), 8-row groups 1024 bytes apart. Plain: two K columns of core matrices further.
__device__ inline std::uint64_t descriptor(Layout l, std::uint32_t base, int rows, int ks) {
  if (l == Layout::swizzled) return wgmma::make_desc(base + 32u * ks, 16, 1024, false) | (1ull << 62);
  const std::uint32_t lbo = wgmma::operand_lbo(rows);
  return wgmma::make_desc(base + 2u * lbo * ks, lbo, wgmma::operand_sbo(rows), false);
}

// Bytes from an operand tile's first row to row `r` (a multiple of 8) in either layout.
__host__ __device__ constexpr std::uint32_t row_bytes(Layout l, int r) {
  return static_cast<std::uint32_t>(l == Layout::swizzled ? r * 128 : r * 16);
}

// Accumulator register i of thread t (0..127) of a warpgroup: (row, col) of the 64 x N tile
// (PTX ISA Figure 153; kernels/wgmma_probe.hpp's d_fragment).
__host__ __device__ inline int frag_row(int t, int i) { return wgmma::d_fragment(t, i).row; }
__host__ __device__ inline int frag_col(int t, int i) { return wgmma::d_fragment(t, i).col; }

template <int N>
__device__ __forceinline__ void mma(float (&d)[N / 2], std::uint64_t da, std::uint64_t db, int scale_d) {
#if FP8MOE_FOLD_PROBE_WGMMA
  static_assert(N == 96 || N == 128 || N == 192, "the probe instantiates N = 96, 128, 192");
  if constexpr (N == 96) {
    FP8MOE_WGMMA_ASM(96, 48, 48, 49, 50, e4m3, e4m3, scale_d);
  } else if constexpr (N == 128) {
    FP8MOE_WGMMA_ASM(128, 64, 64, 65, 66, e4m3, e4m3, scale_d);
  } else {
    FP8MOE_WGMMA_ASM(192, 96, 96, 97, 98, e4m3, e4m3, scale_d);
  }
#else
  (void)d;
  (void)da;
  (void)db;
  (void)scale_d;
#endif
}

__device__ __forceinline__ void named_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }

struct Params {
  const std::uint8_t* a;  // (NWG * 64, 128) e4m3 codes, row-major
  const std::uint8_t* b;  // (N, 128)
  const float* sa;        // (kScaleSets, NWG * 64) row scales
  float sb;               // the block's weight scale
  const float* x;         // (kSideInputs) the side warpgroup's FFMA inputs (register i takes i % 8)
  int blocks;             // 128-K blocks per warpgroup
  float* out;             // (CTAs, NWG * 64, N) each consumer's accumulator
  float* side;            // (CTAs, 128, 96) the side warpgroup's registers
  long long* cycles;      // (CTAs)
};

template <int N, int NWG, Sched S>
__host__ __device__ constexpr int threads_of() {
  return (NWG + (S == Sched::side_ffma ? 1 : 0)) * 128;
}

template <int N, int NWG, Sched S, Layout L>
__global__ void __launch_bounds__(threads_of<N, NWG, S>(), 1) probe_kernel(Params p) {
#if FP8MOE_FOLD_PROBE_WGMMA
  extern __shared__ std::uint8_t smem_raw[];
  // 1024-align the tiles (the 128B swizzle's atom): the request carries 1024 bytes of slack.
  const std::uint32_t raw = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem_raw));
  std::uint8_t* smem = smem_raw + ((1024u - (raw & 1023u)) & 1023u);
  std::uint8_t* sA = smem;
  std::uint8_t* sB = smem + NWG * kWgBytes;
  float* sSa = reinterpret_cast<float*>(sB + N * kBlockK);
  const int tid = threadIdx.x;
  constexpr int kThreads = threads_of<N, NWG, S>();
  for (int q = tid; q < NWG * kRows * 8; q += kThreads) {  // 16-byte chunks of A
    const int row = q / 8, chunk = q % 8;
    *reinterpret_cast<uint4*>(sA + (row / kRows) * kWgBytes + operand_byte(L, row % kRows, chunk * 16, kRows)) =
        reinterpret_cast<const uint4*>(p.a)[q];
  }
  for (int q = tid; q < N * 8; q += kThreads) {
    const int row = q / 8, chunk = q % 8;
    *reinterpret_cast<uint4*>(sB + operand_byte(L, row, chunk * 16, N)) = reinterpret_cast<const uint4*>(p.b)[q];
  }
  for (int q = tid; q < kScaleSets * NWG * kRows; q += kThreads) sSa[q] = p.sa[q];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic stores -> wgmma's async proxy
  __syncthreads();
  const long long t0 = clock64();
  const int w = tid / 128, lt = tid % 128;
  const int r0 = frag_row(lt, 0), r1 = frag_row(lt, 2);
  if (w < NWG) {
    const std::uint32_t a_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(sA + w * kWgBytes));
    const std::uint32_t b_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(sB));
    float acc[N / 2], part[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] = part[i] = 0.0f;
    if constexpr (S == Sched::fold_offset) {
      if (w > 0) named_sync(2 + w, 256);  // warpgroup w-1 arrives once its first block is folded
    }
    if constexpr (in_halves(S)) {
      // Two 96-wide chains a block, in flight one after the other. Register i of half h is
      // column 96 h + frag_col(i): acc's register 48 h + i.
      static_assert(N == 192, "halves of the 192-wide tile");
      // Zeroed where the compiler cannot see the value: a register known to hold 0 becomes the
      // source of other zeros, read while a chain is in flight, and ptxas serializes (C7514).
      float h0[48], h1[48];
#pragma unroll
      for (int i = 0; i < 48; ++i) {
        asm volatile("mov.b32 %0, 0;" : "=f"(h0[i]));
        asm volatile("mov.b32 %0, 0;" : "=f"(h1[i]));
      }
      const auto issue = [&](float(&d)[48], int h) {
        wgmma_fence_regs(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          mma<96>(d, descriptor(L, a_base, kRows, ks), descriptor(L, b_base + row_bytes(L, 96 * h), N, ks),
                  S == Sched::fold_halves && ks == 0 ? 0 : 1);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      };
      const auto fold_half = [&](float(&d)[48], int h, int kb) {
        wgmma_fence_regs(d);
        if constexpr (S == Sched::fold_halves) {
          const float* s = sSa + (kb & 1) * NWG * kRows + w * kRows;
          const float s0 = s[r0] * p.sb, s1 = s[r1] * p.sb;
#pragma unroll
          for (int i = 0; i < 48; ++i) acc[48 * h + i] = fmaf(d[i], (i / 2) % 2 ? s1 : s0, acc[48 * h + i]);
        }
      };
      // Block kb, its left half's chain in flight: issue the right half, wait for the left one
      // and fold it, issue the next block's left half (none after the last), wait for the right
      // one and fold it. Two blocks an iteration and the last one or two after the loop: the
      // shape in which ptxas keeps the chains asynchronous (kernels/cutlass_overlap.cuh's halves;
      // one block an iteration, and ptxas serializes every wgmma: C7514, SPEC 15.5).
      const auto block = [&](int kb, bool last) {
        issue(h1, 1);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        fold_half(h0, 0, kb);
        if (last) {
          asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        } else {
          issue(h0, 0);
          asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        fold_half(h1, 1, kb);
      };
      issue(h0, 0);
      int kb = 0, left = p.blocks - 1;  // blocks after kb
#pragma unroll 1
      while (left >= 2) {
        block(kb, false);
        block(kb + 1, false);
        kb += 2;
        left -= 2;
      }
      if (left == 1) {
        block(kb, false);
        block(kb + 1, true);
      } else {
        block(kb, true);
      }
      if constexpr (S == Sched::halves) {
#pragma unroll
        for (int i = 0; i < 48; ++i) {
          acc[i] = h0[i];
          acc[48 + i] = h1[i];
        }
      }
    }
    for (int kb = 0; kb < (in_halves(S) ? 0 : p.blocks); ++kb) {
      if constexpr (folds(S)) {
        if constexpr (S == Sched::fold_step) named_sync(1, NWG * 128);
        wgmma_fence_regs(part);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          mma<N>(part, descriptor(L, a_base, kRows, ks), descriptor(L, b_base, N, ks), ks > 0 ? 1 : 0);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        wgmma_fence_regs(part);
        const float* s = sSa + (kb & 1) * NWG * kRows + w * kRows;
        const float s0 = s[r0] * p.sb, s1 = s[r1] * p.sb;
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[i] = fmaf(part[i], (i / 2) % 2 ? s1 : s0, acc[i]);
        if constexpr (S == Sched::fold_offset) {
          if (kb == 0 && w + 1 < NWG) named_arrive(2 + w + 1, 256);
        }
      } else {
        wgmma_fence_regs(acc);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) mma<N>(acc, descriptor(L, a_base, kRows, ks), descriptor(L, b_base, N, ks), 1);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if constexpr (S == Sched::stream) {
          asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        } else {
          asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        }
        wgmma_fence_regs(acc);
      }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wgmma_fence_regs(acc);
    float* o = p.out + (static_cast<std::int64_t>(blockIdx.x) * NWG * kRows + w * kRows) * N;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) o[frag_row(lt, i) * N + frag_col(lt, i)] = acc[i];
  } else {
    // The side warpgroup: every block, the consumers' folds' FFMAs (NWG x 96 a thread) and scale
    // loads, on registers of its own.
    float y[96], x[kSideInputs];
#pragma unroll
    for (int i = 0; i < 96; ++i) y[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kSideInputs; ++i) x[i] = p.x[i];
    for (int kb = 0; kb < p.blocks; ++kb) {
      for (int g = 0; g < NWG; ++g) {
        const float* s = sSa + (kb & 1) * NWG * kRows + g * kRows;
        const float s0 = s[r0] * p.sb, s1 = s[r1] * p.sb;
#pragma unroll
        for (int i = 0; i < 96; ++i) y[i] = fmaf(x[i % kSideInputs], (i / 2) % 2 ? s1 : s0, y[i]);
      }
    }
    float* o = p.side + (static_cast<std::int64_t>(blockIdx.x) * 128 + lt) * 96;
#pragma unroll
    for (int i = 0; i < 96; ++i) o[i] = y[i];
  }
  __syncthreads();
  if (tid == 0) p.cycles[blockIdx.x] = clock64() - t0;
#else
  (void)p;
  __trap();
#endif
}

__global__ void arch_kernel(int* out) { *out = FP8MOE_FOLD_PROBE_WGMMA; }

// ---- Host side.
struct Config {
  int n, nwg;
  Sched sched;
  Layout layout;
  void (*kernel)(Params);
  int threads;
};

template <int N, int NWG, Sched S, Layout L>
Config make() {
  return {N, NWG, S, L, &probe_kernel<N, NWG, S, L>, threads_of<N, NWG, S>()};
}

template <Layout L>
void add_layout(std::vector<Config>& v) {
  v.push_back(make<192, 2, Sched::stream, L>());
  v.push_back(make<192, 2, Sched::wait, L>());
  v.push_back(make<192, 2, Sched::fold_step, L>());
  v.push_back(make<192, 2, Sched::fold_free, L>());
  v.push_back(make<192, 2, Sched::fold_offset, L>());
  v.push_back(make<192, 2, Sched::side_ffma, L>());
  v.push_back(make<192, 2, Sched::halves, L>());
  v.push_back(make<192, 2, Sched::fold_halves, L>());
  v.push_back(make<128, 2, Sched::stream, L>());
  v.push_back(make<128, 2, Sched::wait, L>());
  v.push_back(make<128, 2, Sched::fold_step, L>());
  v.push_back(make<128, 2, Sched::fold_free, L>());
  v.push_back(make<128, 3, Sched::stream, L>());
  v.push_back(make<128, 3, Sched::wait, L>());
  v.push_back(make<128, 3, Sched::fold_step, L>());
  v.push_back(make<128, 3, Sched::fold_free, L>());
  v.push_back(make<128, 3, Sched::fold_offset, L>());
}

struct Data {
  std::vector<std::uint8_t> a, b;  // (3 * 64, 128), (192, 128): the largest configuration's
  std::vector<float> sa, x;        // (2, 3 * 64), (kSideInputs)
  float sb = 0.125f;
};

// Finite e4m3 codes from the whole range (NaN codes redrawn); row scales 2^-4 .. 2^-8; side
// inputs small integers (its sums stay exact).
Data make_data(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Data d;
  const auto code = [&] {
    for (;;) {
      const auto c = static_cast<std::uint8_t>(rng() & 0xFF);
      if (!fp8_is_nan(c, Fp8Format::e4m3)) return c;
    }
  };
  d.a.resize(3 * kRows * kBlockK);
  d.b.resize(192 * kBlockK);
  for (auto& c : d.a) c = code();
  for (auto& c : d.b) c = code();
  d.sa.resize(kScaleSets * 3 * kRows);
  for (auto& s : d.sa) s = std::ldexp(1.0f, -4 - static_cast<int>(rng() % 5));
  d.x.resize(kSideInputs);
  for (auto& v : d.x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
  return d;
}

struct Check {
  std::int64_t checked = 0, bad = 0;
  std::string first;
};

// Each consumer output of CTA `cta` against the double sum; the side outputs exactly.
void check_cta(const Config& c, const Data& d, int blocks, const std::vector<float>& out, const std::vector<float>& side,
               int cta, Check& ck) {
  const auto dec = [](std::uint8_t v) { return static_cast<double>(fp8_decode(v, Fp8Format::e4m3)); };
  const int rows = c.nwg * kRows;
  const std::int64_t even = (blocks + 1) / 2, odd = blocks / 2;  // blocks using scale set 0 and 1
  if (!folds(c.sched)) {
    // Unfolded: 64 outputs spread over the rows and columns, bit for bit against the model.
    for (int j = 0; j < kModelChecks; ++j) {
      const int r = (j * 37 + cta) % rows, col = (j * 53 + 7 * cta) % c.n;
      const std::uint8_t* a = d.a.data() + static_cast<std::size_t>(r) * kBlockK;
      const std::uint8_t* b = d.b.data() + static_cast<std::size_t>(col) * kBlockK;
      float want = 0.0f;
      for (int kb = 0; kb < blocks; ++kb) {
        for (int ks = 0; ks < 4; ++ks) want = tc_step(a + 32 * ks, 1, Fp8Format::e4m3, b + 32 * ks, 1, Fp8Format::e4m3, 32, want);
      }
      const float got = out[(static_cast<std::size_t>(cta) * rows + r) * c.n + col];
      ++ck.checked;
      if (f32_bits(got) != f32_bits(want)) {
        if (ck.bad++ == 0) {
          ck.first = "CTA " + std::to_string(cta) + " row " + std::to_string(r) + " col " + std::to_string(col) +
                     ": got " + std::to_string(got) + ", the tensor-core model " + std::to_string(want);
        }
      }
    }
  }
  for (int r = 0; r < (folds(c.sched) ? rows : 0); ++r) {
    for (int col = 0; col < c.n; ++col) {
      double dot = 0.0, mag = 0.0;
      for (int k = 0; k < kBlockK; ++k) {
        const double prod = dec(d.a[static_cast<std::size_t>(r) * kBlockK + k]) * dec(d.b[static_cast<std::size_t>(col) * kBlockK + k]);
        dot += prod;
        mag += std::fabs(prod);
      }
      const int w = r / kRows, rr = r % kRows;
      const double times =
          static_cast<double>(d.sb) * (even * d.sa[w * kRows + rr] + odd * d.sa[c.nwg * kRows + w * kRows + rr]);
      const double want = dot * times, bound = 1e-3 * mag * times;
      const float got = out[(static_cast<std::size_t>(cta) * rows + r) * c.n + col];
      ++ck.checked;
      if (!(std::fabs(static_cast<double>(got) - want) <= bound)) {  // NaN fails
        if (ck.bad++ == 0) {
          ck.first = "CTA " + std::to_string(cta) + " row " + std::to_string(r) + " col " + std::to_string(col) +
                     ": got " + std::to_string(got) + ", want " + std::to_string(want) + " +- " + std::to_string(bound);
        }
      }
    }
  }
  if (c.sched != Sched::side_ffma) return;
  for (int t = 0; t < 128; ++t) {
    const int r0 = frag_row(t, 0), r1 = frag_row(t, 2);
    for (int i = 0; i < 96; ++i) {
      double want = 0.0;
      for (int g = 0; g < c.nwg; ++g) {
        const int r = (i / 2) % 2 ? r1 : r0;
        want += d.x[i % kSideInputs] * d.sb * (even * d.sa[g * kRows + r] + odd * d.sa[c.nwg * kRows + g * kRows + r]);
      }
      const float got = side[(static_cast<std::size_t>(cta) * 128 + t) * 96 + i];
      ++ck.checked;
      if (!(static_cast<double>(got) == want)) {
        if (ck.bad++ == 0) {
          ck.first = "side CTA " + std::to_string(cta) + " thread " + std::to_string(t) + " reg " + std::to_string(i) +
                     ": got " + std::to_string(got) + ", want " + std::to_string(want);
        }
      }
    }
  }
}

struct Row {
  Config c;
  double ms = 0, tflops = 0, ghz = 0, util = 0;
  Check ck;
};

int run(int blocks, int runs, const std::vector<Layout>& layouts) {
  int dev = 0;
  FP8MOE_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  FP8MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9 || prop.minor != 0) {
    std::fprintf(stderr, "fp8moe-fold-probe: %s is sm_%d%d; the probe's wgmma needs sm_90 (H100/H200): nothing to measure\n",
                 prop.name, prop.major, prop.minor);
    return 77;
  }
  DeviceBuffer<int> flag(1);
  flag.zero();
  arch_kernel<<<1, 1>>>(flag.get());
  FP8MOE_CUDA_CHECK_LAUNCH("arch_kernel");
  if (flag.download()[0] != 1) fail("fp8moe-fold-probe was compiled without sm_90a (wgmma): build it for CUDA architecture 90a");
  const int ctas = prop.multiProcessorCount;
  const std::uint64_t seed = 0x5eed'f01dULL;
  const Data d = make_data(seed);
  DeviceBuffer<std::uint8_t> a(d.a), b(d.b);
  DeviceBuffer<float> sa(d.sa), x(d.x);
  DeviceBuffer<float> out(static_cast<std::size_t>(ctas) * 3 * kRows * 192), side(static_cast<std::size_t>(ctas) * 128 * 96);
  DeviceBuffer<long long> cycles(static_cast<std::size_t>(ctas));
  cudaEvent_t e0, e1;
  FP8MOE_CUDA_CHECK(cudaEventCreate(&e0));
  FP8MOE_CUDA_CHECK(cudaEventCreate(&e1));
  std::printf("# fp8moe-fold-probe: %s, %d SMs, one CTA per SM, %d 128-K blocks per warpgroup, median of %d runs, seed %#llx\n",
              prop.name, ctas, blocks, runs, static_cast<unsigned long long>(seed));
  std::printf("%-9s | %-9s | %-11s | %8s | %8s | %6s | %8s | %9s | %s\n", "layout", "tile", "schedule", "ms", "TFLOP/s",
              "SM GHz", "tensor %", "vs stream", "check");
  int failed = 0;
  std::vector<Config> configs;
  for (Layout l : layouts) (l == Layout::swizzled ? add_layout<Layout::swizzled> : add_layout<Layout::plain>)(configs);
  double stream_ms = 0;
  for (const Config& c : configs) {
    Row row{c};
    if (c.sched == Sched::stream) stream_ms = 0;  // the ratio's baseline: this group's stream row
    const int smem = kSmemPad;
    FP8MOE_CUDA_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    Params p{a.get(), b.get(), sa.get(), d.sb, x.get(), blocks, out.get(), side.get(), cycles.get()};
    std::vector<float> ms_runs, checked_out, checked_side;
    std::vector<double> cyc_runs;
    for (int r = 0; r < runs + 1; ++r) {  // the first launch is checked and not timed
      FP8MOE_CUDA_CHECK(cudaEventRecord(e0));
      c.kernel<<<ctas, c.threads, smem>>>(p);
      FP8MOE_CUDA_CHECK(cudaEventRecord(e1));
      FP8MOE_CUDA_CHECK_LAUNCH("probe_kernel", sched_name(c.sched), " N=", c.n, " NWG=", c.nwg);
      FP8MOE_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      FP8MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      const std::vector<long long> cyc = cycles.download();
      double mean = 0;
      for (long long v : cyc) mean += static_cast<double>(v) / ctas;
      if (r == 0) {
        checked_out = out.download();
        checked_side = side.download();
        check_cta(c, d, blocks, checked_out, checked_side, 0, row.ck);
        check_cta(c, d, blocks, checked_out, checked_side, ctas - 1, row.ck);
        if (row.ck.bad) break;
        continue;
      }
      ms_runs.push_back(ms);
      cyc_runs.push_back(mean);
    }
    // The timed launches computed what was checked: the last one's outputs (every CTA's) equal the first's.
    if (!row.ck.bad && (out.download() != checked_out || side.download() != checked_side)) {
      ++row.ck.bad;
      row.ck.first = "a timed launch's outputs differ from the checked launch's";
    }
    const char* lname = c.layout == Layout::swizzled ? "swizzled" : "plain";
    const std::string tile = std::to_string(c.nwg) + "x64x" + std::to_string(c.n);
    if (row.ck.bad) {
      ++failed;
      std::printf("%-9s | %-9s | %-11s | %8s | %8s | %6s | %8s | %9s | WRONG %lld of %lld (%s)\n", lname, tile.c_str(),
                  sched_name(c.sched), "-", "-", "-", "-", "-", static_cast<long long>(row.ck.bad),
                  static_cast<long long>(row.ck.checked), row.ck.first.c_str());
      std::fflush(stdout);
      continue;
    }
    std::sort(ms_runs.begin(), ms_runs.end());
    std::sort(cyc_runs.begin(), cyc_runs.end());
    row.ms = ms_runs[ms_runs.size() / 2];
    const double cyc = cyc_runs[cyc_runs.size() / 2];
    const double macs_cta = static_cast<double>(c.nwg) * kRows * c.n * kBlockK * blocks;
    row.tflops = 2.0 * macs_cta * ctas / (row.ms * 1e-3) / 1e12;
    row.ghz = cyc / (row.ms * 1e6);
    row.util = 100.0 * (macs_cta / 4096.0) / cyc;
    if (row.util > 100.5) {  // more MMAs a cycle than the tensor pipe has: the compiler dropped some
      ++failed;
      std::printf("%-9s | %-9s | %-11s | %8.3f | %8s | %6s | %8.1f | %9s | IMPOSSIBLE: above the tensor pipe's peak "
                  "(work removed by the compiler)\n",
                  lname, tile.c_str(), sched_name(c.sched), row.ms, "-", "-", row.util, "-");
      std::fflush(stdout);
      continue;
    }
    if (c.sched == Sched::stream) stream_ms = row.ms;
    const std::string vs = stream_ms > 0 ? std::to_string(stream_ms / row.ms).substr(0, 5) : "-";
    std::printf("%-9s | %-9s | %-11s | %8.3f | %8.1f | %6.3f | %8.1f | %9s | ok, %lld outputs\n", lname, tile.c_str(),
                sched_name(c.sched), row.ms, row.tflops, row.ghz, row.util, vs.c_str(), static_cast<long long>(row.ck.checked));
    std::fflush(stdout);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (failed) std::fprintf(stderr, "fp8moe-fold-probe: %d configuration(s) computed wrong outputs (seed %#llx)\n", failed,
                           static_cast<unsigned long long>(seed));
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace fp8moe::kernels::fold_probe

int main(int argc, char** argv) {
  using namespace fp8moe::kernels::fold_probe;
  int blocks = 4096, runs = 7;
  std::vector<Layout> layouts{Layout::swizzled, Layout::plain};
  const auto usage = [] {
    std::fprintf(stderr, "usage: fp8moe-fold-probe [--blocks T=4096 (2..1048576)] [--runs R=7 (1..1000)] "
                         "[--layout swizzled|plain|both=both]\n");
    return 2;
  };
  const auto number = [&](const char* flag, const char* v, int lo, int hi, int& out) {
    try {
      std::size_t used = 0;
      const long long n = std::stoll(v, &used);
      if (used != std::string(v).size() || n < lo || n > hi) throw std::out_of_range(v);
      out = static_cast<int>(n);
      return true;
    } catch (const std::exception&) {
      std::fprintf(stderr, "fp8moe-fold-probe: %s '%s' is not a whole number in %d..%d\n", flag, v, lo, hi);
      return false;
    }
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      usage();
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "fp8moe-fold-probe: %s wants a value\n", f.c_str());
      return usage();
    }
    const char* v = argv[++i];
    if (f == "--blocks") {
      if (!number("--blocks", v, 2, 1 << 20, blocks)) return 2;
    } else if (f == "--runs") {
      if (!number("--runs", v, 1, 1000, runs)) return 2;
    } else if (f == "--layout") {
      const std::string l = v;
      if (l == "swizzled") {
        layouts = {Layout::swizzled};
      } else if (l == "plain") {
        layouts = {Layout::plain};
      } else if (l != "both") {
        std::fprintf(stderr, "fp8moe-fold-probe: --layout '%s': give swizzled, plain or both\n", v);
        return 2;
      }
    } else {
      std::fprintf(stderr, "fp8moe-fold-probe: unknown option '%s'\n", f.c_str());
      return usage();
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "fp8moe-fold-probe: no CUDA device: nothing to measure\n");
    return 77;
  }
  try {
    return run(blocks, runs, layouts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8moe-fold-probe: %s\n", e.what());
    return 1;
  }
}
