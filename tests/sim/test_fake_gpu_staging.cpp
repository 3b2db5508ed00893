// The fake-gpu staging term of a case's device-memory estimate (cuda_case_device_bytes().comm,
// sim/backend/cuda_backend.hpp) against what the case's collectives would stage, on the CPU: a
// metering communicator wraps FakeCommunicator and, for every call, adds up the device images
// CudaFakeCommunicator would stage for host buffers (sim/comm/cuda_fake_communicator.cpp: every
// buffer rounded up to 256 bytes; the reductions' result image and tables), then rounds the
// largest call up to the arena's 1 MiB grain. Every layer plan and op scenario below, with square
// and non-square dims, ragged groups and fp8 dispatch, must stay within the estimate; the GPU
// suite (test_cuda_fake_comm) checks the real arena against it on the device.
//
// Label sim (no device needed). Built only with CUDA (the estimate lives in the CUDA backend).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "reference/error.hpp"
#include "sim/backend/backend.hpp"
#include "sim/backend/cuda_backend.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/runner/op_runner.hpp"
#include "fake_gpu_shapes.hpp"
#include "support/test_support.hpp"

namespace fp8moe::sim {
namespace {

constexpr std::size_t kAlign = 256, kGrain = std::size_t{1} << 20;
constexpr std::size_t kChunkDesc = 32;  // sizeof(kernels::CommReduceChunk): offset, count, out, owner

std::size_t up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// FakeCommunicator's results and stats; records the largest staging need of any call.
class StagingMeter final : public Communicator {
 public:
  explicit StagingMeter(const Mesh& m) : Communicator(m), inner_(m) {}
  std::vector<int> local_ranks() const override { return inner_.local_ranks(); }
  bool is_local(int r) const override { return inner_.is_local(r); }
  std::string name() const override { return "staging-meter"; }

  void all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) override {
    std::size_t need = 0;
    for (const auto& s : send) need += up(s.size(), kAlign);
    for (const auto& r : recv) need += up(r.size(), kAlign);
    meter("all_gather", need);
    inner_.all_gather(g, send, recv);
    sync();
  }
  void all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                  const std::vector<std::vector<Bytes>>& recv) override {
    std::size_t need = 0;
    for (const auto& row : send) {
      for (const auto& s : row) need += up(s.size(), kAlign);
    }
    for (const auto& row : recv) {
      for (const auto& r : row) need += up(r.size(), kAlign);
    }
    meter("all_to_all", need);
    inner_.all_to_all(g, send, recv);
    sync();
  }
  void broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) override {
    std::size_t need = 0;
    for (const auto& b : bufs) need += up(b.size(), kAlign);
    meter("broadcast", need);
    inner_.broadcast(g, root_pos, bufs);
    sync();
  }
  void reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                      std::span<const std::int64_t> counts, const ReduceOptions& opt) override {
    std::size_t need = tables(g.size());
    for (const auto& s : send) need += up(s.size_bytes(), kAlign);
    for (const auto& r : recv) need += up(r.size_bytes(), kAlign);
    meter("reduce_scatter", need);
    inner_.reduce_scatter(g, send, recv, counts, opt);
    sync();
  }
  void all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) override {
    std::size_t need = tables(g.size()) + up(inout.empty() ? 0 : inout[0].size_bytes(), kAlign);
    for (const auto& b : inout) need += up(b.size_bytes(), kAlign);
    meter("all_reduce", need);
    inner_.all_reduce(g, inout, opt);
    sync();
  }

  std::size_t arena() const { return up(max_need_, kGrain); }
  const std::string& largest_call() const { return largest_; }

 private:
  static std::size_t tables(std::size_t n) { return up(up(n * sizeof(void*), 8) + n * kChunkDesc, kAlign); }
  void meter(const char* what, std::size_t need) {
    if (need > max_need_) {
      max_need_ = need;
      largest_ = cat(what, " staging ", need, " bytes");
    }
  }
  void sync() { stats_ = inner_.stats(); }

  FakeCommunicator inner_;
  std::size_t max_need_ = 0;
  std::string largest_;
};

struct PlanCase {
  const char* mesh;
  const char* plan;
  GatherDtype gather;
  bool fp8_dispatch;
};

const std::vector<PlanCase> kPlans{
    {"dp=2", "fsdp", GatherDtype::bf16, false},          {"dp=2", "fsdp", GatherDtype::fp8, false},
    {"dp=4", "fsdp", GatherDtype::bf16, false},          {"tp=2", "tp", GatherDtype::bf16, false},
    {"tp=4", "tp", GatherDtype::bf16, false},            {"ep=2", "ep", GatherDtype::bf16, false},
    {"ep=2", "ep", GatherDtype::bf16, true},             {"dp=2", "dp", GatherDtype::bf16, false},
    {"dp=2,tp=2", "fsdp+tp", GatherDtype::bf16, false},  {"dp=2,tp=2", "fsdp+tp", GatherDtype::fp8, false},
    {"dp=2,ep=2", "dp+ep", GatherDtype::bf16, false},    {"dp=2,ep=2", "dp+ep", GatherDtype::bf16, true},
};

