// The wgmma probe kernels and their launchers (contract in wgmma_probe.hpp): the input generator,
// the raw-PTX wgmma tile kernel (sm_90a) and the device check against tc_step.
#include <string>

#include "kernels/check.hpp"
#include "kernels/wgmma_asm.cuh"
#include "kernels/wgmma_probe.hpp"
#include "reference/tensor_core.hpp"

// wgmma exists only on the arch-specific sm_90a target (PTX ISA: "wgmma.mma_async ... requires
// sm_90a"); nvcc defines __CUDA_ARCH_FEAT_SM90_ALL there. Elsewhere the probe kernel traps.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8MOE_WGMMA_ENABLED 1
#else
#define FP8MOE_WGMMA_ENABLED 0
#endif

namespace fp8moe::kernels::wgmma {
namespace {

constexpr int kGenThreads = 256;

// ---- Input generation: one thread per code, then one per C (C depends on the codes).
__global__ void gen_codes_kernel(ProbeCase pc, std::uint64_t first_tile, std::int64_t tiles, int rows,
                                 Fp8Format f, std::uint32_t tensor_id, std::uint8_t* out) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t per_tile = static_cast<std::int64_t>(rows) * kK;
  if (idx >= tiles * per_tile) return;
  const std::uint64_t tile = first_tile + static_cast<std::uint64_t>(idx / per_tile);
  const TileClass tc = probe_tile_class(pc, tile);
  out[idx] = probe_code(pc, tc, f, tensor_id, first_tile * static_cast<std::uint64_t>(per_tile) + idx);
}

__global__ void gen_c_kernel(ProbeCase pc, std::uint64_t first_tile, std::int64_t tiles, const std::uint8_t* A,
                             const std::uint8_t* B, float* C) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t per_tile = static_cast<std::int64_t>(kM) * pc.n;
  if (idx >= tiles * per_tile) return;
  const std::int64_t t = idx / per_tile, rem = idx % per_tile;
  const int row = static_cast<int>(rem / pc.n), col = static_cast<int>(rem % pc.n);
  const std::uint64_t tile = first_tile + static_cast<std::uint64_t>(t);
  const TileClass tc = probe_tile_class(pc, tile);
  C[idx] = probe_c(pc, tc, tile, row, col, A + (t * kM + row) * kK, B + (t * pc.n + col) * kK);
}

#define FP8MOE_WGMMA_PAIRS(NN, R, IA, IB, IS)                                          \
  if constexpr (FA == Fp8Format::e4m3 && FB == Fp8Format::e4m3) {                      \
    FP8MOE_WGMMA_ASM(NN, R, IA, IB, IS, e4m3, e4m3, 1);                                   \
  } else if constexpr (FA == Fp8Format::e4m3 && FB == Fp8Format::e5m2) {               \
    FP8MOE_WGMMA_ASM(NN, R, IA, IB, IS, e4m3, e5m2, 1);                                   \
  } else if constexpr (FA == Fp8Format::e5m2 && FB == Fp8Format::e4m3) {               \
    FP8MOE_WGMMA_ASM(NN, R, IA, IB, IS, e5m2, e4m3, 1);                                   \
  } else {                                                                             \
    FP8MOE_WGMMA_ASM(NN, R, IA, IB, IS, e5m2, e5m2, 1);                                   \
  }

template <Fp8Format FA, Fp8Format FB, int N>
__device__ __forceinline__ void wgmma_k32(float (&d)[N / 2], std::uint64_t da, std::uint64_t db) {
#if FP8MOE_WGMMA_ENABLED
  static_assert(N == 8 || N == 64 || N == 128 || N == 256, "the probe instantiates N = 8, 64, 128, 256");
  if constexpr (N == 8) {
    FP8MOE_WGMMA_PAIRS(8, 4, 4, 5, 6)
  } else if constexpr (N == 64) {
    FP8MOE_WGMMA_PAIRS(64, 32, 32, 33, 34)
  } else if constexpr (N == 128) {
    FP8MOE_WGMMA_PAIRS(128, 64, 64, 65, 66)
  } else {
    FP8MOE_WGMMA_PAIRS(256, 128, 128, 129, 130)
  }
#else
  (void)d;
  (void)da;
  (void)db;
#endif
}

