// Op-level scenarios on fake meshes (issue 3 items 6 and 9, reference/SPEC.md 9.3): the bitwise identities
// of sharded passes, the contraction's Partial sums, misaligned shards and their floors, and every
// enumerated placement run end to end.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "reference/datagen.hpp"
#include "sim/backend/backend.hpp"
#include "sim/rules/enumerate.hpp"
#include "sim/runner/op_runner.hpp"
#include "support/test_support.hpp"

namespace fp8moe::sim {
namespace {

using fp8moe::test::seed_for;

// Op floors vs the reference (SPEC.md 9.1), held here against hp64.
double floor_db(Pass p) { return p == Pass::fwd ? 27.0 : 26.0; }

CaseSpec scenario(const char* mesh, Pass p, const char* lhs, const char* rhs, OpShape shape,
                    std::vector<std::int32_t> offs, std::uint64_t seed, Mode mode = Mode::promote_fp32) {
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
  // Token-group padding where a group is ragged (torchao's padded case offs [129,384,500]).
  std::int32_t start = 0;
  for (std::int32_t end : sc.offs) {
    sc.gemm.pad = sc.gemm.pad || (end - start) % 128 != 0;
    start = end;
  }
  return sc;
}

// The sub-box `box` of a row-major tensor, copied out with this file's own index math.
TensorD slice(const TensorD& x, const std::vector<Range>& box) {
  std::vector<std::int64_t> shape;
  for (const Range& r : box) shape.push_back(r.size());
  TensorD y(shape);
  if (y.numel() == 0) return y;
  if (x.rank() == 2) {
    for (std::int64_t i = 0; i < shape[0]; ++i) {
      for (std::int64_t j = 0; j < shape[1]; ++j) y(i, j) = x(box[0].begin + i, box[1].begin + j);
    }
  } else {
    for (std::int64_t e = 0; e < shape[0]; ++e) {
      for (std::int64_t i = 0; i < shape[1]; ++i) {
        for (std::int64_t j = 0; j < shape[2]; ++j) y(e, i, j) = x(box[0].begin + e, box[1].begin + i, box[2].begin + j);
      }
    }
  }
  return y;
}

// Bitwise equality of two double tensors (their values are bf16 outputs).
bool bitwise(const TensorD& a, const TensorD& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.numel() * sizeof(double)) == 0;
}

// Every rank's local output equals its slice of the single-device output, and so does the gather.
void check_bitwise_sharded(const OpRun& run, int world) {
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    const TensorD& loc = run.local[static_cast<std::size_t>(r)];
    CHECK(bitwise(loc, slice(run.single, run.local_box[static_cast<std::size_t>(r)])));
  }
  CHECK(bitwise(run.out, run.single));
  CHECK(run.report.tensors.at(0).vs_single.bitwise_equal_frac == 1.0);
  CHECK(std::isinf(run.report.tensors.at(0).vs_single.sqnr_db));
}

const OpShape kE3{3, 500, 512, 256};                   // E=3, 500 tokens (torchao's padded case)
const std::vector<std::int32_t> kOffs3{129, 384, 500};
const OpShape kE2{2, 512, 512, 256};
const std::vector<std::int32_t> kOffs2{256, 512};

}  // namespace