struct Dims {
  std::int64_t experts, tokens, dim, hidden;
  std::vector<std::int32_t> offs;
};
const std::vector<Dims> kDims{
    {2, 512, 256, 256, {256, 512}},
    {3, 500, 256, 256, {129, 384, 500}},
    {4, 512, 256, 512, {100, 256, 256, 512}},  // an empty expert, hidden > dim
    {2, 384, 512, 128, {200, 384}},            // dim > hidden
};

TEST_CASE("fake-gpu staging: every layer plan's largest collective is within the case's estimate") {
  std::uint64_t salt = 900;
  for (const PlanCase& p : kPlans) {
    for (const Dims& d : kDims) {
      CaseSpec c;
      c.seed = test::seed_for(salt++);
      c.mesh = p.mesh;
      c.plan = p.plan;
      c.fsdp_gather = p.gather;
      c.fp8_dispatch = p.fp8_dispatch;
      c.experts = d.experts;
      c.tokens = d.tokens;
      c.dim = d.dim;
      c.hidden = d.hidden;
      c.offs = d.offs;
      c.gemm.mode = Mode::promote_fp32;
      c.gemm.pad = true;
      CAPTURE(std::string(p.mesh));
      CAPTURE(std::string(p.plan));
      CAPTURE(std::string(gather_dtype_name(p.gather)));
      CAPTURE(p.fp8_dispatch);
      CAPTURE(shape_str({d.experts, d.tokens, d.dim, d.hidden}));
      CAPTURE(c.seed);
      const Mesh m = Mesh::parse(c.mesh);
      StagingMeter meter(m);
      run_layer_plan(c, &meter);
      const std::size_t est = cuda_case_device_bytes("cuda-simt", fake_gpu_layer_shape(c, m)).comm;
      CAPTURE(meter.largest_call());
      CHECK(meter.arena() > 0);
      CHECK(meter.arena() <= est);
    }
  }
}

struct OpCase {
  const char* mesh;
  Pass pass;
  const char* lhs;
  const char* rhs;
  OpShape shape;
  std::vector<std::int32_t> offs;
};

const std::vector<OpCase> kOps{
    {"tp=2", Pass::fwd, "S(1)", "S(2)", {2, 512, 512, 256}, {256, 512}},
    {"tp=4", Pass::fwd, "S(1)", "S(2)", {3, 500, 256, 512}, {129, 384, 500}},
    {"tp=2", Pass::dgrad, "S(1)", "S(1)", {2, 512, 256, 512}, {256, 512}},
    {"tp=2", Pass::wgrad, "S(1)", "R", {2, 512, 256, 384}, {256, 512}},
    {"tp=2", Pass::fwd, "R", "S(1)", {2, 512, 512, 256}, {256, 512}},
    {"dp=2,tp=2", Pass::fwd, "R,S(1)", "S(1),S(2)", {3, 500, 512, 256}, {129, 384, 500}},
    {"dp=2,tp=2", Pass::dgrad, "S(1),S(1)", "S(1),S(1)", {2, 512, 256, 512}, {256, 512}},
};

TEST_CASE("fake-gpu staging: op scenarios, direct and redistributed, within the case's estimate") {
  auto be = make_backend("reference");
  std::uint64_t salt = 950;
  for (const OpCase& c : kOps) {
    const Mesh m = Mesh::parse(c.mesh);
    CaseSpec sc;
    sc.mesh = c.mesh;
    sc.pass = c.pass;
    sc.lhs = parse_placements(c.lhs, m.ndim());
    sc.rhs = parse_placements(c.rhs, m.ndim());
    sc.set_op_shape(c.shape);
    sc.offs = c.offs;
    sc.seed = test::seed_for(salt++);
    sc.gemm.mode = Mode::promote_fp32;
    sc.gemm.pad = true;
    CAPTURE(std::string(c.mesh));
    CAPTURE(std::string(pass_name(c.pass)));
    CAPTURE(std::string(c.lhs));
    CAPTURE(std::string(c.rhs));
    CAPTURE(sc.seed);
    StagingMeter meter(m);
    std::string error;
    try {
      run_op(sc, *be, &meter);
    } catch (const Error& e) {
      error = e.what();
    }
    CAPTURE(error);
    REQUIRE(error.empty());  // the op case must run
    CAPTURE(meter.largest_call());
    CHECK(meter.arena() > 0);
    CHECK(meter.arena() <= cuda_case_device_bytes("cuda-simt", fake_gpu_op_shape(sc, m)).comm);
  }
}

}  // namespace
}  // namespace fp8moe::sim
