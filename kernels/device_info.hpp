#pragma once
// What CUDA sees on this machine: runtime and driver versions and each device, for `fp8moe info`
// and for the provenance of results. Host code only; no kernel is launched.
#include <cstddef>
#include <string>
#include <vector>

namespace fp8moe::kernels {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string uuid;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  std::size_t total_mem = 0;
};

struct CudaInfo {
  bool compiled = false;      // this build has the CUDA backend
  int runtime_version = 0;    // e.g. 13000
  int driver_version = 0;     // 0 when no driver is loaded
  std::vector<DeviceInfo> devices;
  std::string error;          // why no device is usable, when none is
};

CudaInfo query_cuda();

}  // namespace fp8moe::kernels