// ---- The probe: one CTA (one warpgroup) per tile.
template <Fp8Format FA, Fp8Format FB, int N>
__global__ void __launch_bounds__(kThreads) wgmma_probe_kernel(const std::uint8_t* A, const std::uint8_t* B,
                                                               const float* C, float* D, bool swap_fields) {
#if FP8MOE_WGMMA_ENABLED
  __shared__ alignas(128) std::uint8_t sA[kM * kK];  // 64 x 32 codes, layout smem_offset(., ., 64)
  __shared__ alignas(128) std::uint8_t sB[N * kK];   // N x 32 codes, layout smem_offset(., ., N)
  const int t = threadIdx.x;
  const std::int64_t tile = blockIdx.x;
  // Stage 16-byte row halves: global (row, 16 h .. 16 h + 15) -> core-matrix row in shared memory.
  const uint4* gA = reinterpret_cast<const uint4*>(A + tile * kM * kK);
  const uint4* gB = reinterpret_cast<const uint4*>(B + tile * N * kK);
  for (int q = t; q < kM * 2; q += kThreads) {
    *reinterpret_cast<uint4*>(sA + smem_offset(q / 2, 16 * (q % 2), kM)) = gA[q];
  }
  for (int q = t; q < N * 2; q += kThreads) {
    *reinterpret_cast<uint4*>(sB + smem_offset(q / 2, 16 * (q % 2), N)) = gB[q];
  }
  // The accumulator fragment from C: registers 2j and 2j+1 are columns col and col+1 of one row.
  float d[N / 2];
  const float* gC = C + tile * kM * N;
#pragma unroll
  for (int i = 0; i < N / 2; i += 2) {
    const FragPos p = d_fragment(t, i);
    const float2 c2 = *reinterpret_cast<const float2*>(gC + p.row * N + p.col);
    d[i] = c2.x;
    d[i + 1] = c2.y;
  }
  // Generic-proxy stores to shared memory become visible to the async proxy (wgmma reads through
  // it) only after fence.proxy.async; then every thread's stores are in before the warpgroup goes.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const std::uint64_t da = make_desc(static_cast<std::uint32_t>(__cvta_generic_to_shared(sA)), operand_lbo(kM),
                                     operand_sbo(kM), swap_fields);
  const std::uint64_t db = make_desc(static_cast<std::uint32_t>(__cvta_generic_to_shared(sB)), operand_lbo(N),
                                     operand_sbo(N), swap_fields);
  wgmma_fence_regs(d);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");  // orders the register writes above
  wgmma_k32<FA, FB, N>(d, da, db);
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  wgmma_fence_regs(d);
  float* gD = D + tile * kM * N;
#pragma unroll
  for (int i = 0; i < N / 2; i += 2) {
    const FragPos p = d_fragment(t, i);
    *reinterpret_cast<float2*>(gD + p.row * N + p.col) = make_float2(d[i], d[i + 1]);
  }
#else
  (void)A;
  (void)B;
  (void)C;
  (void)D;
  (void)swap_fields;
  __trap();
#endif
}

__global__ void arch_kernel(int* out) { *out = FP8MOE_WGMMA_ENABLED; }

// ---- The device check: one thread per output.
__device__ __forceinline__ void warp_count(unsigned long long* p, bool v) {
  const unsigned m = __ballot_sync(0xffffffffu, v);
  if ((threadIdx.x & 31u) == 0 && m != 0) atomicAdd(p, static_cast<unsigned long long>(__popc(m)));
}

__device__ void count_nan_bits(ProbeCounts* cnt, std::uint32_t bits, unsigned n) {
  for (int s = 0; s < kNanSlots; ++s) {
    const unsigned old = atomicCAS(&cnt->nan_bits[s], 0u, bits);
    if (old == 0u || old == bits) {
      atomicAdd(&cnt->nan_count[s], static_cast<unsigned long long>(n));
      return;
    }
  }
  atomicAdd(&cnt->nan_overflow, static_cast<unsigned long long>(n));
}

