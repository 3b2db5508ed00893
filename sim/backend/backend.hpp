#pragma once
// The per-rank math of a simulated mesh: quantizers, the three grouped passes, and the elementwise
// ops of the SwiGLU expert layer. sim/ calls only this interface around its collectives, so a CUDA
// backend (kernels/) drops in beside the reference one (reference/ on the CPU).
#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reference/gemm.hpp"
#include "reference/quantize.hpp"

namespace fp8moe::sim {

using fp8moe::Recipe;  // reference/quantize.hpp: the quantizers by name

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // offs is used by the K-grouped recipes only.
  virtual Quantized quantize(Recipe r, const TensorF& x, std::span<const std::int32_t> offs,
                             const QuantOptions& opt) = 0;
  virtual TensorF dequantize(const Quantized& q) = 0;

  // The grouped passes on one rank's operands (any mode; padding per opt.pad).
  virtual TensorD fwd(const TensorF& A, const TensorF& W, std::span<const std::int32_t> offs,
                      const GemmOptions& opt) = 0;
  virtual TensorD dgrad(const TensorF& dOut, const TensorF& W, std::span<const std::int32_t> offs,
                        const GemmOptions& opt) = 0;
  virtual TensorD wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs,
                        const GemmOptions& opt) = 0;
  // fwd on a weight that arrived quantized (FSDP2 fp8 all-gather): A is quantized here.
  virtual TensorD fwd_qweight(const TensorF& A, const Quantized& W_q, std::span<const std::int32_t> offs,
                              const GemmOptions& opt) = 0;
  virtual TensorD dgrad_qweight(const TensorF& dOut, const Quantized& W_q, std::span<const std::int32_t> offs,
                                const GemmOptions& opt) = 0;

  // SwiGLU: h = silu(a) * b in fp32, rounded to bf16; and its backward given dh:
  //   da = dh * b * silu'(a), db = dh * silu(a), each rounded to bf16.
  virtual TensorF swiglu(const TensorF& a, const TensorF& b) = 0;
  virtual void swiglu_backward(const TensorF& a, const TensorF& b, const TensorF& dh, TensorF& da, TensorF& db) = 0;

  // cuBLASLt's numSplitsK per expert of the last quantized pass (empty for backends that do not
  // run cuBLASLt): GemmOptions::split_k for hopper-tc:cublas to model that call bit for bit.
  virtual std::vector<std::int32_t> last_split_k() const { return {}; }
  // The algorithms cuBLASLt ran in the last quantized pass, one "e<expert>: algo A tile T splits S
  // reduction R" per call (empty for other backends): what a log needs to explain a split.
  virtual std::string last_algorithms() const { return {}; }
  // Every split count seen since the last call (ascending, distinct): the results' split_k.
  virtual std::vector<std::int32_t> take_splits_seen() { return {}; }
};

// Backends by name: "reference" (CPU); with CUDA also "cuda-simt" and "cuda-cublaslt" (and
// "cuda-cutlass" where CUTLASS's headers were found at configure time)
// (sim/backend/cuda_backend.hpp). Unknown names list the available ones.
std::unique_ptr<Backend> make_backend(const std::string& name);
// The name a scenario or --backend gives, with the alias kFastestBackend resolved to this build's
// fastest tensor-core backend: cuda-cutlass where CUTLASS was built, else cuda-cublaslt (both are
// held to hopper-tc:cublas bit for bit). Other names come back unchanged; the alias in a build
// without CUDA is an Error saying what it needs.
inline constexpr const char* kFastestBackend = "cuda-fastest";
std::string resolve_backend(const std::string& name);
// The backends that run the GPU's tensor cores, and so compute mode hopper-tc only (modelled bit
// for bit by hopper-tc:cublas), fastest first: kFastestBackend resolves to the first one built.
inline constexpr std::array<const char*, 2> kTensorCoreBackends{"cuda-cutlass", "cuda-cublaslt"};
// Whether `name` is one of them or the alias for the fastest (built or not).
bool runs_tensor_cores(const std::string& name);
// The backend names this build knows, in a fixed order (the first is the default).
const std::vector<std::string>& backend_names();
// Why backend `name` cannot compute a pass with `opt` (its mode, promotion, format, ...), or empty
// when it can. Needs no device, so `fp8moe list` can reject such cases anywhere. Unknown names:
// Error listing the known ones.
std::string backend_unsupported(const std::string& name, const GemmOptions& opt);

// cuBLASLt's split-K counts of every cuBLASLt call in this process since the last take (distinct,
// ascending; empty in a build without CUDA): the results' split_k column.
std::vector<std::int32_t> take_cublaslt_splits_seen();

// bf16 (or fp32) values of a pass output as float, the dtype layers pass between ops.
TensorF to_float(const TensorD& t);

}  // namespace fp8moe::sim