TEST_CASE("fwd with W sharded on N (N/tp a multiple of 128) is bitwise single device") {
  auto backend = make_backend("reference");
  for (const char* mesh : {"tp=2", "tp=4"}) {
    for (const auto& [mode, promo] : {std::pair{Mode::promote_fp32, Promotion::deepgemm},
                                      std::pair{Mode::promote_fp32, Promotion::cublas},
                                      std::pair{Mode::exact, Promotion::deepgemm}}) {
      GemmOptions g;
      g.mode = mode;
      g.promotion = promo;
      for (int c = 0; c < 2; ++c) {
        const std::uint64_t seed = seed_for(100 + c);
        CAPTURE(std::string(mesh));
        CAPTURE(mode_label(g.mode, g.promotion));
        CAPTURE(seed);
        CaseSpec sc = c == 0 ? scenario(mesh, Pass::fwd, "R", "S(1)", kE2, kOffs2, seed, g.mode)
                               : scenario(mesh, Pass::fwd, "R", "S(1)", kE3, kOffs3, seed, g.mode);
        sc.gemm.promotion = g.promotion;
        const OpRun run = run_op(sc, *backend);
        REQUIRE(run.decision.verdict == Verdict::direct);
        CHECK(run.decision.strategy[0] == Strategy::out_feature);
        CHECK(run.report.block_aligned);
        CHECK(run.report.misaligned.empty());
        CHECK(run.report.partial_sums.empty());
        const int tp = Mesh::parse(mesh).world();
        const std::int64_t nl = sc.op_shape().N / tp;
        for (int r = 0; r < tp; ++r) CHECK(run.local_box[static_cast<std::size_t>(r)][1] == Range{r * nl, (r + 1) * nl});
        check_bitwise_sharded(run, tp);
        CHECK(run.report.tensors[0].vs_hp64.sqnr_db >= floor_db(Pass::fwd));
      }
    }
  }
}

TEST_CASE("fwd on a 2-D mesh with W's N split over both dims (128 rows per rank) is bitwise single device") {
  auto backend = make_backend("reference");
  const std::uint64_t seed = seed_for(150);
  CAPTURE(seed);
  const OpRun run = run_op(scenario("dp=2,tp=2", Pass::fwd, "R,R", "S(1),S(1)", kE3, kOffs3, seed), *backend);
  REQUIRE(run.decision.verdict == Verdict::direct);
  CHECK(str(run.decision.out) == "[S(1),S(1)]");
  CHECK(run.report.block_aligned);
  check_bitwise_sharded(run, 4);
}

TEST_CASE("uneven shards (torch.chunk over tp=3) run, are flagged misaligned, and meet the floors") {
  auto backend = make_backend("reference");
  const OpShape s{2, 512, 256, 256};  // 256 over 3: 86, 86, 84
  for (const auto& [p, lhs, rhs] : {std::tuple{Pass::fwd, "R", "S(1)"}, std::tuple{Pass::fwd, "S(1)", "S(2)"},
                                    std::tuple{Pass::dgrad, "S(1)", "S(1)"}, std::tuple{Pass::dgrad, "R", "S(2)"}}) {
    const std::uint64_t seed = seed_for(160);
    CAPTURE(std::string(pass_name(p)));
    CAPTURE(std::string(lhs));
    CAPTURE(std::string(rhs));
    CAPTURE(seed);
    const OpRun run = run_op(scenario("tp=3", p, lhs, rhs, s, kOffs2, seed), *backend);
    CHECK_FALSE(run.report.block_aligned);
    // out-feature: the last rank holds 84 output features; contraction: a Partial of the full output
    CHECK(run.local_box[2][1].size() == (partial_dims(run.decision.out).empty() ? 84 : 256));
    CHECK(run.report.tensors[0].vs_hp64.sqnr_db >= floor_db(p));
  }
}

TEST_CASE("empty shards (torch.chunk of 6 over tp=4 leaves rank 3 nothing) run") {
  auto backend = make_backend("reference");
  const std::uint64_t seed = seed_for(170);
  CAPTURE(seed);
  // fwd out-feature: rank 3 holds no output features; dgrad contraction: rank 3 contracts over
  // nothing and contributes a zero partial.
  const OpRun fwd = run_op(scenario("tp=4", Pass::fwd, "R", "S(1)", {2, 256, 6, 256}, {128, 256}, seed), *backend);
  CHECK(fwd.local[3].numel() == 0);
  CHECK(fwd.out.shape == std::vector<std::int64_t>{256, 6});
  CHECK(fwd.report.tensors[0].vs_hp64.nonfinite == 0);
  CHECK(std::isfinite(fwd.report.tensors[0].vs_hp64.sqnr_db));
  const OpRun dg = run_op(scenario("tp=4", Pass::dgrad, "S(1)", "S(1)", {2, 256, 6, 256}, {128, 256}, seed), *backend);
  REQUIRE(dg.local[3].shape == std::vector<std::int64_t>{256, 256});
  bool zeros = true;
  for (double v : dg.local[3].data) zeros = zeros && v == 0.0;
  CHECK(zeros);
  CHECK(dg.report.tensors[0].vs_hp64.nonfinite == 0);
  CHECK(std::isfinite(dg.report.tensors[0].vs_hp64.sqnr_db));
}

