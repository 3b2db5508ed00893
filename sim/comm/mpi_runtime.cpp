// The MPI launch and the MPI mesh runtime (--runtime mpi), linked into fp8moe-mpi only. Their
// strong definitions of detail::make_mpi_runtime and detail::mpi_launch replace the re-exec
// stubs of mpi_reexec.cpp (mpi_runtime.hpp says why the linker picks these).
#include "sim/comm/mpi_runtime.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

#include "reference/error.hpp"
#include "sim/comm/mpi_communicator.hpp"
#include "sim/comm/runtime_impl.hpp"

namespace fp8moe::sim {
namespace {

using mpi::check;

bool launcher_env() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MPI_LOCALNRANKS"}) {
    if (const char* s = std::getenv(v); s && *s) return true;
  }
  return false;
}

std::string first_line(std::string s) {
  const std::size_t nl = s.find_first_of("\r\n");
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == ',')) s.pop_back();
  return s;
}

// MPI for the whole process: initialised on first use, finalised at exit. Never destroyed (the
// atexit handler finalises), so that no static destructor runs after MPI_Finalize.
struct MpiEnv {
  int rank = 0, world = 1, local_rank = 0;
  bool singleton = false;
  bool owns_init = false;
  std::vector<std::string> hosts;
  std::string version;
  std::unique_ptr<mpi::Watchdog> watchdog;
  std::map<int, MPI_Comm> mesh_comms;     // per mesh world size: the first M ranks
  std::map<int, mpi::GroupComms> groups;  // per mesh world size

  static MpiEnv& get() {
    static MpiEnv* env = new MpiEnv();
    return *env;
  }

  MpiEnv() {
    singleton = !launcher_env();
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", -1, "startup");
      owns_init = true;
      if (provided < MPI_THREAD_MULTIPLE) {
        // The watchdog calls MPI_Abort from its own thread; MULTIPLE makes that legal.
        std::fprintf(stderr, "fp8moe-mpi: warning: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
      }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    singleton = singleton && world == 1;
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> all(static_cast<std::size_t>(world) * MPI_MAX_PROCESSOR_NAME);
    check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                        MPI_COMM_WORLD),
          "MPI_Allgather", rank, "host names at startup");
    for (int r = 0; r < world; ++r) hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type",
          rank, "local rank at startup");
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    char ver[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    MPI_Get_library_version(ver, &len);
    version = first_line(ver);
    watchdog = std::make_unique<mpi::Watchdog>(rank, hosts[static_cast<std::size_t>(rank)]);
    std::atexit([] {
      MpiEnv& e = get();
      e.watchdog.reset();  // no MPI_Abort from the watchdog once finalising
      int fin = 0;
      MPI_Finalized(&fin);
      if (e.owns_init && !fin) MPI_Finalize();
    });
  }

  // The communicator of the first m ranks (MPI_COMM_NULL on the others); every process calls
  // this for every case, so the cache is the same everywhere.
  MPI_Comm mesh_comm(int m, double timeout_s) {
    auto it = mesh_comms.find(m);
    if (it != mesh_comms.end()) return it->second;
    MPI_Comm c = MPI_COMM_NULL;
    {
      auto w = watchdog->watch(cat("MPI_Comm_split for a mesh of ", m, " ranks"), timeout_s);
      check(MPI_Comm_split(MPI_COMM_WORLD, rank < m ? 0 : MPI_UNDEFINED, rank, &c), "MPI_Comm_split", rank,
            cat("the first ", m, " of ", world, " ranks"));
    }
    if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    mesh_comms.emplace(m, c);
    return c;
  }
};

class MpiLaunchImpl final : public MpiLaunch {
 public:
  MpiLaunchImpl() : env_(MpiEnv::get()) {}
  int world() const override { return env_.world; }
  int rank() const override { return env_.rank; }
  int local_rank() const override { return env_.local_rank; }
  bool singleton() const override { return env_.singleton; }
  const std::vector<std::string>& hosts() const override { return env_.hosts; }

  void barrier(const char* what, double timeout_s) override {
    auto w = env_.watchdog->watch(cat(what, " (MPI_Barrier)"), timeout_s);
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", env_.rank, what);
  }

