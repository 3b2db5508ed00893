#pragma once
// The wgmma probe (issue 15 item 4): raw `wgmma.mma_async.sync.aligned.m64nNk32.f32.{e4m3,e5m2}.
// {e4m3,e5m2}` on many independent 64 x N tiles, compared bit for bit on the device with
// reference/tensor_core.hpp's tc_step (reference/SPEC.md 7.5, the measured Hopper tensor-core model).
//
// Per tile (one warpgroup, 128 threads, one CTA): A (64, 32) and B (N, 32) codes, both K-major,
// are staged in shared memory in the no-swizzle canonical layout; the accumulator registers are
// loaded from C (64, N) fp32 row-major; one wgmma with scale-d = 1 computes D = A B^T + C; D is
// stored (64, N) fp32 row-major. sm_90a only (wgmma needs the arch-specific target); built for
// any other architecture the kernel traps and probe_arch() says so.
//
// The index math below (shared-memory offsets, descriptors, the accumulator fragment) is
// host+device and tested on the CPU (tests/kernels/test_kernels_layout.cpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/wgmma_probe_data.hpp"

namespace fp8moe::kernels::wgmma {

constexpr int kThreads = 128;  // one warpgroup

// ---- Shared-memory layout of a K-major operand (PTX ISA 9.7.15.5.1.2 "Shared Memory Matrix
// Layout", 9.7.15.5.1.2.1 "Major-ness supported by Strides", 9.7.15.5.1.2.1.3 "Canonical
// Layouts"). For K-major without swizzling the canonical layout is, in elements,
//   ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO)),  T = 128 bits / element bits = 16 for FP8
// i.e. a "core matrix" is 8 rows of 16 bytes stored contiguously (128 bytes, row r at 16 r);
// core matrices adjacent in M/N are SBO bytes apart ("stride dimension byte offset: the offset
// from the first 8 rows to the next 8 rows"), core matrices adjacent in K are LBO bytes apart
// ("leading dimension byte offset, K-major, no swizzling: the offset from the first column to
// the second column of the 8x2 tile in the 128-bit element type normalized matrix"). CUTLASS's
// cute/arch/mma_sm90_desc.hpp states the same canonical form for LayoutType::INTERLEAVE.
// Our choice for an operand of `rows` rows (64 for A, N for B) and 32 K (two 16-byte columns):
// core matrices of one K column stacked along M/N (SBO = 128), the second K column after all of
// the first (LBO = rows * 16): byte offset of (row, k) = (k/16) rows 16 + (row/8) 128 +
// (row%8) 16 + k%16 = (k/16) rows 16 + row 16 + k%16. (The PTX ISA's K-major no-swizzle tf32
// example, Figure 166, is this arrangement: SBO = 32 tf32 = 128 B, LBO = 2 x 128 B.)
constexpr std::uint32_t kCoreBytes = 128;  // 8 rows x 16 bytes
FP8MOE_HD std::uint32_t operand_sbo(int /*rows*/) { return kCoreBytes; }
FP8MOE_HD std::uint32_t operand_lbo(int rows) { return static_cast<std::uint32_t>(rows) * 16u; }
FP8MOE_HD std::uint32_t smem_offset(int row, int k, int rows) {
  return static_cast<std::uint32_t>(k / 16) * operand_lbo(rows) + static_cast<std::uint32_t>(row / 8) * operand_sbo(rows) +
         static_cast<std::uint32_t>(row % 8) * 16u + static_cast<std::uint32_t>(k % 16);
}

// ---- Matrix descriptor (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format"), 64 bits:
//   bits 13-0  encode(start address)        bits 29-16 encode(leading dimension byte offset)
//   bits 45-32 encode(stride dim byte offset)   bits 51-49 base offset (0: no swizzle)
//   bits 63-62 swizzle mode (0: none)       encode(x) = (x & 0x3FFFF) >> 4
// swap_fields puts the two offsets in each other's field: a diagnostic only (the layout check
// tries it when the PTX ISA's reading fails, to tell a swapped-field reading from other faults).
FP8MOE_HD std::uint64_t desc_encode(std::uint32_t x) { return static_cast<std::uint64_t>((x & 0x3FFFFu) >> 4); }
FP8MOE_HD std::uint64_t make_desc(std::uint32_t smem_addr, std::uint32_t lbo, std::uint32_t sbo, bool swap_fields) {
  const std::uint32_t lead = swap_fields ? sbo : lbo, stride = swap_fields ? lbo : sbo;
  return desc_encode(smem_addr) | (desc_encode(lead) << 16) | (desc_encode(stride) << 32);
}

// ---- The f32 accumulator fragment of wgmma .m64nNk32 (PTX ISA 9.7.15.5.1.1.3 "Matrix Fragments
// for wgmma.mma_async.m64nNk32", Figure 153 "WGMMA .m64nNk32 register fragment layout for
// accumulator matrix D"; the same layout as the k16 one of Figure 149): warp w of the warpgroup
// owns rows 16w..16w+15; lane l holds, in register d_i (i = 0 .. N/2-1),
//   row = 16 w + l/4 + 8 ((i/2) % 2),  col = 8 (i/4) + 2 (l%4) + i%2.
// Cross-checked with CUTLASS cute/atom/mma_traits_sm90_gmma.hpp CLayout_64xN:
// ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)) mapping (thread, value) to m + 64 n.
struct FragPos {
  int row;
  int col;
};
FP8MOE_HD FragPos d_fragment(int thread, int i) {
  const int warp = thread / 32, lane = thread % 32;
  return {16 * warp + lane / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (lane % 4) + i % 2};
}

// ---- What the device check counts (one struct in device memory per run; plain counters).
constexpr int kNanSlots = 8;  // distinct hardware NaN bit patterns kept
constexpr int kRecords = 10;  // mismatches kept in full
struct MismatchRecord {
  std::uint64_t tile;  // tile index within the case (the key of its data)
  std::int32_t row, col;
  std::uint32_t c_bits, hw_bits, model_bits;
  std::uint32_t code_class, c_class;
  std::uint8_t a[kK];  // row `row` of A
  std::uint8_t b[kK];  // column `col` of B (row `col` of the K-major B)
};
struct ProbeCounts {
  unsigned long long outputs;
  unsigned long long model_finite, model_inf, model_nan;  // by what tc_step gives
  unsigned long long hw_nan;
  // A mismatch: the model is NaN and the hardware is not, or the model is not NaN and the bits
  // differ. Split by the model's result, so NaN outputs never hide finite ones.
  unsigned long long mismatches, mismatch_finite, mismatch_inf, mismatch_nan;
  unsigned long long nan_bits_differ;  // both NaN, hardware bits != model bits (reported, not failed)
  unsigned long long mismatch_by_code[kCodeClasses];
  unsigned long long mismatch_by_c[kCClasses];
  unsigned int nan_bits[kNanSlots];  // 0: empty slot (0 is never a NaN)
  unsigned long long nan_count[kNanSlots];
  unsigned long long nan_overflow;  // NaN outputs whose pattern found no free slot
  unsigned long long records_n;     // mismatches that tried to take a record
  MismatchRecord rec[kRecords];
};

// ---- Launchers (host). Buffers of one batch of `tiles` tiles, first tile index `first_tile`:
//   A (tiles, 64, 32) codes, B (tiles, N, 32) codes, C and D (tiles, 64, N) fp32, all row-major.
// Errors throw fp8moe::Error naming the launch and the case.

// Whether the current device is sm_90 and the probe kernel was compiled with wgmma (sm_90a);
// otherwise the reason in `why`. A test skips on not_sm90 and fails on no_wgmma_build.
enum class ArchStatus { ok, not_sm90, no_wgmma_build };
ArchStatus probe_arch(std::string* why);

// Fill A, B (then C, which depends on them) of tiles [first_tile, first_tile + tiles).
void generate(const ProbeCase& pc, std::uint64_t first_tile, std::int64_t tiles, std::uint8_t* A, std::uint8_t* B,
              float* C, cudaStream_t stream = nullptr);

// D = wgmma(A, B, C) per tile.
void run_wgmma(const ProbeCase& pc, std::int64_t tiles, const std::uint8_t* A, const std::uint8_t* B, const float* C,
               float* D, bool swap_fields = false, cudaStream_t stream = nullptr);

// tc_step per output against D, accumulated into *counts (device memory). model_out (device,
// optional): the model's result per output, (tiles, 64, N).
void check(const ProbeCase& pc, std::uint64_t first_tile, std::int64_t tiles, const std::uint8_t* A,
           const std::uint8_t* B, const float* C, const float* D, ProbeCounts* counts, float* model_out = nullptr,
           cudaStream_t stream = nullptr);

}  // namespace fp8moe::kernels::wgmma
