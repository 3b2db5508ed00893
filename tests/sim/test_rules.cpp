// Sharding rules of the grouped passes and the quantizers (reference/SPEC.md 10.3, 10.4): each strategy row,
// the rejections, the cheapest redistribution, quantizer placements and block alignment, and the
// enumeration counts.
#include <doctest/doctest.h>

#include "sim/rules/enumerate.hpp"
#include "sim/rules/sharding.hpp"

namespace fp8moe::sim {
namespace {

using P = Placement;

Placements pl(const std::string& s, const Mesh& m) { return parse_placements(s, m.ndim()); }

struct Row {
  Pass pass;
  const char *lhs, *rhs, *out;
  Strategy strategy;
};

}  // namespace

TEST_CASE("every strategy row of the table is taken directly, with its output placement") {
  const Mesh tp = Mesh::parse("tp=2");
  const OpShape s{2, 256, 512, 384};
  // The table of SPEC.md 10.3, written out here (not read from strategy_rows()).
  const Row rows[] = {
      {Pass::fwd, "R", "S(1)", "S(1)", Strategy::out_feature},
      {Pass::fwd, "S(1)", "S(2)", "P", Strategy::contraction},
      {Pass::fwd, "R", "R", "R", Strategy::replicate},
      {Pass::dgrad, "R", "S(2)", "S(1)", Strategy::out_feature},
      {Pass::dgrad, "S(1)", "S(1)", "P", Strategy::contraction},
      {Pass::dgrad, "R", "R", "R", Strategy::replicate},
      {Pass::wgrad, "S(1)", "R", "S(1)", Strategy::wgrad_n},
      {Pass::wgrad, "R", "S(1)", "S(2)", Strategy::wgrad_k},
      {Pass::wgrad, "R", "R", "R", Strategy::replicate},
  };
  for (const Row& r : rows) {
    CAPTURE(std::string(pass_name(r.pass)));
    CAPTURE(std::string(r.lhs));
    CAPTURE(std::string(r.rhs));
    const ShardingDecision d = decide(r.pass, s, pl(r.lhs, tp), pl(r.rhs, tp), tp);
    CHECK(d.verdict == Verdict::direct);
    REQUIRE(d.strategy.size() == 1);
    CHECK(d.strategy[0] == r.strategy);
    CHECK(str(d.out) == str(pl(r.out, tp)));
    CHECK(d.redist_bytes == 0);
    CHECK(d.lhs_plan.empty());
    CHECK(d.rhs_plan.empty());
  }
}

TEST_CASE("strategies compose per mesh dim on a 2-D mesh") {
  const Mesh m = Mesh::parse("dp=2,tp=2");
  const OpShape s{2, 256, 512, 512};
  const ShardingDecision d = decide(Pass::fwd, s, pl("R,S(1)", m), pl("S(1),S(2)", m), m);
  REQUIRE(d.verdict == Verdict::direct);
  CHECK(d.strategy == std::vector<Strategy>{Strategy::out_feature, Strategy::contraction});
  CHECK(str(d.out) == "[S(1),P]");
  CHECK(strategy_str(d.strategy, m) == "dp:out-feature,tp:contraction");
  const ShardingDecision w = decide(Pass::wgrad, s, pl("S(1),R", m), pl("R,S(1)", m), m);
  REQUIRE(w.verdict == Verdict::direct);
  CHECK(str(w.out) == "[S(1),S(2)]");
}

TEST_CASE("token and expert sharding are rejected with their reason") {
  const Mesh tp = Mesh::parse("tp=2");
  const OpShape s{2, 256, 256, 256};
  for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
    CAPTURE(std::string(pass_name(p)));
    const ShardingDecision d = decide(p, s, pl("S(0)", tp), pl("R", tp), tp);
    CHECK(d.verdict == Verdict::reject);
    CHECK(d.reason.find("token sharding needs per-rank routing: use the dp plan") != std::string::npos);
  }
  const ShardingDecision wa = decide(Pass::wgrad, s, pl("R", tp), pl("S(0)", tp), tp);
  CHECK(wa.verdict == Verdict::reject);
  CHECK(wa.reason.find("dp plan") != std::string::npos);
  for (Pass p : {Pass::fwd, Pass::dgrad}) {
    const ShardingDecision d = decide(p, s, pl("R", tp), pl("S(0)", tp), tp);
    CHECK(d.verdict == Verdict::reject);
    CHECK(d.reason.find("EP plan") != std::string::npos);
  }
  // On a 2-D mesh one bad mesh dim is enough, and the reason names it.
  const Mesh m = Mesh::parse("dp=2,tp=2");
  const ShardingDecision d2 = decide(Pass::fwd, s, pl("R,R", m), pl("S(1),S(0)", m), m);
  CHECK(d2.verdict == Verdict::reject);
  CHECK(d2.reason.find("'tp'") != std::string::npos);
  // Malformed lists are errors, not verdicts.
  CHECK_THROWS_AS(decide(Pass::fwd, s, pl("S(2)", tp), pl("R", tp), tp), Error);
  CHECK_THROWS_AS(decide(Pass::fwd, s, pl("R,R", m), pl("R", tp), tp), Error);
}

