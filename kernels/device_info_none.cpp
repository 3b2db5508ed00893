// The CUDA-less build: the backend is absent, and says so.
#include "kernels/device_info.hpp"

namespace fp8moe::kernels {

CudaInfo query_cuda() {
  CudaInfo info;
  info.error = "this fp8moe was built without CUDA (nvcc was not found at configure time)";
  return info;
}

}  // namespace fp8moe::kernels
