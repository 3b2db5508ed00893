#pragma once
// Scale layouts cuBLASLt's Hopper block scaling reads (CUTLASS's MN-major ones come from the same
// kernels: kernels/cutlass_grouped.cpp) (cuBLASLt 13.x; shapes and strides as
// PyTorch's ScaledBlas.cpp checks them before calling cuBLASLt, reference/SPEC.md 4.3), and the relayout
// kernels from our row-major layouts (kernels/quantize.hpp = reference/'s) into them.
//
// A cuBLASLt operand is stored k x rows column-major, i.e. our row-major (rows, k), contracted on k:
//   VEC128_32F    one fp32 per 1 x 128 along k: (rows, k/128) with stride (1, rows): the k-block
//                 index is outer ("M-major"); there is no leading-dimension attribute, so one
//                 expert's block is exactly (k/128, rows_e) contiguous.
//   BLK128x128_32F one fp32 per 128 x 128 tile: (rows/128, k/128) with stride (pitch, 1), pitch =
//                 ceil(k/128) rounded up to a multiple of 4 ("K-major, K-block count padded to 4";
//                 PyTorch found silent wrong answers without the padding).
// Every expert's scale block starts on a 16-byte boundary (kScaleAlign floats).
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/check.hpp"

namespace fp8moe::kernels {

inline constexpr std::int64_t kScaleAlign = 4;  // floats: 16 bytes

inline std::int64_t round_up_i64(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }
// Row pitch of a BLK128x128 scale tensor for kb k-blocks.
inline std::int64_t blk_scale_pitch(std::int64_t kb) { return round_up_i64(kb, 4); }

// Per-expert float offsets of VEC128 scale blocks of (kb, rows_e) each, rows_e = diff(offs), each
// block's start rounded up to kScaleAlign; the last entry is the total size (E + 1 entries).
std::vector<std::int64_t> vec_scale_offsets(std::span<const std::int32_t> offs, std::int64_t kb);

// Relayout kernels (scale_layout.cu), on `stream`, no allocation.
// 1x128 scales of a token-grouped lhs (M, kb) row-major -> per expert e the (kb, rows_e) block at
// dst + dst_off[e] (dst_off from vec_scale_offsets).
void relayout_vec_scales(const float* src, std::span<const std::int32_t> offs, std::int64_t kb,
                         std::span<const std::int64_t> dst_off, float* dst, cudaStream_t stream);
// 128x128 scales (rows, kb) row-major (rows = E * nb) -> (rows, blk_scale_pitch(kb)), pad zero.
void relayout_blk_scales(const float* src, std::int64_t rows, std::int64_t kb, float* dst, cudaStream_t stream);
// Plain transpose of a (R, C) row-major float matrix into (C, R) row-major; `batch` such matrices
// back to back (batch, R, C) -> (batch, C, R).
void transpose_scales(const float* src, std::int64_t R, std::int64_t C, float* dst, cudaStream_t stream,
                      std::int64_t batch = 1);

// Two device buffers for relaid scales (0: one operand's, 1: the other's), kept by a grouped pass
// object between launches; they only grow, past the largest size so far.
class ScaleScratch {
 public:
  float* get(int which, std::size_t n) {
    DeviceBuffer<float>& b = b_[which];
    if (b.size() < n) b = DeviceBuffer<float>(n);
    return b.get();
  }

 private:
  DeviceBuffer<float> b_[2];
};

// wgrad's 1x128-along-tokens scales, both operands relaid at once: dOut^T's (N, mb) and A^T's
// (K, mb), mb = M/128, transposed to (mb, N) and (mb, K). Expert e's (M_e/128, rows) block then
// starts at its first token block, which is the MN-major per-expert layout cuBLASLt's VEC128 and
// CUTLASS's sm90 collective both read (the offsets are multiples of 128: check_kgroup_offsets).
struct TokenBlockScales {
  const float* dout = nullptr;  // (mb, N) in scratch buffer 0
  const float* a = nullptr;     // (mb, K) in scratch buffer 1
  std::int64_t N = 0, K = 0;
  std::span<const std::int32_t> offs;
  std::int64_t first_block(std::size_t e) const { return (e == 0 ? 0 : std::int64_t{offs[e - 1]}) / 128; }
  const float* dout_of(std::size_t e) const { return dout + first_block(e) * N; }
  const float* a_of(std::size_t e) const { return a + first_block(e) * K; }
};
TokenBlockScales relay_token_block_scales(const float* doutT_scales, std::int64_t N, const float* aT_scales,
                                          std::int64_t K, std::span<const std::int32_t> offs, std::int64_t mb,
                                          ScaleScratch& scratch, cudaStream_t stream);

}  // namespace fp8moe::kernels
