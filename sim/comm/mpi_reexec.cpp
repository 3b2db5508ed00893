// The plain fp8moe does not link MPI (the GPU machines' image may lack libmpi, reference/SPEC.md 15.1):
// --runtime mpi, and --runtime nccl under a launcher, re-execute the process as fp8moe-mpi, the same
// CLI linked with MPI, found next to this binary. fp8moe-mpi links sim/comm/mpi_runtime.cpp,
// whose strong definitions replace the weak ones below (see mpi_runtime.hpp for why the linker
// picks them).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "reference/error.hpp"
#include "sim/comm/mpi_runtime.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim {

std::string rank_list(const std::vector<std::string>& per_rank) {
  std::string s;
  for (std::size_t r = 0; r < per_rank.size(); ++r) s += (r ? "," : "") + std::to_string(r) + ":" + per_rank[r];
  return s;
}

namespace detail {

[[noreturn]] void reexec_as_mpi(const char* why) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path mpi = ec ? std::filesystem::path() : self.parent_path() / "fp8moe-mpi";
  if (self.filename() == "fp8moe-mpi") {
    fail(why, ": internal error, fp8moe-mpi was linked without the MPI runtime");
  }
  if (mpi.empty() || !std::filesystem::exists(mpi)) {
    fail(why, ": this fp8moe was built without MPI (no fp8moe-mpi next to ", self.string(), "); install ",
         "Open MPI (scripts/setup.sh installs libopenmpi-dev openmpi-bin) and rebuild with scripts/build.sh");
  }
  const std::vector<std::string>& args = process_argv();
  if (args.empty()) fail(why, ": internal error, main() did not record its arguments");
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(mpi.c_str(), argv.data());
  fail(why, ": could not execute ", mpi.string(), ": ", std::strerror(errno));
}

[[gnu::weak]] std::unique_ptr<MeshRuntime> make_mpi_runtime(const RuntimeOptions&) { reexec_as_mpi("--runtime mpi"); }

[[gnu::weak]] std::shared_ptr<MpiLaunch> mpi_launch() { reexec_as_mpi("--runtime nccl under a launcher"); }

}  // namespace detail
}  // namespace fp8moe::sim