TEST_CASE("the cheapest redistribution is chosen by bytes") {
  const Mesh tp = Mesh::parse("tp=2");
  SUBCASE("A S(1), W S(1) in fwd: gather the smaller operand") {
    // A (128,256) fp32 half per rank: all-gather sends 128*256/2*4 = 65536 bytes; W (4,512,256) would send 1 MiB.
    const OpShape small_a{4, 128, 512, 256};
    const ShardingDecision d = decide(Pass::fwd, small_a, pl("S(1)", tp), pl("S(1)", tp), tp);
    REQUIRE(d.verdict == Verdict::redistribute);
    CHECK(d.strategy[0] == Strategy::out_feature);
    CHECK(d.redist_bytes == 128 * 256 / 2 * 4);
    CHECK(d.rhs_plan.empty());
    CHECK(d.reason.find("no strategy takes") != std::string::npos);
    // A (4096,256) would send 2 MiB; W (1,256,256) 128 KiB: re-shard W onto K instead.
    const OpShape big_a{1, 4096, 256, 256};
    const ShardingDecision e = decide(Pass::fwd, big_a, pl("S(1)", tp), pl("S(1)", tp), tp);
    REQUIRE(e.verdict == Verdict::redistribute);
    CHECK(e.strategy[0] == Strategy::contraction);
    CHECK(str(e.out) == "[P]");
    CHECK(e.redist_bytes == 256 * 256 / 2 * 4);
    CHECK(e.lhs_plan.empty());
  }
  SUBCASE("a Partial input is reduced: reduce-scatter into the contraction beats all-reduce") {
    const OpShape s{2, 256, 256, 512};
    const ShardingDecision d = decide(Pass::fwd, s, pl("P", tp), pl("R", tp), tp);
    REQUIRE(d.verdict == Verdict::redistribute);
    CHECK(d.reason.find("Partial") != std::string::npos);
    CHECK(d.strategy[0] == Strategy::contraction);
    REQUIRE(d.lhs_plan.size() == 1);
    CHECK(d.lhs_plan[0].collective == "reduce_scatter");
    CHECK(d.redist_bytes == 256 * 512 * 4 / 2);
    // A bf16 reduction moves half the bytes.
    const ShardingDecision b = decide(Pass::fwd, s, pl("P", tp), pl("R", tp), tp, {ReduceOrder::ascending, ReduceDtype::bf16});
    CHECK(b.redist_bytes == 256 * 512 * 2 / 2);
  }
  SUBCASE("wgrad with both operands sharded on features") {
    // dOut (256,256) vs A (256,1024): gathering dOut is cheaper -> wgrad-k.
    const OpShape s{2, 256, 256, 1024};
    const ShardingDecision d = decide(Pass::wgrad, s, pl("S(1)", tp), pl("S(1)", tp), tp);
    REQUIRE(d.verdict == Verdict::redistribute);
    CHECK(d.strategy[0] == Strategy::wgrad_k);
    CHECK(str(d.out) == "[S(2)]");
  }
}

TEST_CASE("Partial inputs, on either operand and either mesh dim, are redistributed into a direct strategy") {
  const OpShape s{2, 256, 256, 512};
  for (const char* mesh : {"tp=2", "dp=2,tp=2"}) {
    const Mesh m = Mesh::parse(mesh);
    for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      const int lr = static_cast<int>(lhs_shape(p, s).size()), rr = static_cast<int>(rhs_shape(p, s).size());
      auto with_partial = [&](int rank) {
        std::vector<Placements> opts = placement_options(rank, m);
        for (int md = 0; md < m.ndim(); ++md) {
          Placements x = replicated(m);
          x[static_cast<std::size_t>(md)] = Placement::P();
          opts.push_back(x);
        }
        return opts;
      };
      for (const Placements& l : with_partial(lr)) {
        for (const Placements& r : with_partial(rr)) {
          if (partial_dims(l).empty() && partial_dims(r).empty()) continue;
          CAPTURE(std::string(mesh));
          CAPTURE(std::string(pass_name(p)));
          CAPTURE(str(l));
          CAPTURE(str(r));
          const ShardingDecision d = decide(p, s, l, r, m);
          if (d.verdict == Verdict::reject) {
            CHECK(d.reason.find("S(0)") != std::string::npos);  // only a token or expert shard rejects
            continue;
          }
          CHECK(d.verdict == Verdict::redistribute);
          CHECK(partial_dims(d.lhs).empty());
          CHECK(partial_dims(d.rhs).empty());
          CHECK(decide(p, s, d.lhs, d.rhs, m).verdict == Verdict::direct);
          CHECK(d.redist_bytes > 0);  // a Partial always needs a reduction
        }
      }
    }
  }
}