TEST_CASE("wgrad with dW sharded on N or on K is bitwise single device") {
  auto backend = make_backend("reference");
  // N = 384 over tp=2 leaves 192 features per rank: wgrad quantizes along tokens only, so its blocks
  // still coincide with the single device's.
  const OpShape s{3, 500, 384, 512};
  for (const char* mesh : {"tp=2", "tp=4"}) {
    for (const char* which : {"N", "K"}) {
      for (Mode mode : {Mode::promote_fp32, Mode::exact}) {
        const std::uint64_t seed = seed_for(200);
        CAPTURE(std::string(mesh));
        CAPTURE(std::string(which));
        CAPTURE(std::string(mode_name(mode)));
        CAPTURE(seed);
        const bool n = std::string(which) == "N";
        const OpRun run = run_op(scenario(mesh, Pass::wgrad, n ? "S(1)" : "R", n ? "R" : "S(1)", s, kOffs3, seed, mode),
                                 *backend);
        REQUIRE(run.decision.verdict == Verdict::direct);
        CHECK(run.decision.strategy[0] == (n ? Strategy::wgrad_n : Strategy::wgrad_k));
        CHECK(str(run.decision.out) == (n ? "[S(1)]" : "[S(2)]"));
        CHECK(run.report.block_aligned);
        check_bitwise_sharded(run, Mesh::parse(mesh).world());
        CHECK(run.report.tensors[0].vs_hp64.sqnr_db >= floor_db(Pass::wgrad));
      }
    }
  }
}

TEST_CASE("dgrad with the contraction sharded: local partials bitwise, reduced >= 35 dB vs single device") {
  auto backend = make_backend("reference");
  for (const char* mesh : {"tp=2", "tp=4"}) {
    for (const ReduceOptions& reduce : {ReduceOptions{ReduceOrder::ascending, ReduceDtype::fp32},
                                        ReduceOptions{ReduceOrder::ring, ReduceDtype::fp32},
                                        ReduceOptions{ReduceOrder::ring, ReduceDtype::bf16}}) {
      const std::uint64_t seed = seed_for(300);
      CAPTURE(std::string(mesh));
      CAPTURE(std::string(reduce_order_name(reduce.order)));
      CAPTURE(std::string(reduce_dtype_name(reduce.dtype)));
      CAPTURE(seed);
      CaseSpec sc = scenario(mesh, Pass::dgrad, "S(1)", "S(1)", kE3, kOffs3, seed);
      sc.reduce = reduce;
      const OpRun run = run_op(sc, *backend);
      REQUIRE(run.decision.verdict == Verdict::direct);
      CHECK(run.decision.strategy[0] == Strategy::contraction);
      CHECK(str(run.decision.out) == "[P]");
      CHECK(run.report.block_aligned);
      REQUIRE(run.report.partial_sums.size() == 1);
      CHECK(run.report.partial_sums[0].find("rounded to bf16") != std::string::npos);
      CHECK(run.report.partial_sums[0].find(std::string("summed in ") + reduce_dtype_name(reduce.dtype)) !=
            std::string::npos);
      CHECK(run.report.partial_sums[0].find(reduce_order_name(reduce.order)) != std::string::npos);
      CHECK(run.report.comm_bytes_max_rank > 0);
      // Each rank's partial, computed alone: dOut columns and W rows [r*N/tp, (r+1)*N/tp), sliced
      // here from freshly generated global inputs.
      const int tp = Mesh::parse(mesh).world();
      const TensorF dout = generate({kE3.M, kE3.N}, sc.dist, seed, kTensorGradOut);
      const TensorF w = generate({kE3.E, kE3.N, kE3.K}, sc.dist, seed, kTensorW);
      const std::int64_t nl = kE3.N / tp;
      for (int r = 0; r < tp; ++r) {
        CAPTURE(r);
        TensorF dl({kE3.M, nl}), wl({kE3.E, nl, kE3.K});
        for (std::int64_t m = 0; m < kE3.M; ++m) {
          for (std::int64_t j = 0; j < nl; ++j) dl(m, j) = dout(m, r * nl + j);
        }
        for (std::int64_t e = 0; e < kE3.E; ++e) {
          for (std::int64_t j = 0; j < nl; ++j) {
            for (std::int64_t k = 0; k < kE3.K; ++k) wl(e, j, k) = w(e, r * nl + j, k);
          }
        }
        const TensorD alone = backend->dgrad(dl, wl, sc.offs, sc.gemm);
        CHECK(bitwise(run.local[static_cast<std::size_t>(r)], alone));
      }
      CHECK(run.report.tensors[0].vs_single.sqnr_db >= 35.0);
      CHECK(run.report.tensors[0].vs_hp64.sqnr_db >= floor_db(Pass::dgrad));
    }
  }
}

