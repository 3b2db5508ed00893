// The plain fp8moe does not link MPI (the GPU machines' image may lack libmpi, DESIGN.md 6):
// --mesh mpi re-executes the process as fp8moe-mpi, the same CLI linked with MPI, found next to
// this binary. fp8moe-mpi links sim/comm/mpi_runtime.cpp, whose strong definition replaces this
// weak one.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "reference/error.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim::detail {

[[gnu::weak]] std::unique_ptr<MeshRuntime> make_mpi_runtime(const RuntimeOptions&) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path mpi = ec ? std::filesystem::path() : self.parent_path() / "fp8moe-mpi";
  if (mpi.empty() || !std::filesystem::exists(mpi)) {
    fail("--mesh mpi: this fp8moe was built without MPI (no fp8moe-mpi next to ", self.string(), "); install ",
         "Open MPI (scripts/setup.sh installs libopenmpi-dev) and rebuild with scripts/build.sh");
  }
  const std::vector<std::string>& args = process_argv();
  if (args.empty()) fail("--mesh mpi: internal error, main() did not record its arguments");
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(mpi.c_str(), argv.data());
  fail("--mesh mpi: could not execute ", mpi.string(), ": ", std::strerror(errno));
}

}  // namespace fp8moe::sim::detail