TEST_CASE("quantizers keep the input placement, transposing ones swap the two dims") {
  const Mesh tp = Mesh::parse("tp=2");
  const std::vector<std::int64_t> mk{256, 512}, enk{2, 256, 512};
  CHECK(str(quantizer_rule(Recipe::act_lhs, mk, pl("S(1)", tp), tp, 128).codes) == "[S(1)]");
  CHECK(str(quantizer_rule(Recipe::act_rhs, mk, pl("S(1)", tp), tp, 128).codes) == "[S(1)]");
  CHECK(str(quantizer_rule(Recipe::kgrouped_rhs, mk, pl("S(1)", tp), tp, 128).codes) == "[S(1)]");
  CHECK(str(quantizer_rule(Recipe::act_lhs_t, mk, pl("S(1)", tp), tp, 128).codes) == "[S(0)]");
  CHECK(str(quantizer_rule(Recipe::act_lhs_t, mk, pl("S(0)", tp), tp, 128).codes) == "[S(1)]");
  CHECK(str(quantizer_rule(Recipe::kgrouped_lhs, mk, pl("S(1)", tp), tp, 128).codes) == "[S(0)]");
  CHECK(str(quantizer_rule(Recipe::weight_fwd, enk, pl("S(1)", tp), tp, 128).codes) == "[S(1)]");
  CHECK(str(quantizer_rule(Recipe::weight_dgrad, enk, pl("S(1)", tp), tp, 128).codes) == "[S(2)]");
  CHECK(str(quantizer_rule(Recipe::weight_dgrad, enk, pl("S(2)", tp), tp, 128).codes) == "[S(1)]");
  CHECK(str(quantizer_rule(Recipe::weight_dgrad, enk, pl("S(0)", tp), tp, 128).codes) == "[S(0)]");
  CHECK(str(quantizer_rule(Recipe::act_lhs, mk, pl("R", tp), tp, 128).codes) == "[R]");
  const Mesh m = Mesh::parse("dp=2,tp=2");
  CHECK(str(quantizer_rule(Recipe::weight_dgrad, enk, pl("S(0),S(1)", m), m, 128).codes) == "[S(0),S(2)]");
  const QuantizerRule partial = quantizer_rule(Recipe::act_lhs, mk, pl("P", tp), tp, 128);
  CHECK_FALSE(partial.valid);
  CHECK(partial.reason.find("not linear") != std::string::npos);
  CHECK(quantizer_rule(Recipe::act_lhs, mk, pl("S(1)", tp), tp, 128).valid);
}