template <Fp8Format FA, Fp8Format FB>
__global__ void check_kernel(ProbeCase pc, std::uint64_t first_tile, std::int64_t tiles, const std::uint8_t* A,
                             const std::uint8_t* B, const float* C, const float* D, ProbeCounts* cnt,
                             float* model_out) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t per_tile = static_cast<std::int64_t>(kM) * pc.n;
  if (idx >= tiles * per_tile) return;  // whole warps: tiles * per_tile is a multiple of 512
  const std::int64_t t = idx / per_tile, rem = idx % per_tile;
  const int row = static_cast<int>(rem / pc.n), col = static_cast<int>(rem % pc.n);
  const std::uint8_t* a = A + (t * kM + row) * kK;
  const std::uint8_t* b = B + (t * pc.n + col) * kK;
  const float c = C[idx];
  const std::uint32_t hw = f32_bits(D[idx]);
  const float m = tc_step(a, 1, FA, b, 1, FB, kK, c);
  if (model_out) model_out[idx] = m;
  const std::uint32_t mb = f32_bits(m);
  const bool m_nan = (mb & 0x7fffffffu) > 0x7f800000u, m_inf = (mb & 0x7fffffffu) == 0x7f800000u;
  const bool h_nan = (hw & 0x7fffffffu) > 0x7f800000u;
  const bool bad = m_nan ? !h_nan : hw != mb;
  warp_count(&cnt->outputs, true);
  warp_count(&cnt->model_finite, !m_nan && !m_inf);
  warp_count(&cnt->model_inf, m_inf);
  warp_count(&cnt->model_nan, m_nan);
  warp_count(&cnt->hw_nan, h_nan);
  warp_count(&cnt->mismatches, bad);
  warp_count(&cnt->mismatch_finite, bad && !m_nan && !m_inf);
  warp_count(&cnt->mismatch_inf, bad && m_inf);
  warp_count(&cnt->mismatch_nan, bad && m_nan);
  warp_count(&cnt->nan_bits_differ, m_nan && h_nan && hw != mb);
  const unsigned nan_lanes = __ballot_sync(0xffffffffu, h_nan);
  if (h_nan) {
    const unsigned peers = __match_any_sync(nan_lanes, hw);
    if (static_cast<int>(threadIdx.x & 31u) == __ffs(peers) - 1) count_nan_bits(cnt, hw, __popc(peers));
  }
  if (bad) {
    const std::uint64_t tile = first_tile + static_cast<std::uint64_t>(t);
    const TileClass tc = probe_tile_class(pc, tile);
    atomicAdd(&cnt->mismatch_by_code[static_cast<int>(tc.codes)], 1ull);
    atomicAdd(&cnt->mismatch_by_c[static_cast<int>(tc.c)], 1ull);
    const unsigned long long slot = atomicAdd(&cnt->records_n, 1ull);
    if (slot < kRecords) {
      MismatchRecord& r = cnt->rec[slot];
      r.tile = tile;
      r.row = row;
      r.col = col;
      r.c_bits = f32_bits(c);
      r.hw_bits = hw;
      r.model_bits = mb;
      r.code_class = static_cast<std::uint32_t>(tc.codes);
      r.c_class = static_cast<std::uint32_t>(tc.c);
      for (int k = 0; k < kK; ++k) {
        r.a[k] = a[k];
        r.b[k] = b[k];
      }
    }
  }
}

unsigned grid_for(std::int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

template <Fp8Format FA, Fp8Format FB>
void launch_probe(int n, std::int64_t tiles, const std::uint8_t* A, const std::uint8_t* B, const float* C, float* D,
                  bool swap_fields, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(tiles);
  switch (n) {
    case 8: wgmma_probe_kernel<FA, FB, 8><<<grid, kThreads, 0, s>>>(A, B, C, D, swap_fields); break;
    case 64: wgmma_probe_kernel<FA, FB, 64><<<grid, kThreads, 0, s>>>(A, B, C, D, swap_fields); break;
    case 128: wgmma_probe_kernel<FA, FB, 128><<<grid, kThreads, 0, s>>>(A, B, C, D, swap_fields); break;
    case 256: wgmma_probe_kernel<FA, FB, 256><<<grid, kThreads, 0, s>>>(A, B, C, D, swap_fields); break;
    default: fail("wgmma probe: N = ", n, " is not one of 8, 64, 128, 256");
  }
}

template <Fp8Format FA, Fp8Format FB>
void launch_check(const ProbeCase& pc, std::uint64_t first_tile, std::int64_t tiles, const std::uint8_t* A,
                  const std::uint8_t* B, const float* C, const float* D, ProbeCounts* cnt, float* model_out,
                  cudaStream_t s) {
  const std::int64_t total = tiles * kM * pc.n;
  check_kernel<FA, FB><<<grid_for(total, kGenThreads), kGenThreads, 0, s>>>(pc, first_tile, tiles, A, B, C, D, cnt,
                                                                            model_out);
}

void check_case(const ProbeCase& pc, std::int64_t tiles) {
  if (pc.n != 8 && pc.n != 64 && pc.n != 128 && pc.n != 256) fail("wgmma probe: N = ", pc.n, " is not 8/64/128/256");
  if (tiles <= 0 || tiles > 0x7fffffff) fail("wgmma probe: tiles = ", tiles, " out of range");
}

}  // namespace

