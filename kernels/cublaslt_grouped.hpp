#pragma once
// The `cublaslt` grouped passes: cuBLASLt FP8 e4m3 GEMMs with Hopper block scaling, one
// cublasLtMatmul per non-empty expert on one stream (no grouped block-scaled API before cuBLAS
// 13.4, reference/SPEC.md 15.2). TN only: every operand is K-contiguous (row-major (rows, k) = cuBLAS's
// k x rows column-major), output row-major = cuBLAS column-major with the operands swapped.
//
// | pass  | cuBLAS A (m x k, BLK/VEC)          | cuBLAS B (k x n, VEC128)        | D (row-major)  |
// |-------|------------------------------------|---------------------------------|----------------|
// | fwd   | W_e codes (N,K), 128x128 scales    | A_e codes (M_e,K), 1x128        | out (M_e, N)   |
// | dgrad | W_e^T codes (K,N), 128x128 scales  | dOut_e codes (M_e,N), 1x128     | dA (M_e, K)    |
// | wgrad | A^T codes (K, M) cols of e, 1x128  | dOut^T codes (N, M) cols of e   | dW_e (N, K)    |
// D = scaleA * scaleB * (A . B): our stored scales are s_inv, the dequantization multipliers, which
// is what the scale pointers mean. The scales are relaid into cuBLASLt's layouts
// (kernels/scale_layout.hpp) in buffers the object keeps; matmul descriptors, layouts and the
// heuristic's algorithm are cached per shape; the workspace is allocated once. A call allocates
// device memory only when a scale buffer must grow past its largest size so far.
//
// The expert loop, the operand checks and every expert's operand pointers and strides are
// reference/grouped_plan.hpp's plan, the one the CPU and simt passes run.
// Inputs are DeviceQuantized in kernels/quantize.hpp's (= reference/'s) layouts:
//   fwd:   A_q 1x128 (M,K),                 W_q 128x128 (E,N,K)
//   dgrad: dOut_q 1x128 (M,N),              W_q 128x128T (E,K,N)
//   wgrad: dOutT_q kgrouped-lhs (N,M),      AT_q kgrouped-lhs of A (K,M)   (both 1x128 along tokens)
// Output `out`: bf16 bits (std::uint16_t) for opt.out == bf16, float for fp32. Preconditions
// (e4m3, block 128, 16-byte alignment of every expert's operand, fwd/dgrad expert rows a multiple
// of kLtRowMultiple) are checked on the host with messages naming the dim and value. Arithmetic:
// cuBLASLt's tensor cores, modelled bit for bit by reference/'s hopper-tc:cublas with each call's
// split-K count (last_calls()); tests/kernels/test_kernels_cublaslt.cpp holds them equal.
// The operand order is torch._scaled_mm's (its mat1 = our lhs = cuBLAS B, mat2 = our rhs = cuBLAS
// A), so the 1x128 x 1x128 promotion order is the one PyTorch users get.
//
// LtScaling::per_tensor runs the same loops on the same codes with cuBLASLt's per-tensor FP8
// scaling and scales of 1 (D = A_codes . B_codes, the block scales ignored): the speed baseline of
// fp8moe-bench-kernels (what block scaling costs against plain FP8 GEMMs of the same shapes),
// checked against a CPU product of the decoded codes in test_kernels_cublaslt.cpp.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/quantize.hpp"
#include "kernels/scale_layout.hpp"
#include "reference/gemm.hpp"

namespace fp8moe::kernels {

// Every expert's row count (the n of its GEMM) must be a multiple of this in fwd and dgrad: the
// VEC128 scale tensor (n, k/128) has stride n, and cuBLASLt found no algorithm for n = 257 on the
// H200 (NOT_SUPPORTED) while n = 100 ran (results/device/2026-12-02-h200-cublaslt-tests.log).
// The cuda-cublaslt backend pads ragged experts with zero rows to meet it.
inline constexpr std::int32_t kLtRowMultiple = 4;

// Why cuBLASLt block scaling cannot run these options (empty when it can): e5m2 x e5m2 is not an
// FP8 cuBLASLt combination, the scale modes are 128-wide only, fp64 output does not exist.
std::string cublaslt_unsupported(const QuantOptions& q, OutDtype out);

enum class LtScaling { block, per_tensor };

// What cuBLASLt ran for one expert's GEMM: the heuristic's algorithm as
// cublasLtMatmulAlgoConfigGetAttribute reports it. splits (numSplitsK) and the reduction scheme
// decide the arithmetic: hopper-tc:cublas reproduces split runs from `splits`
// (GemmOptions::split_k).
struct LtCall {
  std::int64_t expert = 0, m = 0, n = 0, k = 0;
  std::int32_t algo_id = 0, tile_id = 0, splits = 1, reduction = 0;
};
const char* lt_reduction_name(std::int32_t scheme);

class CublasLtGrouped {
 public:
  explicit CublasLtGrouped(std::size_t workspace_bytes = std::size_t{32} << 20);
  ~CublasLtGrouped();
  CublasLtGrouped(const CublasLtGrouped&) = delete;
  CublasLtGrouped& operator=(const CublasLtGrouped&) = delete;

  void fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
           const GemmOptions& opt, void* out, cudaStream_t stream = nullptr, LtScaling scaling = LtScaling::block);
  void dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
             const GemmOptions& opt, void* out, cudaStream_t stream = nullptr, LtScaling scaling = LtScaling::block);
  void wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& AT_q, std::span<const std::int32_t> offs,
             const GemmOptions& opt, void* out, cudaStream_t stream = nullptr, LtScaling scaling = LtScaling::block);

  std::size_t cached_plans() const { return plans_.size(); }
  // The experts' calls of the last fwd/dgrad/wgrad, in expert order (empty experts left out), and
  // their split counts per expert (1 for an empty expert): what GemmOptions::split_k needs to
  // model that call.
  const std::vector<LtCall>& last_calls() const { return calls_; }
  std::vector<std::int32_t> last_split_k(std::size_t experts) const;

 private:
  struct Plan;
  // The three passes: reference/grouped_plan.hpp's plan, cuBLASLt's checks, scales and calls.
  void run(Pass pass, const DeviceQuantized& lhs, const DeviceQuantized& rhs, std::span<const std::int32_t> offs,
           const GemmOptions& opt, void* out, cudaStream_t stream, LtScaling scaling);
  // (m, n, k, lda, ldb, ldd, A scale mode, B scale mode, D type)
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, int>;
  Plan& plan(const Key& key, const char* pass, const float* a_scale, const float* b_scale);
  void matmul(Plan& p, const void* a, const float* a_scale, const void* b, const float* b_scale, void* d,
              cudaStream_t stream, const char* pass, std::int64_t expert);
  const float* unit_scale();                  // a device 1.0f (the per-tensor scales)

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<std::uint8_t> workspace_;
  ScaleScratch scratch_;  // the relaid scales (0: cuBLAS A's, 1: B's)
  DeviceBuffer<float> one_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::vector<LtCall> calls_;
};

}  // namespace fp8moe::kernels
