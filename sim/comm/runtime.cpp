#include "sim/comm/runtime.hpp"

#include <cstdlib>
#include <string_view>

#include "kernels/device_info.hpp"
#include "reference/error.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim {
namespace {

constexpr std::pair<MeshKind, const char*> kKinds[] = {
    {MeshKind::fake, "fake"}, {MeshKind::fake_gpu, "fake-gpu"}, {MeshKind::mpi, "mpi"}, {MeshKind::nccl, "nccl"}};

// Both fake kinds: one process, one call holding every rank.
class FakeRuntime final : public MeshRuntime {
 public:
  explicit FakeRuntime(MeshKind k) : kind_(k) {}
  MeshKind kind() const override { return kind_; }
  int launch_world() const override { return 1; }
  int launch_rank() const override { return 0; }
  std::string cannot_run(const Mesh&) const override { return ""; }
  void run(const Mesh& mesh, const std::function<void(Communicator&)>& body) override {
    std::unique_ptr<Communicator> comm =
        kind_ == MeshKind::fake ? std::make_unique<FakeCommunicator>(mesh) : detail::make_fake_gpu_communicator(mesh);
    body(*comm);
  }
  void barrier() override {}
  std::string broadcast(const std::string& s) override { return s; }
  bool any(bool local) override { return local; }
  std::vector<std::pair<std::string, std::string>> provenance() const override {
    return {{"mesh_runtime", mesh_kind_name(kind_)}, {"launch_world", "1"}};
  }

 private:
  MeshKind kind_;
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end && *end == '\0' && n > 0 && n < (1 << 24) ? static_cast<int>(n) : 0;
}

std::vector<std::string>& argv_store() {
  static std::vector<std::string> v;
  return v;
}

}  // namespace

void remember_argv(int argc, char** argv) { argv_store().assign(argv, argv + argc); }
const std::vector<std::string>& process_argv() { return argv_store(); }

const char* mesh_kind_name(MeshKind k) {
  for (const auto& [kind, name] : kKinds) {
    if (kind == k) return name;
  }
  return "?";
}

MeshKind parse_mesh_kind(const std::string& s) {
  for (const auto& [kind, name] : kKinds) {
    if (s == name) return kind;
  }
  fail("unknown --runtime '", s, "': use fake (every rank in this process, CPU), fake-gpu (every rank on one GPU), ",
       "mpi (one process per rank under mpirun) or nccl (one GPU per rank)");
}

std::vector<std::string> mesh_kind_names() {
  std::vector<std::string> v;
  for (const auto& kv : kKinds) v.emplace_back(kv.second);
  return v;
}

bool launched_with_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS"}) {
    if (env_int(v) > 1) return true;
  }
  return false;
}

std::unique_ptr<MeshRuntime> make_mesh_runtime(MeshKind kind, const RuntimeOptions& opt) {
  switch (kind) {
    case MeshKind::fake:
    case MeshKind::fake_gpu:
      if (launched_with_ranks()) {
        fail("fp8moe was started as several ranks by a launcher (mpirun/srun) with --mesh ", mesh_kind_name(kind),
             ": every copy would run the whole sweep on its own; use --runtime mpi (CPU) or --runtime nccl (GPUs), ",
             "or start one copy without the launcher");
      }
      if (kind == MeshKind::fake_gpu) {
        // Refused here, as --backend cuda-* is, rather than by every case (a file of error rows).
        const kernels::CudaInfo cuda = kernels::query_cuda();
        if (cuda.devices.empty()) {
          fail("--runtime fake-gpu needs a CUDA device, but ",
               cuda.error.empty() ? std::string("cudaGetDeviceCount found none") : cuda.error,
               ": use --runtime fake, or run on a GPU machine");
        }
      }
      return std::make_unique<FakeRuntime>(kind);
    case MeshKind::mpi: return detail::make_mpi_runtime(opt);
    case MeshKind::nccl: return detail::make_nccl_runtime(opt);
  }
  fail("unknown mesh kind");
}

}  // namespace fp8moe::sim
