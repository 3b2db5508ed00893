#pragma once
// The CUDA backends (device code in kernels/; this is the thin sim/ adapter). Operands cross the
// Backend interface as host tensors: every op uploads its inputs, runs on the GPU, and downloads
// its output (a device-resident fake communicator is the next step, see cuda_backend.cpp).
//
// | backend       | hp64                  | promote-fp32                                   | other modes |
// |---------------|-----------------------|------------------------------------------------|-------------|
// | cuda-simt     | GPU fp64 (hp64_gemm)  | simt kernel, both orders: bitwise the CPU's    | rejected    |
// | cuda-cublaslt | GPU fp64 (hp64_gemm)  | cuBLASLt block-scaled FP8 (e4m3, block 128),   | rejected    |
// |               |                       | labelled promote-fp32/cublas: the model it is  |             |
// |               |                       | held against; deepgemm order is rejected       |             |
// bf16, exact and torchao-emulated stay with the reference backend: backend_unsupported says so
// before a case runs. Quantizers run on the GPU (bitwise reference/'s; QuantStats are left zero);
// dequantize and the SwiGLU elementwise ops reuse the CPU reference (the same bits).
#include <memory>
#include <string>
#include <vector>

#include "sim/backend/backend.hpp"

namespace fp8moe::sim {

// The CUDA backends this build has: {"cuda-simt", "cuda-cublaslt"}, or none without nvcc.
const std::vector<std::string>& cuda_backend_names();
// Why CUDA backend `name` cannot compute a pass with `opt` (empty when it can). Needs no device.
std::string cuda_backend_unsupported(const std::string& name, const GemmOptions& opt);
// Error naming the backend when this machine has no CUDA device.
std::unique_ptr<Backend> make_cuda_backend(const std::string& name);

}  // namespace fp8moe::sim
