#include "sim/comm/mpi_communicator.hpp"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "reference/error.hpp"

namespace fp8moe::sim::mpi {

void check(int rc, const char* call, int rank, const std::string& ctx) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) std::snprintf(msg, sizeof msg, "error code %d", rc);
  fail("MPI error: rank ", rank, ": ", call, " returned ", msg, " [", ctx, "]");
}

// ---- watchdog ----

Watchdog::Watchdog(int rank, std::string host) : rank_(rank), host_(std::move(host)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Watchdog::Scope::Scope(Watchdog* w, std::string what, double timeout_s, std::string pending) : w_(w) {
  if (!w_) return;
  std::lock_guard<std::mutex> lk(w_->m_);
  // Keep the enclosing scope's watch to restore it (a nested watched call).
  was_armed_ = std::exchange(w_->armed_, true);
  what_ = std::exchange(w_->what_, std::move(what));
  pending_ = std::exchange(w_->pending_, std::move(pending));
  timeout_ = std::exchange(w_->timeout_, timeout_s);
  start_ = std::exchange(w_->start_, std::chrono::steady_clock::now());
}

Watchdog::Scope::~Scope() {
  if (!w_) return;
  std::lock_guard<std::mutex> lk(w_->m_);
  w_->armed_ = was_armed_;
  w_->what_ = std::move(what_);
  w_->pending_ = std::move(pending_);
  w_->timeout_ = timeout_;
  w_->start_ = start_;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lk(m_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(50));
    if (stop_ || !armed_) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (waited < timeout_) continue;
    std::fprintf(stderr,
                 "fp8moe-mpi: rank %d (%s): %s did not finish within %g s (another rank died, stalled or made a "
                 "different call)%s%s; ending the job with MPI_Abort\n",
                 rank_, host_.c_str(), what_.c_str(), timeout_, pending_.empty() ? "" : "; this rank's error: ",
                 pending_.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 124);
    std::_Exit(124);  // MPI_Abort does not return; should it, end this process all the same
  }
}

namespace {

using I64 = std::int64_t;

int as_int(I64 v, const CommCall& call, const Mesh& mesh) {
  if (v < 0 || v > INT_MAX) {
    fail(call.describe(mesh), ": ", v, " bytes in one piece exceed MPI's int count; use smaller shapes");
  }
  return static_cast<int>(v);
}

// A non-null address for empty buffers (some MPI builds check pointers even for count 0).
template <class P>
P nonnull(P p) {
  static std::byte dummy[1];
  return p ? p : reinterpret_cast<P>(dummy);
}

class MpiTransport final : public RankTransport {
 public:
  MpiTransport(const Mesh& mesh, int rank, MPI_Comm mesh_comm, GroupComms& groups, Watchdog& watchdog, double timeout)
      : mesh_(mesh), rank_(rank), mesh_comm_(mesh_comm), groups_(groups), watchdog_(watchdog), timeout_(timeout) {}

  std::string name() const override { return "mpi"; }

  void exchange_headers(std::span<const I64> mine, std::span<I64> all, const CommCall& call) override {
    const int n = static_cast<int>(mine.size());
    auto w = watchdog_.watch(cat(call.describe(mesh_), " (size agreement)"), timeout_);
    check(MPI_Allgather(mine.data(), n, MPI_INT64_T, all.data(), n, MPI_INT64_T, mesh_comm_), "MPI_Allgather", rank_,
          cat(call.describe(mesh_), ", size agreement of ", n, " int64 per rank"));
  }

  void all_gatherv(const Group& g, int me, ConstBytes mine, Bytes recv, std::span<const I64> sizes,
                   const CommCall& call) override {
    const std::size_t n = g.size();
    std::vector<int> counts(n), displs(n);
    I64 off = 0;
    for (std::size_t i = 0; i < n; ++i) {
      counts[i] = as_int(sizes[i], call, mesh_);
      displs[i] = as_int(off, call, mesh_);
      off += sizes[i];
    }
    if (n == 1) {
      if (!mine.empty()) std::memcpy(recv.data(), mine.data(), mine.size());
      return;
    }
    MPI_Comm c = group_comm(g, me, call);
    auto w = watchdog_.watch(cat(call.describe(mesh_), " (MPI_Allgatherv of ", mine.size(), " bytes)"), timeout_);
    check(MPI_Allgatherv(nonnull(mine.data()), counts[static_cast<std::size_t>(me)], MPI_BYTE, nonnull(recv.data()),
                         counts.data(), displs.data(), MPI_BYTE, c),
          "MPI_Allgatherv", rank_, cat(call.describe(mesh_), ", ", mine.size(), " bytes from this rank, ", off, " in all"));
  }

