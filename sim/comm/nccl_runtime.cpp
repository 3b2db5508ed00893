// The NCCL mesh runtime (--runtime nccl): one GPU per rank, in one of two launch modes.
//
//   threads  no launcher: one process, one thread per GPU (rank r on device r); a mesh larger
//            than the visible GPUs cannot run. The NCCL unique id is shared inside the process.
//            Needs no MPI, so the plain fp8moe runs it on a machine without libmpi.
//   mpi      under mpirun/srun: one process per rank, rank r on its host's GPU local_rank; the
//            NCCL unique id is broadcast through MPI (MpiLaunch). The plain fp8moe re-executes
//            itself as fp8moe-mpi for this (detail::mpi_launch).
//
// A case on mesh M runs on the first M ranks; the NCCL communicators of a world size are made on
// its first case and kept. A failed case (any rank) aborts that world's communicators on every
// rank, reports the first rank's error on every process, and the next case makes new ones.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "reference/error.hpp"
#include "sim/comm/mpi_runtime.hpp"
#include "sim/comm/nccl_communicator.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim {
namespace {

using nccl::RankContext;

int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string unique_id_bytes() {
  ncclUniqueId id;
  nccl::check(ncclGetUniqueId(&id), "ncclGetUniqueId", 0, "the mesh's unique id");
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

ncclUniqueId unique_id_of(const std::string& s) {
  ncclUniqueId id;
  if (s.size() != sizeof id) fail("nccl: the unique id has ", s.size(), " bytes, expected ", sizeof id);
  std::memcpy(&id, s.data(), sizeof id);
  return id;
}

// One thread per GPU, no launcher.
class NcclThreadRuntime final : public MeshRuntime {
 public:
  explicit NcclThreadRuntime(const RuntimeOptions& opt) : opt_(opt), devices_(visible_devices()) {
    std::vector<std::string> dev, hosts;
    for (int d = 0; d < devices_; ++d) {
      dev.push_back(nccl::device_description(d));
      hosts.push_back(host_name());
    }
    prov_ = {{"mesh_runtime", "nccl"},          {"nccl_mode", "threads"},     {"launch_world", "1"},
             {"nccl_version", nccl::nccl_version()}, {"rank_devices", rank_list(dev)}, {"rank_hosts", rank_list(hosts)}};
  }
  ~NcclThreadRuntime() override {
    for (auto& [m, ranks] : worlds_) drop(ranks);
  }

  MeshKind kind() const override { return MeshKind::nccl; }
  int launch_world() const override { return 1; }
  int launch_rank() const override { return 0; }

  std::string cannot_run(const Mesh& mesh) const override {
    if (mesh.world() <= devices_) return "";
    return cat("mesh ", mesh.str(), " needs ", mesh.world(), " GPUs (--runtime nccl without a launcher: one thread per GPU) ",
               "but this process sees ", devices_, devices_ == 0 ? " (no CUDA device)" : "",
               "; use a machine with more GPUs, or mpirun across hosts");
  }

  void run(const Mesh& mesh, const std::function<void(Communicator&)>& body) override {
    if (const std::string why = cannot_run(mesh); !why.empty()) fail(why);
    const int m = mesh.world();
    std::vector<std::unique_ptr<RankContext>>& ranks = worlds_[m];
    const bool fresh = ranks.empty();
    std::optional<ncclUniqueId> id;
    if (fresh) {
      id = unique_id_of(unique_id_bytes());
      for (int r = 0; r < m; ++r) {
        auto c = std::make_unique<RankContext>();
        c->rank = r;
        c->world = m;
        c->device = r;
        c->timeout_s = opt_.timeout_s;
        ranks.push_back(std::move(c));
      }
    }
    std::atomic<bool> abort{false};
    std::vector<std::optional<std::string>> errors(static_cast<std::size_t>(m));
    std::vector<bool> peer(static_cast<std::size_t>(m), false);
    std::vector<std::thread> threads;
    for (int r = 0; r < m; ++r) {
      threads.emplace_back([&, r] {
        const std::size_t i = static_cast<std::size_t>(r);
        RankContext& c = *ranks[i];
        c.abort = &abort;
        try {
          if (fresh) c.init(*id);
          std::unique_ptr<Communicator> comm = nccl::make_nccl_communicator(mesh, c);
          body(*comm);
        } catch (const nccl::PeerAborted& e) {
          errors[i] = e.what();
          peer[i] = true;
          abort = true;
        } catch (const std::exception& e) {
          errors[i] = e.what();
          abort = true;
        }
        c.abort = nullptr;
      });
    }
    for (std::thread& t : threads) t.join();
    // The first rank's own error; ranks that stopped because of it only when none has one.
    int first = -1;
    for (int pass = 0; pass < 2 && first < 0; ++pass) {
      for (int r = 0; r < m && first < 0; ++r) {
        if (errors[static_cast<std::size_t>(r)] && (pass == 1 || !peer[static_cast<std::size_t>(r)])) first = r;
      }
    }
    if (first < 0) return;
    for (auto& c : ranks) {
      if (!c->broken) c->abort_all();
    }
    drop(ranks);
    worlds_.erase(m);
    fail("rank ", first, ": ", *errors[static_cast<std::size_t>(first)]);
  }

  void barrier() override {}
  std::string broadcast(const std::string& s) override { return s; }
  bool any(bool local) override { return local; }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return prov_; }

 private:
  static void drop(std::vector<std::unique_ptr<RankContext>>& ranks) {
    std::vector<RankContext*> p;
    for (auto& c : ranks) p.push_back(c.get());
    nccl::destroy_all(p);
    ranks.clear();
  }

  RuntimeOptions opt_;
  int devices_;
  std::map<int, std::vector<std::unique_ptr<RankContext>>> worlds_;
  std::vector<std::pair<std::string, std::string>> prov_;
};

// One process per rank under mpirun; the MPI part comes from fp8moe-mpi through MpiLaunch.
class NcclMpiRuntime final : public MeshRuntime {
 public:
  NcclMpiRuntime(const RuntimeOptions& opt, std::shared_ptr<MpiLaunch> launch)
      : opt_(opt), launch_(std::move(launch)) {
    // This process's GPU: its index among the host's processes; a launcher that gives each
    // process one visible GPU (Slurm --gpus-per-task) leaves device 0.
    const int n = visible_devices(), lr = launch_->local_rank();
    device_ = lr < n ? lr : (n == 1 ? 0 : -1);
    const std::string mine = device_ >= 0 ? nccl::device_description(device_) : cat("none (", n, " GPUs for host process ", lr, ")");
    devices_ = launch_->all_gather(mine, "the GPUs of the ranks", opt_.timeout_s);
    prov_ = {{"mesh_runtime", "nccl"}, {"nccl_mode", "mpi"}};
    for (auto& kv : launch_->provenance()) prov_.push_back(std::move(kv));
    prov_.emplace_back("nccl_version", nccl::nccl_version());
    prov_.emplace_back("rank_devices", rank_list(devices_));
  }
  ~NcclMpiRuntime() override {
    for (auto& [m, c] : worlds_) {
      if (c) nccl::destroy_all({c.get()});
    }
  }

