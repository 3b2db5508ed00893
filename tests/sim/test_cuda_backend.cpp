// The CUDA backends under the simulator (sim/backend/cuda_backend.hpp): op-level scenarios and
// layer plans run with cuda-simt equal the reference backend bit for bit in promote-fp32 and
// hopper-tc (both families), their GPU hp64 agrees to fp64 rounding, and cuda-cublaslt equals the
// reference hopper-tc:cublas bit for bit at op level. Label gpu (built with tests/kernels' gate):
// exits 77 without a device.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reference/metrics.hpp"
#include "sim/backend/backend.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/runner/op_runner.hpp"
#include "support/test_support.hpp"

namespace fp8moe::sim {
namespace {

bool bitwise(const TensorD& a, const TensorD& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.numel() * sizeof(double)) == 0;
}
bool bitwise(const TensorF& a, const TensorF& b) { return a.shape == b.shape && a.data == b.data; }

CaseSpec scenario(const char* mesh, Pass p, const char* lhs, const char* rhs, OpShape shape,
                    std::vector<std::int32_t> offs, std::uint64_t seed, Promotion promo,
                    Mode mode = Mode::promote_fp32) {
  CaseSpec sc;
  sc.mesh = mesh;
  sc.pass = p;
  const Mesh m = Mesh::parse(mesh);
  sc.lhs = parse_placements(lhs, m.ndim());
  sc.rhs = parse_placements(rhs, m.ndim());
  sc.set_op_shape(shape);
  sc.offs = std::move(offs);
  sc.seed = seed;
  sc.gemm.mode = mode;
  sc.gemm.promotion = promo;
  std::int32_t start = 0;
  for (std::int32_t end : sc.offs) {
    sc.gemm.pad = sc.gemm.pad || (end - start) % 128 != 0;
    start = end;
  }
  return sc;
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
    {"tp=2", Pass::fwd, "R", "S(1)", {3, 500, 512, 256}, {129, 384, 500}},     // out-feature, padded
    {"tp=2", Pass::fwd, "S(1)", "S(2)", {2, 512, 512, 256}, {256, 512}},       // contraction: Partial
    {"tp=2", Pass::dgrad, "S(1)", "S(1)", {2, 512, 256, 512}, {256, 512}},     // contraction
    {"tp=2", Pass::wgrad, "S(1)", "R", {2, 512, 256, 256}, {256, 512}},        // dW on N
    {"dp=2,tp=2", Pass::fwd, "R,R", "S(1),S(1)", {3, 500, 512, 256}, {129, 384, 500}},
};

TEST_CASE("op scenarios on cuda-simt equal the reference backend bitwise: GPU hp64 to fp64 rounding") {
  auto gpu = make_backend("cuda-simt");
  auto cpu = make_backend("reference");
  std::uint64_t n = 0;
  for (const OpCase& c : kOps) {
    for (const auto& [mode, promo] : {std::pair{Mode::promote_fp32, Promotion::deepgemm},
                                      std::pair{Mode::promote_fp32, Promotion::cublas},
                                      std::pair{Mode::hopper_tc, Promotion::deepgemm},
                                      std::pair{Mode::hopper_tc, Promotion::cublas}}) {
      const std::uint64_t seed = test::seed_for(700 + n++);
      CAPTURE(std::string(mode_name(mode)));
      CAPTURE(std::string(c.mesh));
      CAPTURE(std::string(pass_name(c.pass)));
      CAPTURE(std::string(c.lhs));
      CAPTURE(std::string(c.rhs));
      CAPTURE(std::string(promotion_name(promo)));
      CAPTURE(seed);
      const CaseSpec sc = scenario(c.mesh, c.pass, c.lhs, c.rhs, c.shape, c.offs, seed, promo, mode);
      const OpRun want = run_op(sc, *cpu), got = run_op(sc, *gpu);
      CHECK(bitwise(want.single, got.single));
      CHECK(bitwise(want.out, got.out));
      REQUIRE(want.local.size() == got.local.size());
      for (std::size_t r = 0; r < want.local.size(); ++r) {
        CAPTURE(r);
        CHECK(bitwise(want.local[r], got.local[r]));
      }
      CHECK(sqnr_db(want.hp64.data, got.hp64.data) >= 250.0);
    }
  }
}

TEST_CASE("op scenarios on cuda-cublaslt equal the reference hopper-tc:cublas bitwise") {
  auto gpu = make_backend("cuda-cublaslt");
  auto cpu = make_backend("reference");
  std::uint64_t n = 0;
  for (const OpCase& c : kOps) {
    const std::uint64_t seed = test::seed_for(750 + n++);
    CAPTURE(std::string(c.mesh));
    CAPTURE(std::string(pass_name(c.pass)));
    CAPTURE(seed);
    const CaseSpec sc =
        scenario(c.mesh, c.pass, c.lhs, c.rhs, c.shape, c.offs, seed, Promotion::cublas, Mode::hopper_tc);
    const OpRun want = run_op(sc, *cpu), got = run_op(sc, *gpu);
    const Metrics m = compare(want.out.data, got.out.data);
    std::string splits;
    for (const std::int32_t k : gpu->take_splits_seen()) splits += std::to_string(k) + " ";
    std::printf("op %-9s %-5s lhs=%-5s rhs=%-9s cuda-cublaslt vs reference hopper-tc:cublas: bitwise-equal %.6f, "
                "%.2f dB, split-K seen: %s\n",
                c.mesh, pass_name(c.pass), c.lhs, c.rhs, m.bitwise_equal_frac, m.sqnr_db, splits.c_str());
    CHECK(bitwise(want.single, got.single));
    CHECK(bitwise(want.out, got.out));
  }
}

TEST_CASE("layer plans on cuda-simt equal the reference backend bitwise") {
  struct Plan {
    const char* mesh;
    const char* plan;
  };
  std::uint64_t n = 0;
  for (Plan pl : {Plan{"tp=2", "tp"}, Plan{"dp=2", "fsdp"}, Plan{"ep=2", "ep"}}) {
    for (Promotion promo : {Promotion::deepgemm, Promotion::cublas}) {
      CaseSpec c;
      c.seed = test::seed_for(780 + n++);
      c.mesh = pl.mesh;
      c.plan = pl.plan;
      c.experts = 2;
      c.dim = 256;
      c.hidden = 256;
      c.tokens = 512;
      c.offs = {256, 512};
      c.gemm.mode = Mode::promote_fp32;
      c.gemm.promotion = promo;
      c.lr = 0.5f;
      CAPTURE(std::string(pl.plan));
      CAPTURE(std::string(promotion_name(promo)));
      CAPTURE(c.seed);
      const LayerRun want = run_layer_plan(c);
      c.backend = "cuda-simt";
      const LayerRun got = run_layer_plan(c);
      CHECK(bitwise(want.out.y, got.out.y));
      CHECK(bitwise(want.out.dx, got.out.dx));
      CHECK(bitwise(want.out.dw1, got.out.dw1));
      CHECK(bitwise(want.out.dw2, got.out.dw2));
      CHECK(bitwise(want.out.dw3, got.out.dw3));
      CHECK(bitwise(want.out.w1_new, got.out.w1_new));
    }
  }
}

}  // namespace
}  // namespace fp8moe::sim
