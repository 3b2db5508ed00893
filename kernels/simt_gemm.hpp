#pragma once
// The `simt` grouped GEMM: promote-fp32 (DESIGN.md 3.6) on CUDA cores, equal bit for bit to
// reference/block_gemm.cpp for both promotion orders and bf16/fp32 output. Per output element and
// 128-block: the exact integer partial P of the codes (int64 for e4m3, int128 for e5m2; a block
// with a NaN/Inf code: the fp64 sum of decoded products, as the CPU scalar path), rounded once to
// fp32, then deepgemm acc = fmaf(fl32(sa*sb), P, acc) or cublas acc = fmaf(fl32(P*sa), sb, acc)
// in k-block order; out = round_bf16(acc) or acc.
//
// Operands are reference/gemm.hpp's BlockOperand views with device pointers; the grouped drivers
// mirror reference/grouped.cpp's grouped_*_q, one launch per non-empty expert.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "kernels/quantize.hpp"
#include "reference/gemm.hpp"

namespace fp8moe::kernels {

// C (L.rows, R.rows) with row stride ldc, device fp32 holding the output dtype's values
// (opt.out bf16 or fp32). kc: the contraction, a multiple of opt.quant.block.
void simt_block_gemm(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, float* C, std::int64_t ldc,
                     const GemmOptions& opt, cudaStream_t stream = nullptr);

// Grouped passes on device-quantized operands (layouts of kernels/quantize.hpp = reference/'s);
// outputs are device buffers: fwd (M,N), dgrad (M,K), wgrad (E,N,K).
//   fwd:   A_q 1x128 (M,K),            W_q grouped fwd 128x128 (E,N,K)
//   dgrad: dOut_q 1x128 (M,N),         W_q grouped dgrad 128x128T (E,K,N)
//   wgrad: dOutT_q kgrouped-lhs (N,M), A_q kgrouped-rhs (M,K)
void simt_grouped_fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt, float* out, cudaStream_t stream = nullptr);
void simt_grouped_dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt, float* out, cudaStream_t stream = nullptr);
void simt_grouped_wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& A_q,
                        std::span<const std::int32_t> offs, const GemmOptions& opt, float* out,
                        cudaStream_t stream = nullptr);

// A host Quantized (e.g. from reference/) copied to the device, same layout.
DeviceQuantized upload(const Quantized& q);

}  // namespace fp8moe::kernels
