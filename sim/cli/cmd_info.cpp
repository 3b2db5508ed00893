// `fp8moe info`: versions, build flags and devices, for bug reports. The same facts are the
// provenance attributes of every sweep file (sim/sweep/provenance.hpp).
#include <fmt/core.h>

#include "kernels/device_info.hpp"
#include "sim/cli/command.hpp"
#include "sim/sweep/provenance.hpp"

namespace fp8moe::cli {

int cmd_info(const Args& args) {
  po::options_description desc("fp8moe info options");
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe info")) return 0;
  for (const auto& [name, value] : sim::provenance()) {
    if (name == "nccl_env") {
      fmt::print("{:<15} {}\n", name, value.empty() ? "(no NCCL_* variables)" : "");
      if (!value.empty()) fmt::print("{}", value);
      continue;
    }
    fmt::print("{:<15} {}\n", name, value);
  }
  const kernels::CudaInfo cuda = kernels::query_cuda();
  if (!cuda.compiled) {
    fmt::print("{:<15} not built: {}\n", "cuda", cuda.error);
    return 0;
  }
  if (cuda.devices.empty()) fmt::print("{:<15} none ({})\n", "devices", cuda.error);
  for (const auto& d : cuda.devices) {
    fmt::print("device {:<8} {} sm_{}{} {} SMs {:.1f} GiB {}\n", d.index, d.name, d.sm_major, d.sm_minor, d.sm_count,
               static_cast<double>(d.total_mem) / (1ull << 30), d.uuid);
  }
  return 0;
}

}  // namespace fp8moe::cli
