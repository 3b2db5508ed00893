// The CPU backend: every op is reference/'s.
#include <cmath>

#include "reference/error.hpp"
#include "sim/backend/backend.hpp"
#include "sim/backend/cuda_backend.hpp"

namespace fp8moe::sim {

TensorF to_float(const TensorD& t) {
  TensorF f(t.shape);
  for (std::size_t i = 0; i < t.numel(); ++i) f.data[i] = static_cast<float>(t.data[i]);
  return f;
}

namespace {

float silu(float a) { return a / (1.0f + std::exp(-a)); }

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }

  Quantized quantize(Recipe r, const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt) override {
    return fp8moe::quantize(r, x, offs, opt);
  }
  TensorF dequantize(const Quantized& q) override { return fp8moe::dequantize(q); }

  TensorD fwd(const TensorF& A, const TensorF& W, std::span<const std::int32_t> offs, const GemmOptions& opt) override {
    return grouped_fwd(A, W, offs, opt);
  }
  TensorD dgrad(const TensorF& dOut, const TensorF& W, std::span<const std::int32_t> offs,
                const GemmOptions& opt) override {
    return grouped_dgrad(dOut, W, offs, opt);
  }
  TensorD wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs,
                const GemmOptions& opt) override {
    return grouped_wgrad(dOut, A, offs, opt);
  }
  TensorD fwd_qweight(const TensorF& A, const Quantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt) override {
    return grouped_fwd_q(quantize_act_lhs(A, opt.quant), W_q, offs, opt);
  }
  TensorD dgrad_qweight(const TensorF& dOut, const Quantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt) override {
    return grouped_dgrad_q(quantize_act_lhs(dOut, opt.quant), W_q, offs, opt);
  }

  TensorF swiglu(const TensorF& a, const TensorF& b) override {
    if (a.shape != b.shape) fail("swiglu: shapes ", shape_str(a.shape), " and ", shape_str(b.shape), " differ");
    TensorF h(a.shape);
    for (std::size_t i = 0; i < a.numel(); ++i) h.data[i] = round_bf16(silu(a.data[i]) * b.data[i]);
    return h;
  }
  void swiglu_backward(const TensorF& a, const TensorF& b, const TensorF& dh, TensorF& da, TensorF& db) override {
    da = TensorF(a.shape);
    db = TensorF(a.shape);
    for (std::size_t i = 0; i < a.numel(); ++i) {
      const float s = 1.0f / (1.0f + std::exp(-a.data[i]));
      const float si = a.data[i] * s;
      const float dsilu = s * (1.0f + a.data[i] * (1.0f - s));
      da.data[i] = round_bf16(dh.data[i] * b.data[i] * dsilu);
      db.data[i] = round_bf16(dh.data[i] * si);
    }
  }
};

}  // namespace

const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n{"reference"};
    for (const std::string& c : cuda_backend_names()) n.push_back(c);  // none without nvcc
    return n;
  }();
  return names;
}

std::string resolve_backend(const std::string& name) {
  if (name != kFastestBackend) return name;
  for (const char* b : kTensorCoreBackends) {
    for (const std::string& n : backend_names()) {
      if (n == b) return n;
    }
  }
  fail("backend '", kFastestBackend, "' is this build's fastest tensor-core backend (cuda-cutlass, else cuda-cublaslt), "
       "and this build has neither: configure on a machine with nvcc (and CUTLASS's headers: scripts/setup.sh)");
}

bool runs_tensor_cores(const std::string& name) {
  if (name == kFastestBackend) return true;
  for (const char* b : kTensorCoreBackends) {
    if (name == b) return true;
  }
  return false;
}

namespace {
void check_backend_name(const std::string& name) {
  if (name == "cpu") return;
  for (const std::string& n : backend_names()) {
    if (n == name) return;
  }
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  if (name == kFastestBackend) {
    fail("backend '", name, "' is an alias: resolve it first (resolve_backend); this build has ", known);
  }
  if (name == "cuda-cutlass") {
    fail("backend 'cuda-cutlass' is not in this build (it has ", known, "): it needs nvcc and CUTLASS 4.x's headers "
         "at configure time; scripts/setup.sh fetches them, or configure with -DFP8MOE_CUTLASS_DIR=/path/to/cutlass");
  }
  fail("unknown backend '", name, "': this build has ", known);
}
}  // namespace

std::string backend_unsupported(const std::string& name, const GemmOptions& opt) {
  check_backend_name(name);
  const std::string why = mode_unsupported(opt);  // hopper-tc:cublas outside cuBLASLt's options
  if (!why.empty()) return why;
  if (name == "reference" || name == "cpu") return {};  // the reference computes every mode
  return cuda_backend_unsupported(name, opt);
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  check_backend_name(name);
  if (name == "reference" || name == "cpu") return std::make_unique<ReferenceBackend>();
  return make_cuda_backend(name);  // throws naming the backend when no CUDA device is present
}

}  // namespace fp8moe::sim