ArchStatus probe_arch(std::string* why) {
  int dev = 0;
  FP8MOE_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  FP8MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev), "device ", dev);
  if (prop.major != 9 || prop.minor != 0) {
    if (why) *why = std::string("device ") + prop.name + " is sm_" + std::to_string(prop.major * 10 + prop.minor) +
                    ", wgmma needs sm_90 (the probe is built for sm_90a)";
    return ArchStatus::not_sm90;
  }
  DeviceBuffer<int> flag(1);
  flag.zero();
  arch_kernel<<<1, 1>>>(flag.get());
  FP8MOE_CUDA_CHECK_LAUNCH("arch_kernel", "is there an sm_90a image? CMAKE_CUDA_ARCHITECTURES must include 90a");
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "arch_kernel");
  if (flag.download()[0] != 1) {
    if (why) *why = "kernels/wgmma_probe.cu was compiled without __CUDA_ARCH_FEAT_SM90_ALL (build for 90a, not 90)";
    return ArchStatus::no_wgmma_build;
  }
  if (why) *why = std::string(prop.name) + " (sm_90), probe built with wgmma";
  return ArchStatus::ok;
}

void generate(const ProbeCase& pc, std::uint64_t first_tile, std::int64_t tiles, std::uint8_t* A, std::uint8_t* B,
              float* C, cudaStream_t s) {
  check_case(pc, tiles);
  gen_codes_kernel<<<grid_for(tiles * kM * kK, kGenThreads), kGenThreads, 0, s>>>(pc, first_tile, tiles, kM, pc.fa,
                                                                                 kProbeTensorA, A);
  FP8MOE_CUDA_CHECK_LAUNCH("gen_codes_kernel (A)", "tiles=", tiles);
  gen_codes_kernel<<<grid_for(tiles * pc.n * kK, kGenThreads), kGenThreads, 0, s>>>(pc, first_tile, tiles, pc.n,
                                                                                   pc.fb, kProbeTensorB, B);
  FP8MOE_CUDA_CHECK_LAUNCH("gen_codes_kernel (B)", "tiles=", tiles, " N=", pc.n);
  gen_c_kernel<<<grid_for(tiles * kM * pc.n, kGenThreads), kGenThreads, 0, s>>>(pc, first_tile, tiles, A, B, C);
  FP8MOE_CUDA_CHECK_LAUNCH("gen_c_kernel", "tiles=", tiles, " N=", pc.n);
}

void run_wgmma(const ProbeCase& pc, std::int64_t tiles, const std::uint8_t* A, const std::uint8_t* B, const float* C,
               float* D, bool swap_fields, cudaStream_t s) {
  check_case(pc, tiles);
  using F = Fp8Format;
  if (pc.fa == F::e4m3 && pc.fb == F::e4m3) launch_probe<F::e4m3, F::e4m3>(pc.n, tiles, A, B, C, D, swap_fields, s);
  if (pc.fa == F::e4m3 && pc.fb == F::e5m2) launch_probe<F::e4m3, F::e5m2>(pc.n, tiles, A, B, C, D, swap_fields, s);
  if (pc.fa == F::e5m2 && pc.fb == F::e4m3) launch_probe<F::e5m2, F::e4m3>(pc.n, tiles, A, B, C, D, swap_fields, s);
  if (pc.fa == F::e5m2 && pc.fb == F::e5m2) launch_probe<F::e5m2, F::e5m2>(pc.n, tiles, A, B, C, D, swap_fields, s);
  FP8MOE_CUDA_CHECK_LAUNCH("wgmma_probe_kernel", "fa=", probe_format_name(pc.fa), " fb=", probe_format_name(pc.fb), " N=", pc.n,
                           " tiles=", tiles);
}

void check(const ProbeCase& pc, std::uint64_t first_tile, std::int64_t tiles, const std::uint8_t* A,
           const std::uint8_t* B, const float* C, const float* D, ProbeCounts* counts, float* model_out,
           cudaStream_t s) {
  check_case(pc, tiles);
  using F = Fp8Format;
  if (pc.fa == F::e4m3 && pc.fb == F::e4m3) launch_check<F::e4m3, F::e4m3>(pc, first_tile, tiles, A, B, C, D, counts, model_out, s);
  if (pc.fa == F::e4m3 && pc.fb == F::e5m2) launch_check<F::e4m3, F::e5m2>(pc, first_tile, tiles, A, B, C, D, counts, model_out, s);
  if (pc.fa == F::e5m2 && pc.fb == F::e4m3) launch_check<F::e5m2, F::e4m3>(pc, first_tile, tiles, A, B, C, D, counts, model_out, s);
  if (pc.fa == F::e5m2 && pc.fb == F::e5m2) launch_check<F::e5m2, F::e5m2>(pc, first_tile, tiles, A, B, C, D, counts, model_out, s);
  FP8MOE_CUDA_CHECK_LAUNCH("wgmma check_kernel", "fa=", probe_format_name(pc.fa), " fb=", probe_format_name(pc.fb), " N=", pc.n,
                           " tiles=", tiles);
}

}  // namespace fp8moe::kernels::wgmma
