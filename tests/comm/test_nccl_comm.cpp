// The NCCL mesh (issue 7) in its one-process mode: one thread per GPU, no launcher. Exits 77
// (Skipped) without a GPU (gpu_gate.cpp). On a GPU machine it checks the NCCL communicator at
// world size 1 and on every visible GPU count up to 4 against the FakeCommunicator: every
// collective bitwise and CommStats equal (host and device buffers), run_op and layer plans
// bitwise, errors rethrown with the rank, a stalled rank ended by the timeout.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm_checks.hpp"
#include "kernels/check.hpp"
#include "reference/error.hpp"
#include "sim/comm/runtime.hpp"
#include "support/test_support.hpp"

namespace fp8moe::test {
namespace {

using namespace fp8moe::sim;

std::unique_ptr<MeshRuntime> nccl_runtime(double timeout_s) {
  RuntimeOptions o;
  o.timeout_s = timeout_s;
  return make_mesh_runtime(MeshKind::nccl, o);
}

// The meshes this machine's GPUs hold: world 1, then 2, 3, 4 ranks as far as the GPUs go.
std::vector<std::string> meshes() {
  const int n = kernels::cuda_device_count();
  std::vector<std::string> m{"tp=1"};
  if (n >= 2) m.push_back("tp=2");
  if (n >= 3) m.push_back("tp=3");
  if (n >= 4) {
    m.push_back("tp=4");
    m.push_back("dp=2,tp=2");
  }
  return m;
}

DeviceMemory device_memory() {
  DeviceMemory m;
  m.alloc = [](std::size_t n) {
    void* p = nullptr;
    FP8MOE_CUDA_CHECK(cudaMalloc(&p, n), n, " bytes");
    return p;
  };
  m.release = [](void* p) { cudaFree(p); };
  m.to_device = [](void* d, const void* h, std::size_t n) { FP8MOE_CUDA_CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice)); };
  m.to_host = [](void* h, const void* d, std::size_t n) { FP8MOE_CUDA_CHECK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)); };
  return m;
}

// Runs `check` on every rank's thread; the logs merged.
template <class F>
CheckLog on_mesh(MeshRuntime& rt, const std::string& mesh, F&& check) {
  CheckLog all;
  std::mutex m;
  rt.run(Mesh::parse(mesh), [&](Communicator& comm) {
    CheckLog log;
    check(comm, log);
    std::lock_guard<std::mutex> lk(m);
    all.merge(log);
  });
  return all;
}

}  // namespace

TEST_CASE("nccl runtime (one thread per GPU): launch facts, provenance, a mesh larger than the GPUs") {
  auto rt = nccl_runtime(120);
  CHECK(rt->kind() == MeshKind::nccl);
  CHECK(rt->launch_world() == 1);
  std::string version, devices;
  for (const auto& [k, v] : rt->provenance()) {
    if (k == "nccl_version") version = v;
    if (k == "rank_devices") devices = v;
  }
  MESSAGE("nccl ", version, ", devices ", devices);
  CHECK(version.find('.') != std::string::npos);
  CHECK(devices.rfind("0:", 0) == 0);
  const int n = kernels::cuda_device_count();
  const std::string big = "tp=" + std::to_string(n + 1);
  CHECK(rt->cannot_run(Mesh::parse(big)).find("needs " + std::to_string(n + 1) + " GPUs") != std::string::npos);
  CHECK_THROWS_AS(rt->run(Mesh::parse(big), [](Communicator&) {}), Error);
  CHECK(rt->cannot_run(Mesh::parse("tp=1")) == "");
}

TEST_CASE("nccl communicator: every collective equals the fake mesh, bitwise, host and device buffers") {
  auto rt = nccl_runtime(120);
  for (const std::string& mesh : meshes()) {
    const std::uint64_t seed = seed_for(801);
    CAPTURE(mesh);
    CAPTURE(seed);
    const CheckLog log = on_mesh(*rt, mesh, [&](Communicator& comm, CheckLog& l) {
      check_collectives(comm, seed, l);
      check_size_errors(comm, l);
      check_device_buffers(comm, seed + 1, device_memory(), l);
    });
    INFO(log.summary());
    CHECK(log.problems.empty());
    CHECK(log.calls > 20);
    if (Mesh::parse(mesh).world() >= 3) CHECK(log.order_sensitive > 0);
  }
}

TEST_CASE("nccl runtime: run_op and layer plans equal the fake mesh bitwise") {
  auto rt = nccl_runtime(120);
  for (const std::string& mesh : meshes()) {
    const std::uint64_t seed = seed_for(802);
    CAPTURE(mesh);
    CAPTURE(seed);
    const CheckLog ops = on_mesh(*rt, mesh, [&](Communicator& comm, CheckLog& l) { check_op_runs(comm, seed, l); });
    INFO(ops.summary());
    CHECK(ops.problems.empty());
    const Mesh m = Mesh::parse(mesh);
    const std::string plan = m.ndim() == 2 ? "fsdp+tp" : "tp";
    const CheckLog layer = on_mesh(*rt, mesh, [&](Communicator& comm, CheckLog& l) { check_layer_run(comm, plan, seed, l); });
    INFO(layer.summary());
    CHECK(layer.problems.empty());
  }
}

TEST_CASE("nccl runtime: errors are rethrown with the rank, and a stalled rank ends by the timeout") {
  auto rt = nccl_runtime(120);
  const int n = kernels::cuda_device_count();
  const std::string mesh = n >= 2 ? "tp=2" : "tp=1";
  CHECK_THROWS_WITH_AS(rt->run(Mesh::parse(mesh), [](Communicator&) { fail("bad shape on every rank"); }),
                       "rank 0: bad shape on every rank", Error);
  // A size error inside a collective: raised on every rank at once, then rethrown.
  CHECK_THROWS_WITH_AS(rt->run(Mesh::parse("tp=1"),
                               [](Communicator& comm) {
                                 std::vector<std::byte> s(4), r(3);
                                 std::vector<ConstBytes> send{ConstBytes(s)};
                                 std::vector<Bytes> recv{Bytes(r)};
                                 comm.all_gather({0}, send, recv);
                               }),
                       "rank 0: all_gather: rank 0 receives into 3 bytes, needs 4", Error);
  // The runtime makes new communicators after a failed case.
  float got = 0;
  rt->run(Mesh::parse("tp=1"), [&](Communicator& comm) {
    std::vector<float> v{2.5f};
    std::vector<Floats> io{Floats(v)};
    comm.all_reduce({0}, io, {});
    got = v[0];
  });
  CHECK(got == 2.5f);
  if (n < 2) {
    MESSAGE("one GPU: the stalled-rank timeout needs two ranks and is not run here");
    return;
  }
  auto quick = nccl_runtime(2);
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    quick->run(Mesh::parse("tp=2"), [](Communicator& comm) {
      const int me = comm.local_ranks().at(0);
      if (me == 1) std::this_thread::sleep_for(std::chrono::seconds(6));
      std::vector<std::byte> s(4), r(8);
      std::vector<ConstBytes> send(2);
      std::vector<Bytes> recv(2);
      send[static_cast<std::size_t>(me)] = s;
      recv[static_cast<std::size_t>(me)] = r;
      comm.all_gather({0, 1}, send, recv);
    });
  } catch (const Error& e) {
    msg = e.what();
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(msg);
  CHECK(msg.find("rank 0: ") == 0);
  CHECK(msg.find("all_gather on group [0,1]") != std::string::npos);
  CHECK(msg.find("did not finish within 2 s") != std::string::npos);
  CHECK(dt < 20);
}

}  // namespace fp8moe::test
