// `fp8moe info`: versions, build flags and devices, for bug reports and result provenance.
#include <fmt/core.h>
#include <hdf5.h>
#include <omp.h>

#include <Eigen/Core>
#include <boost/version.hpp>

#include "kernels/device_info.hpp"
#include "sim/cli/command.hpp"

#ifndef FP8MOE_BUILD_TYPE
#define FP8MOE_BUILD_TYPE "unknown"
#endif
#ifndef FP8MOE_CXX_FLAGS
#define FP8MOE_CXX_FLAGS ""
#endif

namespace fp8moe::cli {

int cmd_info(const Args& args) {
  po::options_description desc("fp8moe info options");
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe info")) return 0;
  unsigned h5maj = 0, h5min = 0, h5rel = 0;
  H5get_libversion(&h5maj, &h5min, &h5rel);
  fmt::print("fp8moe      {}\n", FP8MOE_VERSION);
  fmt::print("build       {} | {} | {}\n", FP8MOE_BUILD_TYPE, __VERSION__, FP8MOE_CXX_FLAGS);
  fmt::print("openmp      {} threads\n", omp_get_max_threads());
  fmt::print("eigen       {}.{}.{}\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  fmt::print("boost       {}.{}.{}\n", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
  fmt::print("fmt         {}.{}.{}\n", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100);
  fmt::print("hdf5        {}.{}.{}\n", h5maj, h5min, h5rel);
  const kernels::CudaInfo cuda = kernels::query_cuda();
  if (!cuda.compiled) {
    fmt::print("cuda        not built: {}\n", cuda.error);
    return 0;
  }
  fmt::print("cuda        runtime {}.{}, driver {}\n", cuda.runtime_version / 1000, cuda.runtime_version % 1000 / 10,
             cuda.driver_version ? fmt::format("{}.{}", cuda.driver_version / 1000, cuda.driver_version % 1000 / 10)
                                 : std::string("none"));
  if (cuda.devices.empty()) fmt::print("devices     none ({})\n", cuda.error);
  for (const auto& d : cuda.devices) {
    fmt::print("device {}    {} sm_{}{} {} SMs {:.1f} GiB {}\n", d.index, d.name, d.sm_major, d.sm_minor, d.sm_count,
               static_cast<double>(d.total_mem) / (1ull << 30), d.uuid);
  }
  return 0;
}

}  // namespace fp8moe::cli
