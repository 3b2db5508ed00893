// Built without nvcc: no CUDA backends.
#include "reference/error.hpp"
#include "sim/backend/cuda_backend.hpp"

namespace fp8moe::sim {

const std::vector<std::string>& cuda_backend_names() {
  static const std::vector<std::string> none;
  return none;
}

std::string cuda_backend_unsupported(const std::string& name, const GemmOptions&) {
  return "backend '" + name + "' needs a build with CUDA (nvcc was not found when this fp8moe was configured)";
}

std::unique_ptr<Backend> make_cuda_backend(const std::string& name) {
  fail("backend '", name, "' needs a build with CUDA (nvcc was not found when this fp8moe was configured)");
}

std::vector<std::int32_t> take_cublaslt_splits_seen() { return {}; }

std::size_t CudaCaseBytes::total() const { return op + fixed + comm; }

CudaCaseBytes cuda_case_device_bytes(const std::string& backend, const CudaCaseShape&) {
  fail("backend '", backend, "' needs a build with CUDA (nvcc was not found when this fp8moe was configured)");
}

void require_cuda_case_memory(const std::string& backend, const CudaCaseShape&, const std::string& what) {
  fail(what, ": backend '", backend, "' needs a build with CUDA (nvcc was not found when this fp8moe was configured)");
}

}  // namespace fp8moe::sim
