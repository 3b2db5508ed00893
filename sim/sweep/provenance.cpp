#include "sim/sweep/provenance.hpp"

#include <fmt/core.h>
#include <omp.h>
#include <unistd.h>

#include <Eigen/Core>
#include <boost/version.hpp>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/device_info.hpp"
#include "results/h5.hpp"
#include "sim/backend/backend.hpp"

#ifndef FP8MOE_BUILD_TYPE
#define FP8MOE_BUILD_TYPE "unknown"
#endif
#ifndef FP8MOE_CXX_FLAGS
#define FP8MOE_CXX_FLAGS ""
#endif
#ifndef FP8MOE_NCCL_VERSION
#define FP8MOE_NCCL_VERSION "none"
#endif

extern char** environ;

namespace fp8moe::sim {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
    }
  }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string nccl_env() {
  std::string s;
  for (char** e = environ; e && *e; ++e) {
    if (std::string(*e).rfind("NCCL_", 0) == 0) s += std::string(*e) + "\n";
  }
  return s;
}

}  // namespace

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Provenance provenance() {
  Provenance p;
  p.emplace_back("tool_version", FP8MOE_VERSION);
  p.emplace_back("git_sha", build::git_sha());
  p.emplace_back("git_dirty", std::to_string(build::git_dirty()));
  p.emplace_back("build", fmt::format("{} | gcc {} | {}", FP8MOE_BUILD_TYPE, __VERSION__, FP8MOE_CXX_FLAGS));
  p.emplace_back("host", host_name());
  p.emplace_back("cpu", cpu_model());
  p.emplace_back("cpu_cores", std::to_string(std::thread::hardware_concurrency()));
  p.emplace_back("omp_threads", std::to_string(omp_get_max_threads()));
  const kernels::CudaInfo cuda = kernels::query_cuda();
  if (!cuda.devices.empty()) {
    const auto& d = cuda.devices.front();
    p.emplace_back("device_name", d.name);
    p.emplace_back("device_uuid", d.uuid);
    p.emplace_back("device_sm", fmt::format("sm_{}{}", d.sm_major, d.sm_minor));
  } else {
    p.emplace_back("device_name", "none");
    p.emplace_back("device_uuid", "none");
    p.emplace_back("device_sm", "none");
  }
  p.emplace_back("driver_version", cuda.driver_version
                                       ? fmt::format("{}.{}", cuda.driver_version / 1000, cuda.driver_version % 1000 / 10)
                                       : std::string("none"));
  p.emplace_back("cuda_runtime", cuda.compiled ? fmt::format("{}.{}", cuda.runtime_version / 1000,
                                                             cuda.runtime_version % 1000 / 10)
                                               : std::string("not built"));
  p.emplace_back("hdf5_version", h5::library_version());
  p.emplace_back("eigen_version", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION));
  p.emplace_back("boost_version",
                 fmt::format("{}.{}.{}", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100));
  p.emplace_back("fmt_version", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100));
  p.emplace_back("nccl_version", std::string(FP8MOE_NCCL_VERSION) + " (headers at build time)");
  p.emplace_back("nccl_env", nccl_env());
  std::string backends;
  for (const std::string& b : backend_names()) backends += (backends.empty() ? "" : ",") + b;
  p.emplace_back("backends", backends);
  // fake-gpu and nccl need CUDA (and NCCL) in the build; mpi needs fp8moe-mpi next to fp8moe.
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const bool mpi = !ec && (self.filename() == "fp8moe-mpi" || std::filesystem::exists(self.parent_path() / "fp8moe-mpi"));
  p.emplace_back("mesh_kinds", fmt::format("fake{}{}{}", cuda.compiled ? ",fake-gpu" : "",
#ifdef FP8MOE_NCCL_BUILT
                                           cuda.compiled ? ",nccl" : "",
#else
                                           "",
#endif
                                           mpi ? ",mpi" : ""));
  return p;
}

}  // namespace fp8moe::sim