TEST_CASE("a misaligned shard (hidden 384 over tp=2) is flagged and still meets the floors") {
  auto backend = make_backend("reference");
  struct Case {
    Pass pass;
    const char *lhs, *rhs;
    OpShape shape;
  };
  const Case cases[] = {
      {Pass::fwd, "R", "S(1)", {2, 512, 384, 256}},     // W rows 192 per rank
      {Pass::fwd, "S(1)", "S(2)", {2, 512, 256, 384}},  // the contraction 192 per rank
      {Pass::dgrad, "R", "S(2)", {2, 512, 256, 384}},   // dA features 192 per rank
      {Pass::dgrad, "S(1)", "S(1)", {2, 512, 384, 256}},
  };
  for (const Case& c : cases) {
    for (Mode mode : {Mode::promote_fp32, Mode::torchao_emulated}) {
      const std::uint64_t seed = seed_for(400);
      CAPTURE(std::string(pass_name(c.pass)));
      CAPTURE(std::string(c.lhs));
      CAPTURE(std::string(c.rhs));
      CAPTURE(std::string(mode_name(mode)));
      CAPTURE(seed);
      const OpRun run = run_op(scenario("tp=2", c.pass, c.lhs, c.rhs, c.shape, kOffs2, seed, mode), *backend);
      CHECK_FALSE(run.report.block_aligned);
      CHECK_FALSE(run.report.tensors[0].block_aligned);
      REQUIRE_FALSE(run.report.misaligned.empty());
      CHECK(run.report.misaligned[0].find("192") != std::string::npos);
      CHECK(run.report.tensors[0].vs_hp64.nonfinite == 0);
      CHECK(run.report.tensors[0].vs_hp64.sqnr_db >= floor_db(c.pass));
    }
  }
}

TEST_CASE("a Partial input is reduced first, then runs as the contraction") {
  auto backend = make_backend("reference");
  const std::uint64_t seed = seed_for(500);
  CAPTURE(seed);
  const OpRun run = run_op(scenario("tp=2", Pass::fwd, "P", "R", kE2, kOffs2, seed), *backend);
  CHECK(run.decision.verdict == Verdict::redistribute);
  CHECK(run.decision.strategy[0] == Strategy::contraction);
  CHECK(run.report.comm_bytes_max_rank > 0);
  CHECK_FALSE(run.report.notes.empty());
  CHECK(run.report.tensors[0].vs_hp64.sqnr_db >= floor_db(Pass::fwd));
  // Rejected placements throw with the rules' reason.
  CHECK_THROWS_WITH_AS(run_op(scenario("tp=2", Pass::fwd, "S(0)", "R", kE2, kOffs2, seed), *backend),
                       doctest::Contains("dp plan"), Error);
}

