#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/device_info.hpp"

namespace fp8moe::kernels {

CudaInfo query_cuda() {
  CudaInfo info;
  info.compiled = true;
  cudaRuntimeGetVersion(&info.runtime_version);
  if (cudaDriverGetVersion(&info.driver_version) != cudaSuccess) info.driver_version = 0;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    const cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
      info.error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorName(e);
      continue;
    }
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    char uuid[64];
    const unsigned char* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
    std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    d.uuid = uuid;
    d.sm_major = p.major;
    d.sm_minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    d.total_mem = p.totalGlobalMem;
    info.devices.push_back(d);
  }
  return info;
}

}  // namespace fp8moe::kernels
