// `fp8moe info`: versions, build flags and devices, for bug reports. The same facts are the
// provenance attributes of every sweep file (sim/sweep/provenance.hpp).
#include <fmt/core.h>

#include "kernels/device_info.hpp"
#include "sim/cli/command.hpp"
#include "reference/error.hpp"
#include "sim/sweep/json_out.hpp"
#include "sim/sweep/provenance.hpp"

namespace fp8moe::cli {

int cmd_info(const Args& args) {
  po::options_description desc("fp8moe info options");
  desc.add_options()("help,h", "show this help")("format", po::value<std::string>()->default_value("table"),
                                                  "table or json (keys: the provenance attributes of a sweep file)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe info [--format table|json]")) return 0;
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "json") fail("--format ", format, ": use table or json");
  if (format == "json") {
    sim::Json j = sim::Json::object();
    for (const auto& [name, value] : sim::provenance()) j[name] = value;
    const kernels::CudaInfo cuda = kernels::query_cuda();
    sim::Json devices = sim::Json::array();
    for (const auto& d : cuda.devices) {
      devices.push_back({{"index", d.index}, {"name", d.name}, {"sm", fmt::format("{}{}", d.sm_major, d.sm_minor)},
                         {"sm_count", d.sm_count}, {"total_mem_bytes", d.total_mem}, {"uuid", d.uuid}});
    }
    j["cuda"] = {{"built", cuda.compiled}, {"runtime_version", cuda.runtime_version},
                 {"driver_version", cuda.driver_version}, {"devices", devices}, {"error", cuda.error}};
    sim::print_json(j);
    return 0;
  }
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