  MeshKind kind() const override { return MeshKind::nccl; }
  int launch_world() const override { return launch_->world(); }
  int launch_rank() const override { return launch_->rank(); }

  std::string cannot_run(const Mesh& mesh) const override {
    if (mesh.world() > launch_->world()) {
      return cat("mesh ", mesh.str(), " needs ", mesh.world(), " ranks, mpirun started ", launch_->world());
    }
    const std::vector<std::string>& hosts = launch_->hosts();
    for (std::size_t r = 0; r < static_cast<std::size_t>(mesh.world()); ++r) {
      if (devices_[r].rfind("none", 0) == 0) {
        return cat("mesh ", mesh.str(), ": rank ", r, " on host ", hosts[r], " has no GPU of its own: ", devices_[r],
                   " (--runtime nccl: one GPU per rank)");
      }
      for (std::size_t q = 0; q < r; ++q) {
        if (hosts[q] == hosts[r] && devices_[q] == devices_[r]) {
          return cat("mesh ", mesh.str(), ": ranks ", q, " and ", r, " on host ", hosts[r], " would share the GPU ",
                     devices_[r], " (--runtime nccl: one GPU per rank)");
        }
      }
    }
    return "";
  }

  void run(const Mesh& mesh, const std::function<void(Communicator&)>& body) override {
    if (const std::string why = cannot_run(mesh); !why.empty()) fail(why);
    const int m = mesh.world(), rank = launch_->rank();
    const bool in_mesh = rank < m;
    std::unique_ptr<RankContext>& ctx = worlds_[m];
    std::optional<std::string> error;
    try {
      if (!ctx) {  // every process runs every case, so all make this world's id together
        const std::string id = launch_->broadcast(rank == 0 ? unique_id_bytes() : std::string(), 0,
                                                  "the NCCL unique id", opt_.timeout_s);
        ctx = std::make_unique<RankContext>();
        ctx->rank = rank;
        ctx->world = m;
        ctx->device = device_;
        ctx->timeout_s = opt_.timeout_s;
        if (in_mesh) ctx->init(unique_id_of(id));
      }
      if (in_mesh) {
        std::unique_ptr<Communicator> comm = nccl::make_nccl_communicator(mesh, *ctx);
        body(*comm);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    // A rank stuck in a collective gives up after timeout_s, so the agreement waits longer than
    // that before the MPI watchdog ends the job.
    const auto first = launch_->first_error(error, in_mesh ? 2 * opt_.timeout_s + 10 : 0);
    if (!first) return;
    if (ctx && !ctx->broken) ctx->abort_all();
    worlds_.erase(m);
    fail("rank ", first->first, ": ", first->second);
  }

  void barrier() override { launch_->barrier("the sweep's barrier", opt_.timeout_s); }
  std::string broadcast(const std::string& s) override { return launch_->broadcast(s, 0, "the sweep's broadcast", opt_.timeout_s); }
  bool any(bool local) override { return launch_->any(local, "the sweep's agreement", opt_.timeout_s); }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return prov_; }

 private:
  RuntimeOptions opt_;
  std::shared_ptr<MpiLaunch> launch_;
  int device_ = -1;                   // this process's GPU
  std::vector<std::string> devices_;  // per launch rank: its GPU ("NVIDIA H200 (bus id)") or "none (...)"
  std::map<int, std::unique_ptr<RankContext>> worlds_;
  std::vector<std::pair<std::string, std::string>> prov_;
};

}  // namespace

namespace detail {

std::unique_ptr<MeshRuntime> make_nccl_runtime(const RuntimeOptions& opt) {
  nccl::set_multicast_env();  // before the first NCCL call
  if (launched_with_ranks()) return std::make_unique<NcclMpiRuntime>(opt, mpi_launch());
  return std::make_unique<NcclThreadRuntime>(opt);
}

}  // namespace detail
}  // namespace fp8moe::sim
