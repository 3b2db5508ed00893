#pragma once
// The `cutlass` grouped passes (backend cuda-cutlass): one launch of CUTLASS's sm90 warp-specialized
// TMA + wgmma grouped GEMM with blockwise FP8 scaling per pass, every non-empty expert a group of
// that launch (kernels/cutlass_gemm.hpp says what it computes and how it accumulates), in the
// configuration cutlass_choose picks for the launch's shapes (or the one set_kernel gives).
//
// | pass  | CUTLASS A (m x k), scales            | CUTLASS B (n x k), scales           | D (row-major)  |
// |-------|--------------------------------------|-------------------------------------|----------------|
// | fwd   | A_e codes (M_e,K), 1x128             | W_e codes (N,K), 128x128            | out (M_e, N)   |
// | dgrad | dOut_e codes (M_e,N), 1x128          | W_e^T codes (K,N), 128x128          | dA (M_e, K)    |
// | wgrad | dOut^T codes (N, M) cols of e, 1x128 | A^T codes (K, M) cols of e, 1x128   | dW_e (N, K)    |
//
// The expert loop, the operand checks and every group's pointers and strides are
// reference/grouped_plan.hpp's plan (the CPU, simt and cuBLASLt passes run the same one). Inputs are
// DeviceQuantized in kernels/quantize.hpp's layouts, as for CublasLtGrouped (wgrad takes A^T,
// kgrouped-lhs); the scales are relaid on the device into CUTLASS's MN-major layouts (its sm90
// collective reads no other) in buffers the object keeps. Output `out`: bf16 bits or float.
// Ragged experts need no padding (TMA bounds the rows); empty experts are left out of the launch
// (wgrad writes their dW as zero, as the CPU does).
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "kernels/cutlass_gemm.hpp"
#include "kernels/quantize.hpp"
#include "reference/gemm.hpp"

namespace fp8moe::kernels {

// Why the CUTLASS passes cannot run these options (empty when they can).
std::string cutlass_unsupported(const QuantOptions& q, OutDtype out);

// The backend's kernel for `kind`'s scales (every configuration computes the same bits; this is
// the fastest measured, `fp8moe bench --cutlass-tune` on the H100, SPEC 15.5): cooperative tiles;
// bf16 output: fwd/dgrad (act_weight) 128x192 tiles with fp8moe's one-partial mainloop and cluster
// 2x1x1, wgrad (act_act) 128x192 tiles with fp8moe's half-width fold (each half's partial folded
// under the other half's wgmma) and cluster 2x1x1 (round 10: 1.00-1.03x the 128x128 two-partial
// kernel, same walk); fp32 output:
// 128x128 tiles with CUTLASS's mainloop; the tile walk along the shorter side of the groups'
// outputs (m rows of the largest group, n columns): along M (swizzle 2) when m <= n, else along N
// (swizzle 1).
CutlassKernel cutlass_choose(ScaleKind kind, OutDtype out, std::int64_t m, std::int64_t n);

class CutlassGrouped {
 public:
  CutlassGrouped();
  ~CutlassGrouped();
  CutlassGrouped(const CutlassGrouped&) = delete;
  CutlassGrouped& operator=(const CutlassGrouped&) = delete;

  void fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
           const GemmOptions& opt, void* out, cudaStream_t stream = nullptr);
  void dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
             const GemmOptions& opt, void* out, cudaStream_t stream = nullptr);
  void wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& AT_q, std::span<const std::int32_t> offs,
             const GemmOptions& opt, void* out, cudaStream_t stream = nullptr);

  // The last launch: "tile 128x128x128, cluster 1x2x1, cooperative, scales ..., G groups".
  const std::string& last_config() const { return last_config_; }
  // Launches that reran the previous launch's initialized CUTLASS kernel (same configuration,
  // shapes, pointers and strides: no argument upload, no initialization; CutlassScratch).
  std::int64_t reused_launches() const;
  // The kernel of later launches (by default cutlass_choose's for each pass); std::nullopt: the default again.
  void set_kernel(std::optional<CutlassKernel> k) { kernel_ = k; }

 private:
  void run(Pass pass, const DeviceQuantized& lhs, const DeviceQuantized& rhs, std::span<const std::int32_t> offs,
           const GemmOptions& opt, void* out, cudaStream_t stream);
  struct State;
  std::unique_ptr<State> s_;
  std::string last_config_;
  std::optional<CutlassKernel> kernel_;
};

}  // namespace fp8moe::kernels
