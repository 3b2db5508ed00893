#pragma once
// The CUDA backends (device code in kernels/; this is the thin sim/ adapter). Operands cross the
// Backend interface as host tensors: every op uploads its inputs, runs on the GPU, and downloads
// its output. Between ops the collectives run in FakeCommunicator (host) or, with --runtime fake-gpu,
// in CudaFakeCommunicator (sim/comm/cuda_fake_communicator.hpp), which stages them on the GPU.
//
// | backend       | hp64                  | promote-fp32                                   | other modes |
// |---------------|-----------------------|------------------------------------------------|-------------|
// | cuda-simt     | GPU fp64 (hp64_gemm)  | simt kernel, both orders: bitwise the CPU's    | rejected    |
// | cuda-cublaslt | GPU fp64 (hp64_gemm)  | cuBLASLt block-scaled FP8 (e4m3, block 128),   | rejected    |
// |               |                       | labelled hopper-tc:cublas: the model it is     |             |
// |               |                       | held against bitwise; other modes rejected     |             |
// | cuda-cutlass  | GPU fp64 (hp64_gemm)  | CUTLASS's sm90 grouped blockwise FP8 GEMM (one | rejected    |
// |               |                       | launch per pass; e4m3, block 128), labelled    |             |
// |               |                       | hopper-tc:cublas; built only with CUTLASS      |             |
// bf16, exact and torchao-emulated stay with the reference backend: backend_unsupported says so
// before a case runs. Quantizers run on the GPU (bitwise reference/'s; QuantStats are left zero);
// dequantize and the SwiGLU elementwise ops reuse the CPU reference (the same bits).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/backend/backend.hpp"

namespace fp8moe::sim {

// The CUDA backends this build has: {"cuda-simt", "cuda-cublaslt"} (+ "cuda-cutlass" with CUTLASS),
// or none without nvcc.
const std::vector<std::string>& cuda_backend_names();
// Why CUDA backend `name` cannot compute a pass with `opt` (empty when it can). Needs no device.
std::string cuda_backend_unsupported(const std::string& name, const GemmOptions& opt);
// Error naming the backend when this machine has no CUDA device.
std::unique_ptr<Backend> make_cuda_backend(const std::string& name);

// Device memory of one case on one GPU (issue 5 item 8): a case that cannot fit is rejected before
// it runs, with its estimate, instead of failing part way (each op also checks its own estimate
// before it allocates). The estimate is an upper bound of what is allocated at once:
//   op    the largest single backend op of any run of the case (the plan's ranks, the single
//         device in the case's mode, the single-device hp64): fp32 inputs, fp8 codes and scales,
//         the output (fp64 for hp64), at the unsharded shapes with every expert's rows padded
//         (token groups to the block, cuBLASLt's row multiple) and feature dims rounded up to the
//         block (ragged shards are zero-padded per rank);
//   fixed what the backend keeps between ops (cuda-cublaslt, cuda-cutlass: workspace and scale buffers);
//   comm  with fake_gpu, CudaFakeCommunicator's staging arena at its largest: a collective holds
//         at most (members + 1) images of the largest tensor (all_gather: the shards and every
//         member's gathered copy; reductions: every member's input and the result), in fp32.
struct CudaCaseShape {
  bool layer = false;                // false: one grouped pass (op level); true: the SwiGLU expert layer
  Pass pass = Pass::fwd;             // op level
  std::int64_t experts = 1, tokens = 0;
  std::int64_t n = 0, k = 0;         // op level: N, K
  std::int64_t dim = 0, hidden = 0;  // layer level: D, H
  int world = 1;                     // ranks of the mesh
  bool fake_gpu = false;             // its collectives run on this GPU (--runtime fake-gpu)
  GemmOptions gemm;
};
struct CudaCaseBytes {
  std::size_t op = 0, fixed = 0, comm = 0;  // saturate at SIZE_MAX
  std::size_t total() const;
};
// Needs no device. Unknown backend names: Error listing the CUDA backends.
CudaCaseBytes cuda_case_device_bytes(const std::string& backend, const CudaCaseShape& s);
// Throws unless the estimate fits in the device's free memory; the message names `what` (the
// case), the estimate and its parts, and cudaMemGetInfo's free and total bytes.
void require_cuda_case_memory(const std::string& backend, const CudaCaseShape& s, const std::string& what);

}  // namespace fp8moe::sim