  std::string broadcast(const std::string& from_root, int root, const char* what, double timeout_s) override {
    auto w = env_.watchdog->watch(cat(what, " (MPI_Bcast from rank ", root, ")"), timeout_s);
    long long n = env_.rank == root ? static_cast<long long>(from_root.size()) : 0;
    check(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD), "MPI_Bcast", env_.rank, cat(what, ", the length"));
    if (n > INT_MAX) fail(what, ": ", n, " bytes to broadcast exceed MPI's int count");
    std::string s = env_.rank == root ? from_root : std::string(static_cast<std::size_t>(n), '\0');
    if (n > 0) {
      check(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast", env_.rank,
            cat(what, ", ", n, " bytes"));
    }
    return s;
  }

  bool any(bool local, const char* what, double timeout_s) override {
    auto w = env_.watchdog->watch(cat(what, " (MPI_Allreduce)"), timeout_s);
    int mine = local ? 1 : 0, all = 0;
    check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce", env_.rank, what);
    return all != 0;
  }

  std::vector<std::string> all_gather(const std::string& mine, const char* what, double timeout_s) override {
    auto w = env_.watchdog->watch(cat(what, " (MPI_Allgatherv)"), timeout_s);
    if (mine.size() > INT_MAX) fail(what, ": ", mine.size(), " bytes exceed MPI's int count");
    const int n = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<std::size_t>(env_.world)), displs(lens.size());
    check(MPI_Allgather(&n, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather", env_.rank, what);
    long long total = 0;
    for (std::size_t r = 0; r < lens.size(); ++r) {
      displs[r] = static_cast<int>(total);
      total += lens[r];
      if (total > INT_MAX) fail(what, ": ", total, " bytes in all exceed MPI's int count");
    }
    std::string buf(static_cast<std::size_t>(total) + 1, '\0');
    char dummy = 0;
    check(MPI_Allgatherv(n ? mine.data() : &dummy, n, MPI_CHAR, buf.data(), lens.data(), displs.data(), MPI_CHAR,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv", env_.rank, what);
    std::vector<std::string> out;
    for (std::size_t r = 0; r < lens.size(); ++r) out.emplace_back(buf.data() + displs[r], static_cast<std::size_t>(lens[r]));
    return out;
  }

  std::optional<std::pair<int, std::string>> first_error(const std::optional<std::string>& error,
                                                         double timeout_s) override {
    int first = INT_MAX;
    {
      auto w = env_.watchdog->watch("the error agreement after a case (MPI_Allreduce)", timeout_s, error.value_or(""));
      int mine = error ? env_.rank : INT_MAX;
      check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce", env_.rank,
            "the error agreement after a case");
    }
    if (first == INT_MAX) return std::nullopt;
    return std::make_pair(first, broadcast(error.value_or(""), first, "the error message of a case", timeout_s));
  }

  std::vector<std::pair<std::string, std::string>> provenance() const override {
    return {{"launch_world", std::to_string(env_.world)}, {"rank_hosts", rank_list(env_.hosts)}, {"mpi_version", env_.version}};
  }

  MpiEnv& env() { return env_; }

 private:
  MpiEnv& env_;
};

std::shared_ptr<MpiLaunchImpl> launch_impl() {
  static std::shared_ptr<MpiLaunchImpl> l = std::make_shared<MpiLaunchImpl>();
  return l;
}

std::string relaunch_hint(int ranks) {
  std::string cmd;
  for (const std::string& a : process_argv()) cmd += " " + a;
  if (cmd.empty()) cmd = " fp8moe ...";
  return cat("start it as mpirun -np ", ranks, cmd);
}

class MpiRuntime final : public MeshRuntime {
 public:
  explicit MpiRuntime(const RuntimeOptions& opt) : launch_(launch_impl()), opt_(opt) {}
  MeshKind kind() const override { return MeshKind::mpi; }
  int launch_world() const override { return launch_->world(); }
  int launch_rank() const override { return launch_->rank(); }

  std::string cannot_run(const Mesh& mesh) const override {
    if (mesh.world() <= launch_->world()) return "";
    if (launch_->singleton()) {
      return cat("mesh ", mesh.str(), " needs ", mesh.world(), " ranks but --runtime mpi was started without a launcher ",
                 "(one process): ", relaunch_hint(mesh.world()));
    }
    return cat("mesh ", mesh.str(), " needs ", mesh.world(), " ranks, mpirun started ", launch_->world());
  }

  void run(const Mesh& mesh, const std::function<void(Communicator&)>& body) override {
    if (const std::string why = cannot_run(mesh); !why.empty()) fail(why);
    MpiEnv& env = launch_->env();
    const int m = mesh.world();
    MPI_Comm mc = env.mesh_comm(m, opt_.timeout_s);
    const bool in_mesh = env.rank < m;
    std::optional<std::string> error;
    if (in_mesh) {
      try {
        std::unique_ptr<Communicator> comm =
            mpi::make_mpi_communicator(mesh, env.rank, mc, env.groups[m], *env.watchdog, opt_.timeout_s);
        body(*comm);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    // A rank that sits the case out waits for as long as the case takes; the mesh's ranks are
    // watched (a mesh rank stuck there means another one never finished).
    const auto first = launch_->first_error(error, in_mesh ? opt_.timeout_s : 0);
    if (first) fail("rank ", first->first, ": ", first->second);
  }

  void barrier() override { launch_->barrier("the sweep's barrier", opt_.timeout_s); }
  std::string broadcast(const std::string& from_root) override {
    return launch_->broadcast(from_root, 0, "the sweep's broadcast", opt_.timeout_s);
  }
  bool any(bool local) override { return launch_->any(local, "the sweep's agreement", opt_.timeout_s); }

  std::vector<std::pair<std::string, std::string>> provenance() const override {
    std::vector<std::pair<std::string, std::string>> p{{"mesh_runtime", "mpi"}};
    for (auto& kv : launch_->provenance()) p.push_back(std::move(kv));
    return p;
  }

 private:
  std::shared_ptr<MpiLaunchImpl> launch_;
  RuntimeOptions opt_;
};

}  // namespace

namespace detail {

std::unique_ptr<MeshRuntime> make_mpi_runtime(const RuntimeOptions& opt) { return std::make_unique<MpiRuntime>(opt); }

std::shared_ptr<MpiLaunch> mpi_launch() { return launch_impl(); }

}  // namespace detail
}  // namespace fp8moe::sim