TEST_CASE("every enumerated placement runs and meets the floors vs hp64") {
  auto backend = make_backend("reference");
  const OpShape s{2, 256, 256, 256};
  const std::vector<std::int32_t> offs{128, 256};
  for (const char* mesh : {"tp=2", "dp=2,tp=2"}) {
    const Mesh m = Mesh::parse(mesh);
    for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      const Enumeration en = enumerate_op(p, s, m);
      // Every direct case runs; the redistributed ones too on the 1-D mesh (on the 2-D mesh their
      // targets are direct cases run here, and test_rules checks the plans), to keep the suite short.
      const bool run_redistributed = m.ndim() == 1;
      int ran = 0;
      for (const EnumeratedCase& c : en.cases) {
        if (c.decision.verdict == Verdict::reject) {
          CHECK_FALSE(c.decision.reason.empty());
          continue;
        }
        if (c.decision.verdict == Verdict::redistribute && !run_redistributed) continue;
        const std::uint64_t seed = seed_for(600 + static_cast<std::uint64_t>(ran));
        CAPTURE(std::string(mesh));
        CAPTURE(std::string(pass_name(p)));
        CAPTURE(str(c.lhs));
        CAPTURE(str(c.rhs));
        CAPTURE(seed);
        CaseSpec sc;
        sc.mesh = mesh;
        sc.pass = p;
        sc.lhs = c.lhs;
        sc.rhs = c.rhs;
        sc.set_op_shape(s);
        sc.offs = offs;
        sc.seed = seed;
        const OpRun run = run_op(sc, *backend);
        const TensorReport& t = run.report.tensors.at(0);
        CHECK(std::isfinite(t.vs_hp64.sqnr_db));
        CHECK(t.vs_hp64.sqnr_db >= floor_db(p));
        CHECK(t.vs_hp64.nonfinite == 0);
        if (run.report.block_aligned && partial_dims(run.decision.out).empty()) {
          // Aligned blocks and no Partial sums: nothing can change the numbers.
          CHECK(bitwise(run.out, run.single));
        }
        ++ran;
      }
      CHECK(ran == en.direct + (run_redistributed ? en.redistribute : 0));
    }
  }
}

TEST_CASE("run_op without references (fp8moe check's use) gives the same output bitwise, and no reference passes") {
  auto backend = make_backend("reference");
  const std::uint64_t seed = seed_for(131);
  CAPTURE(seed);
  for (const auto& [mesh, p, lhs, rhs] : {std::tuple{"tp=2", Pass::fwd, "S(1)", "S(2)"}, std::tuple{"tp=2", Pass::dgrad, "R", "S(2)"},
                                          std::tuple{"dp=2,tp=2", Pass::wgrad, "R,S(1)", "R,R"}, std::tuple{"1", Pass::fwd, "", ""}}) {
    CAPTURE(std::string(mesh));
    CAPTURE(pass_name(p));
    const CaseSpec sc = scenario(mesh, p, lhs, rhs, kE3, kOffs3, seed);
    const OpRun full = run_op(sc, *backend);
    const OpRun lean = run_op(sc, *backend, nullptr, {.references = false});
    REQUIRE(full.out.shape == lean.out.shape);
    CHECK(std::memcmp(full.out.data.data(), lean.out.data.data(), full.out.data.size() * sizeof(double)) == 0);
    CHECK(lean.single.numel() == 0);
    CHECK(lean.hp64.numel() == 0);
    CHECK(lean.report.tensors.empty());
    CHECK(full.report.tensors.size() == 1);
  }
}

}  // namespace fp8moe::sim