  void all_to_allv(const Group& g, int me, std::span<const ConstBytes> to, std::span<const Bytes> from,
                   const CommCall& call) override {
    const std::size_t n = g.size();
    if (n == 1) {
      if (!to[0].empty()) std::memcpy(from[0].data(), to[0].data(), to[0].size());
      return;
    }
    // Alltoallv wants one buffer each way: pack what goes out, unpack what came in.
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    I64 so = 0, ro = 0;
    for (std::size_t j = 0; j < n; ++j) {
      sc[j] = as_int(static_cast<I64>(to[j].size()), call, mesh_);
      sd[j] = as_int(so, call, mesh_);
      so += static_cast<I64>(to[j].size());
      rc[j] = as_int(static_cast<I64>(from[j].size()), call, mesh_);
      rd[j] = as_int(ro, call, mesh_);
      ro += static_cast<I64>(from[j].size());
    }
    std::vector<std::byte> sbuf(static_cast<std::size_t>(so)), rbuf(static_cast<std::size_t>(ro));
    for (std::size_t j = 0; j < n; ++j) {
      if (!to[j].empty()) std::memcpy(sbuf.data() + sd[j], to[j].data(), to[j].size());
    }
    MPI_Comm c = group_comm(g, me, call);
    {
      auto w = watchdog_.watch(cat(call.describe(mesh_), " (MPI_Alltoallv, ", so, " bytes out, ", ro, " in)"), timeout_);
      check(MPI_Alltoallv(nonnull(sbuf.data()), sc.data(), sd.data(), MPI_BYTE, nonnull(rbuf.data()), rc.data(),
                          rd.data(), MPI_BYTE, c),
            "MPI_Alltoallv", rank_, cat(call.describe(mesh_), ", ", so, " bytes out, ", ro, " bytes in"));
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!from[i].empty()) std::memcpy(from[i].data(), rbuf.data() + rd[i], from[i].size());
    }
  }

  void broadcast(const Group& g, int me, int root, Bytes buf, const CommCall& call) override {
    if (g.size() == 1) return;
    const int count = as_int(static_cast<I64>(buf.size()), call, mesh_);
    MPI_Comm c = group_comm(g, me, call);
    auto w = watchdog_.watch(cat(call.describe(mesh_), " (MPI_Bcast of ", buf.size(), " bytes)"), timeout_);
    check(MPI_Bcast(nonnull(buf.data()), count, MPI_BYTE, root, c), "MPI_Bcast", rank_,
          cat(call.describe(mesh_), ", ", buf.size(), " bytes from position ", root));
  }

  void copy(Bytes dst, ConstBytes src) override {
    if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
  }

 private:
  // The group's communicator (rank i = member i), created by the members on first use.
  MPI_Comm group_comm(const Group& g, int me, const CommCall& call) {
    auto it = groups_.comms.find(g);
    if (it != groups_.comms.end()) return it->second;
    MPI_Group all = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
    check(MPI_Comm_group(mesh_comm_, &all), "MPI_Comm_group", rank_, call.describe(mesh_));
    check(MPI_Group_incl(all, static_cast<int>(g.size()), g.data(), &sub), "MPI_Group_incl", rank_, call.describe(mesh_));
    // The tag keeps concurrent creations of different groups apart (members create in the same order).
    std::uint32_t h = 2166136261u;
    for (int r : g) h = (h ^ static_cast<std::uint32_t>(r)) * 16777619u;
    const int tag = static_cast<int>(h % 30000u) + 1;
    MPI_Comm c = MPI_COMM_NULL;
    {
      auto w = watchdog_.watch(cat(call.describe(mesh_), " (MPI_Comm_create_group)"), timeout_);
      check(MPI_Comm_create_group(mesh_comm_, sub, tag, &c), "MPI_Comm_create_group", rank_,
            cat(call.describe(mesh_), ", member ", me));
    }
    MPI_Group_free(&sub);
    MPI_Group_free(&all);
    check(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", rank_, call.describe(mesh_));
    groups_.comms.emplace(g, c);
    return c;
  }

  const Mesh mesh_;  // a copy: for the messages
  int rank_;
  MPI_Comm mesh_comm_;
  GroupComms& groups_;
  Watchdog& watchdog_;
  double timeout_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const Mesh& mesh, int rank, MPI_Comm mesh_comm, GroupComms& groups,
                                                    Watchdog& watchdog, double timeout_s) {
  return std::make_unique<RankCommunicator>(
      mesh, rank, std::make_unique<MpiTransport>(mesh, rank, mesh_comm, groups, watchdog, timeout_s));
}

}  // namespace fp8moe::sim::mpi
