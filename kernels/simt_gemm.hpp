#pragma once
// The `simt` grouped GEMM: promote-fp32 and hopper-tc (README.md, "Arithmetic modes") on CUDA
// cores, equal bit for bit to reference/block_gemm.cpp for both promotion families, bf16/fp32
// output and cuBLASLt's split-K runs (opt.split_k). Per output element and block: promote-fp32's
// P is the exact integer partial of the codes (int64 for e4m3, int128 for e5m2; a block with a
// NaN/Inf code: the fp64 sum of decoded products, as the CPU scalar path) rounded once to fp32;
// hopper-tc's P is B/32 chained tensor-core steps (reference/tensor_core.hpp). P is folded with
// tensor_core.hpp's promote() in k-block order; out = round_bf16(acc) or acc.
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
// splits: cuBLASLt's split-K runs to reproduce (1: none).
void simt_block_gemm(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, float* C, std::int64_t ldc,
                     const GemmOptions& opt, cudaStream_t stream = nullptr, int splits = 1);

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