TEST_CASE("block alignment follows the chunk ranges") {
  const Mesh tp2 = Mesh::parse("tp=2"), tp3 = Mesh::parse("tp=3"), tp4 = Mesh::parse("tp=4");
  auto aligned = [](Recipe r, std::vector<std::int64_t> shape, const char* p, const Mesh& m, int block = 128) {
    return quantizer_rule(r, shape, parse_placements(p, m.ndim()), m, block).block_aligned;
  };
  // hidden 384 over tp=2: 192 per rank, the boundary 192 splits a 128-block.
  const QuantizerRule h = quantizer_rule(Recipe::act_lhs, {256, 384}, pl("S(1)", tp2), tp2, 128);
  CHECK_FALSE(h.block_aligned);
  CHECK(h.misaligned.find("192") != std::string::npos);
  CHECK_FALSE(aligned(Recipe::weight_fwd, {2, 384, 256}, "S(1)", tp2));
  CHECK_FALSE(aligned(Recipe::weight_fwd, {2, 256, 384}, "S(2)", tp2));
  CHECK(aligned(Recipe::act_lhs, {256, 512}, "S(1)", tp2));
  CHECK(aligned(Recipe::weight_fwd, {2, 512, 256}, "S(1)", tp4));
  CHECK_FALSE(aligned(Recipe::act_lhs, {256, 256}, "S(1)", tp4));           // 64 per rank
  CHECK(aligned(Recipe::act_lhs, {256, 256}, "S(1)", tp4, 64));             // ... which is a 64-block
  CHECK(aligned(Recipe::act_lhs, {384, 256}, "S(0)", tp2));                 // rows are their own groups
  CHECK_FALSE(aligned(Recipe::act_rhs, {384, 256}, "S(0)", tp2));           // 128x1 along rows
  CHECK(aligned(Recipe::act_rhs, {383, 256}, "S(0)", tp3));                 // [0,128) [128,256) [256,383): ragged tail as single device
  CHECK(aligned(Recipe::kgrouped_lhs, {256, 384}, "S(1)", tp2));            // features are 1-wide groups
  CHECK(aligned(Recipe::kgrouped_rhs, {256, 384}, "S(1)", tp2));
  CHECK_FALSE(aligned(Recipe::kgrouped_rhs, {512, 256}, "S(0)", tp2));      // tokens: expert groups need routing
  CHECK(aligned(Recipe::weight_fwd, {2, 256, 256}, "R", tp2));
  const Mesh m = Mesh::parse("dp=2,tp=2");
  CHECK(aligned(Recipe::act_lhs, {256, 512}, "S(1),S(1)", m));              // nested: 128 each
  CHECK_FALSE(aligned(Recipe::act_lhs, {256, 256}, "S(1),S(1)", m));        // nested: 64 each
}

TEST_CASE("enumeration: every placement combination, its verdict, in a deterministic order") {
  const OpShape s{2, 256, 256, 256};
  struct Expect {
    const char* mesh;
    Pass pass;
    int total, direct, redistribute, rejected;
  };
  // Counted by hand: per mesh dim an operand is R or S(d); fwd/dgrad reject any S(0) (tokens of the
  // lhs, experts of W), wgrad any S(0) (tokens of either); 3 strategies per mesh dim take the rest.
  const Expect ex[] = {
      {"tp=2", Pass::fwd, 3 * 4, 3, 3, 6},
      {"tp=2", Pass::dgrad, 3 * 4, 3, 3, 6},
      {"tp=2", Pass::wgrad, 3 * 3, 3, 1, 5},
      {"dp=2,tp=2", Pass::fwd, 9 * 16, 9, 27, 108},
      {"dp=2,tp=2", Pass::dgrad, 9 * 16, 9, 27, 108},
      {"dp=2,tp=2", Pass::wgrad, 9 * 9, 9, 7, 65},
  };
  for (const Expect& e : ex) {
    CAPTURE(std::string(e.mesh));
    CAPTURE(std::string(pass_name(e.pass)));
    const Mesh m = Mesh::parse(e.mesh);
    const Enumeration a = enumerate_op(e.pass, s, m), b = enumerate_op(e.pass, s, m);
    CHECK(static_cast<int>(a.cases.size()) == e.total);
    CHECK(a.direct == e.direct);
    CHECK(a.redistribute == e.redistribute);
    CHECK(a.rejected == e.rejected);
    REQUIRE(a.cases.size() == b.cases.size());
    for (std::size_t i = 0; i < a.cases.size(); ++i) {
      const EnumeratedCase& c = a.cases[i];
      CHECK(str(c.lhs) == str(b.cases[i].lhs));
      CHECK(str(c.rhs) == str(b.cases[i].rhs));
      CHECK(str(c.decision, m) == str(b.cases[i].decision, m));
      if (c.decision.verdict != Verdict::direct) CHECK_FALSE(c.decision.reason.empty());
      if (c.decision.verdict == Verdict::redistribute) {
        CHECK(c.decision.redist_bytes >= 0);  // 0 when only local chunks are needed (R -> S)
        CHECK(c.decision.lhs_plan.size() + c.decision.rhs_plan.size() > 0);
        // The target is a direct case.
        CHECK(decide(e.pass, s, c.decision.lhs, c.decision.rhs, m).verdict == Verdict::direct);
      }
    }
    // The order: lhs outer, rhs inner, R before S(0) before S(1)...
    CHECK(str(a.cases.front().lhs) == str(replicated(m)));
    CHECK(str(a.cases.front().rhs) == str(replicated(m)));
    CHECK(str(a.cases[1].rhs) == (m.ndim() == 1 ? "[S(0)]" : "[R,S(0)]"));
  }
  CHECK(placement_options(2, Mesh::parse("tp=2")).size() == 3);
  CHECK(placement_options(3, Mesh::parse("dp=2,tp=2")).size() == 16);
}

}  // namespace fp8moe::sim
