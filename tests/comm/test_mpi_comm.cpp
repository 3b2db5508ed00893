// The MPI mesh (issue 7), run by ctest under `mpirun -np 4`: every process runs every test case
// in the same order (doctest's file order), as the sweep runs every case on every process.
//   - every collective of the MPI communicator on 1-D meshes of 2 and 4 ranks and on dp=2,tp=2
//     (every group of each dim, the whole mesh, the whole mesh reversed) equals the
//     FakeCommunicator computed on each process for all ranks: buffers bitwise, CommStats equal;
//   - run_op with Partial outputs and run_layer for fsdp, tp, ep, fsdp+tp, dp+ep through the
//     MpiRuntime equal the fake mesh's runs bitwise;
//   - the runtime: launch facts, provenance, a mesh larger than the launch, errors rethrown on
//     every process. (The watchdog ends a stalled job: mpi_probe.cpp, run by check_mpi_abort.cmake.)
// Seeds: rank 0's base seed is broadcast, so every process makes the same data; printed on failure.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>

#include "comm_checks.hpp"
#include "reference/error.hpp"
#include "sim/comm/runtime.hpp"
#include "support/test_support.hpp"

namespace fp8moe::test {
namespace {

using namespace fp8moe::sim;

MeshRuntime& runtime() {
  static std::unique_ptr<MeshRuntime> rt = [] {
    RuntimeOptions o;
    o.timeout_s = 300;  // generous for 4 processes on 2 cores; a stall still ends the job
    return make_mesh_runtime(MeshKind::mpi, o);
  }();
  return *rt;
}

// Rank 0's seed for a test, the same on every process.
std::uint64_t shared_seed(std::uint64_t salt) {
  return std::strtoull(runtime().broadcast(std::to_string(seed_for(salt))).c_str(), nullptr, 10);
}

// Runs `check` on `mesh` through the MPI runtime; this process's log (empty when it sat out).
template <class F>
CheckLog on_mesh(const std::string& mesh, F&& check) {
  CheckLog log;
  runtime().run(Mesh::parse(mesh), [&](Communicator& comm) { check(comm, log); });
  return log;
}

}  // namespace

TEST_CASE("mpi runtime: the launch, its provenance, and a mesh larger than the launch") {
  MeshRuntime& rt = runtime();
  REQUIRE(rt.launch_world() == 4);  // ctest starts this suite with mpirun -np 4
  CHECK(rt.kind() == MeshKind::mpi);
  CHECK(rt.is_root() == (rt.launch_rank() == 0));
  const auto prov = rt.provenance();
  auto value = [&](const std::string& k) {
    for (const auto& [key, v] : prov) {
      if (key == k) return v;
    }
    return std::string("(absent)");
  };
  CHECK(value("mesh_runtime") == "mpi");
  CHECK(value("launch_world") == "4");
  CHECK(value("rank_hosts").rfind("0:", 0) == 0);
  CHECK(value("rank_hosts").find(",3:") != std::string::npos);
  CHECK(value("mpi_version").find("MPI") != std::string::npos);
  CHECK(value("mpi_version").find('\n') == std::string::npos);

  CHECK(rt.cannot_run(Mesh::parse("dp=2,tp=2")) == "");
  CHECK(rt.cannot_run(Mesh::parse("tp=2")) == "");
  CHECK(rt.cannot_run(Mesh::parse("dp=4,tp=2")) == "mesh dp=4,tp=2 needs 8 ranks, mpirun started 4");
  CHECK_THROWS_WITH_AS(rt.run(Mesh::parse("dp=4,tp=2"), [](Communicator&) {}),
                       "mesh dp=4,tp=2 needs 8 ranks, mpirun started 4", Error);

  // The launch-wide helpers.
  const std::string got = rt.broadcast(rt.is_root() ? "from the root" : "not this");
  CHECK(got == "from the root");
  CHECK(rt.any(rt.launch_rank() == 3));
  CHECK_FALSE(rt.any(false));
  rt.barrier();
}

TEST_CASE("mpi communicator: every collective equals the fake mesh, bitwise, CommStats too") {
  for (const std::string mesh : {"tp=2", "tp=4", "dp=2,tp=2"}) {
    const std::uint64_t seed = shared_seed(701);
    CAPTURE(mesh);
    CAPTURE(seed);
    bool ran = false;
    const CheckLog log = on_mesh(mesh, [&](Communicator& comm, CheckLog& l) {
      ran = true;
      CHECK(comm.name() == "mpi");
      CHECK(comm.local_ranks() == std::vector<int>{runtime().launch_rank()});
      check_collectives(comm, seed, l);
      check_size_errors(comm, l);
    });
    CHECK(ran == (runtime().launch_rank() < Mesh::parse(mesh).world()));
    INFO(log.summary());
    CHECK(log.problems.empty());
    if (ran) CHECK(log.calls > 50);
    // With four members the data tells the ring order from the ascending one: a wrong order fails.
    if (ran && mesh == "tp=4") CHECK(log.order_sensitive > 0);
  }
}

TEST_CASE("mpi runtime: run_op with Partial outputs equals the fake mesh bitwise") {
  for (const std::string mesh : {"tp=2", "tp=4", "dp=2,tp=2"}) {
    const std::uint64_t seed = shared_seed(702);
    CAPTURE(mesh);
    CAPTURE(seed);
    const CheckLog log = on_mesh(mesh, [&](Communicator& comm, CheckLog& l) { check_op_runs(comm, seed, l); });
    INFO(log.summary());
    CHECK(log.problems.empty());
  }
}

TEST_CASE("mpi runtime: layer plans equal the fake mesh bitwise") {
  const std::pair<std::string, std::string> cases[] = {
      {"fsdp", "dp=4"}, {"tp", "tp=4"}, {"ep", "ep=4"}, {"fsdp+tp", "dp=2,tp=2"}, {"dp+ep", "dp=2,ep=2"}, {"dp", "dp=2"}};
  for (const auto& [plan, mesh] : cases) {
    const std::uint64_t seed = shared_seed(703);
    CAPTURE(plan);
    CAPTURE(mesh);
    CAPTURE(seed);
    const CheckLog log = on_mesh(mesh, [&](Communicator& comm, CheckLog& l) { check_layer_run(comm, plan, seed, l); });
    INFO(log.summary());
    CHECK(log.problems.empty());
  }
}

TEST_CASE("mpi runtime: an error is rethrown on every process with the rank that raised it") {
  MeshRuntime& rt = runtime();
  const int me = rt.launch_rank();
  // The same error on every rank of the mesh (ranks 2 and 3 sit the case out and rethrow it too).
  CHECK_THROWS_WITH_AS(rt.run(Mesh::parse("tp=2"), [](Communicator&) { fail("bad shape on every rank"); }),
                       "rank 0: bad shape on every rank", Error);
  // One rank only, with no collective pending: the others finish, then learn it.
  CHECK_THROWS_WITH_AS(rt.run(Mesh::parse("tp=4"),
                              [&](Communicator&) {
                                if (me == 2) fail("only rank 2 failed");
                              }),
                       "rank 2: only rank 2 failed", Error);
  // A size error inside a collective is raised by every member at once (no hang), then rethrown.
  CHECK_THROWS_WITH_AS(rt.run(Mesh::parse("tp=2"),
                              [&](Communicator& comm) {
                                std::vector<std::byte> s(4), r(me == 1 ? 7 : 8);
                                std::vector<ConstBytes> send(2);
                                std::vector<Bytes> recv(2);
                                send[static_cast<std::size_t>(me)] = s;
                                recv[static_cast<std::size_t>(me)] = r;
                                comm.all_gather({0, 1}, send, recv);
                              }),
                       "rank 0: all_gather: rank 1 receives into 7 bytes, needs 8", Error);
  // And the runtime still runs cases.
  int ran = 0;
  rt.run(Mesh::parse("tp=4"), [&](Communicator& comm) {
    std::vector<float> v{1.0f};
    std::vector<Floats> io(4);
    io[static_cast<std::size_t>(me)] = v;
    comm.all_reduce({0, 1, 2, 3}, io, {});
    ran = v[0] == 4.0f ? 1 : -1;
  });
  CHECK(ran == 1);
}

}  // namespace fp8moe::test
