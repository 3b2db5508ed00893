// `fp8moe rules verify` (issue 21, sim/verify/rule_verify.hpp): the shipped tables' verdicts (fp8moe's own
// verify clean; torchao's PR table shows exactly its two defects, in every pass they reach), the
// op each rank runs against hand-written oracles and fp8moe's reference quantizers, mutated tables
// caught, malformed tables refused naming the entry, and the CLI's exit codes and JSON.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "reference/quantize.hpp"
#include "sim/verify/rule_verify.hpp"
#include "support/run_cli.hpp"
#include "support/test_support.hpp"

namespace fp8moe::sim {
namespace {

const std::string kRules = FP8MOE_RULES_DIR;
const std::string kTorchao = kRules + "/torchao_pr_9140d1c3d.json";
const std::string kOwnMm = kRules + "/fp8moe_grouped_mm.json";
const std::string kOwnQuant = kRules + "/fp8moe_quantizers.json";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text with `from` replaced once (the mutation must apply).
std::string mutate(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "mutation anchor not found: " << from);
  return text.replace(at, from.size(), to);
}

RuleVerifyOptions options(std::uint64_t seed, std::vector<std::string> meshes = {"tp=2", "dp=2,tp=2"}) {
  RuleVerifyOptions o;
  o.seed = seed;
  o.meshes = std::move(meshes);
  return o;
}

using Defect = std::tuple<Pass, std::vector<int>, RuleVerdict>;
std::set<Defect> defects(const RuleVerifyReport& r, const std::string& mesh) {
  std::set<Defect> out;
  for (const RuleVerifyRow& row : r.rows) {
    if (row.mesh == mesh && rule_verdict_is_defect(row.verdict)) out.insert({row.pass, row.strategy, row.verdict});
  }
  return out;
}

const RuleVerifyRow& row_of(const RuleVerifyReport& r, Pass p, const std::string& mesh, const std::string& shapes,
                            const std::string& inputs) {
  for (const RuleVerifyRow& row : r.rows) {
    if (row.pass == p && row.mesh == mesh && row.shapes == shapes && row.inputs == inputs) return row;
  }
  FAIL("no row ", pass_name(p), " ", mesh, " ", shapes, " ", inputs);
  throw;
}

}  // namespace

TEST_CASE("fp8moe's own tables verify clean: every strategy chosen somewhere, Partial sums within their bound") {
  const std::uint64_t seed = fp8moe::test::seed_for(211);
  INFO("seed " << seed);
  for (const std::string& path : {kOwnMm, kOwnQuant}) {
    CAPTURE(path);
    const RuleVerifyReport r = verify_rules(load_rule_table(path), options(seed));
    CHECK(r.defects() == 0);
    int partial = 0, redistributed = 0, bitwise = 0;
    for (const RuleVerifyRow& row : r.rows) {
      CAPTURE(row.inputs);
      CAPTURE(row.detail);
      CHECK(row.verdict != RuleVerdict::unreachable);
      CHECK_FALSE(rule_verdict_is_defect(row.verdict));
      partial += row.verdict == RuleVerdict::correct_partial;
      bitwise += row.verdict == RuleVerdict::correct;
      redistributed += row.redistribution != "none";
      if (row.verdict == RuleVerdict::correct_partial) CHECK(row.sqnr_db > 40);  // bf16 partials, not a wrong sum
      if (row.verdict == RuleVerdict::correct) CHECK(std::isinf(row.sqnr_db));
    }
    CHECK(bitwise > 0);
    CHECK(redistributed > 0);
    if (path == kOwnMm) CHECK(partial > 0);
    for (const std::string& s : r.never_chosen) CAPTURE(s);
    CHECK(r.never_chosen.empty());
  }
  // The enumeration: lhs x rhs placements (2-D: 3 on tp=2, 9 on dp=2,tp=2; 3-D: 4 and 16) x 2
  // shape sets: fwd and dgrad (2-D x 3-D), wgrad (2-D x 2-D).
  const RuleVerifyReport mm = verify_rules(load_rule_table(kOwnMm), options(seed));
  CHECK(mm.rows.size() == 2 * (3 * 4 + 9 * 16) * 2 + (3 * 3 + 9 * 9) * 2);
}

TEST_CASE("torchao's PR table: exactly its two defects, in every pass the one strategy list reaches") {
  const std::uint64_t seed = fp8moe::test::seed_for(223);
  INFO("seed " << seed);
  const RuleVerifyReport r = verify_rules(load_rule_table(kTorchao), options(seed));
  // On a mesh of 2 the defects are single strategies. (1) The wgrad-k rule "a R, b S(1) -> S(2)"
  // matches fwd/dgrad inputs with b's contraction dim sharded: torch raises "contraction
  // dimension of mat_a and mat_b must match"; its mirror, fwd's "a S(1), b S(1) -> P", matches
  // wgrad inputs whose a (N,M) has M sharded and b (M,K) has K sharded: the same refusal.
  // (2) The wgrad-n rule "a S(0), b R -> S(1)" matches fwd/dgrad inputs with the tokens sharded:
  // every rank keeps the full offsets over half the rows, an out-of-bounds read.
  const std::set<Defect> want{{Pass::fwd, {5}, RuleVerdict::wrong_shape},   {Pass::fwd, {4}, RuleVerdict::unsafe},
                              {Pass::dgrad, {5}, RuleVerdict::wrong_shape}, {Pass::dgrad, {4}, RuleVerdict::unsafe},
                              {Pass::wgrad, {3}, RuleVerdict::wrong_shape}};
  CHECK(defects(r, "tp=2") == want);
  // The issue's two placements, as it states them.
  const RuleVerifyRow& k = row_of(r, Pass::fwd, "tp=2", "E3-M45", "a=[R] b=[S(1)]");
  CHECK(k.strategy == std::vector<int>{5});
  CHECK(k.redistribution == "none");
  CHECK(k.verdict == RuleVerdict::wrong_shape);
  CHECK(k.detail.find("contraction dimension of mat_a and mat_b must match") != std::string::npos);
  const RuleVerifyRow& t = row_of(r, Pass::fwd, "tp=2", "E3-M45", "a=[S(0)] b=[R]");
  CHECK(t.strategy == std::vector<int>{4});
  CHECK(t.verdict == RuleVerdict::unsafe);
  CHECK(t.detail.find("ends at 45 but this rank holds 23 token rows") != std::string::npos);
  // And nothing it should not: the strategies that are right for a pass are verified correct.
  CHECK(row_of(r, Pass::fwd, "tp=2", "E3-M45", "a=[R] b=[S(2)]").verdict == RuleVerdict::correct);
  CHECK(row_of(r, Pass::fwd, "tp=2", "E3-M45", "a=[S(1)] b=[S(1)]").verdict == RuleVerdict::correct_partial);
  CHECK(row_of(r, Pass::wgrad, "tp=2", "E4-M64", "a=[S(0)] b=[R]").verdict == RuleVerdict::correct);
  CHECK(row_of(r, Pass::wgrad, "tp=2", "E4-M64", "a=[R] b=[S(1)]").verdict == RuleVerdict::correct);
  CHECK(row_of(r, Pass::dgrad, "tp=2", "E4-M64", "a=[R] b=[S(2)]").verdict == RuleVerdict::correct);
  // DTensor's choice: a zero-cost local chunk (b R -> S(1)) wins over an all-gather ...
  const RuleVerifyRow& z = row_of(r, Pass::fwd, "tp=2", "E3-M45", "a=[S(1)] b=[R]");
  CHECK(z.strategy == std::vector<int>{3});
  CHECK(z.redistribution == "b [R]->[S(1)], b_s [R]->[S(1)]");
  CHECK(z.verdict == RuleVerdict::correct_partial);
  // ... and the least cost picks the smaller all-gather (a's 45x512 codes, not b's 3x512x512),
  // landing on the defective rule.
  const RuleVerifyRow& c = row_of(r, Pass::fwd, "tp=2", "E3-M45", "a=[S(0)] b=[S(1)]");
  CHECK(c.strategy == std::vector<int>{5});
  CHECK(c.redistribution == "a [S(0)]->[R], a_s [S(0)]->[R]");
  CHECK(c.verdict == RuleVerdict::wrong_shape);
  // On the 2x2 mesh every defect involves one of those single-dim strategies on its pass.
  std::map<Pass, std::set<int>> culprits{{Pass::fwd, {4, 5}}, {Pass::dgrad, {4, 5}}, {Pass::wgrad, {3}}};
  int two_d = 0;
  for (const RuleVerifyRow& row : r.rows) {
    if (row.mesh != "dp=2,tp=2" || !rule_verdict_is_defect(row.verdict)) continue;
    ++two_d;
    CAPTURE(row.inputs);
    CAPTURE(row.strategy_text);
    CHECK(std::any_of(row.strategy.begin(), row.strategy.end(), [&](int s) { return culprits[row.pass].count(s) > 0; }));
  }
  CHECK(two_d > 0);
  for (const RuleVerifyRow& row : r.rows) CHECK(row.verdict != RuleVerdict::wrong_values);
  // Strategy 2 shards b's dim 2, which wgrad's 2-D b lacks: never chosen there, and said why.
  bool said = false;
  for (const std::string& s : r.never_chosen) said = said || (s.find("wgrad: #2") != std::string::npos && s.find("not applicable") != std::string::npos);
  CHECK(said);
}

TEST_CASE("mutated tables are caught: a wrong output dim, a missing scale placement, a swapped pass, a Partial left out") {
  const std::uint64_t seed = fp8moe::test::seed_for(227);
  INFO("seed " << seed);
  const std::string own = slurp(kOwnMm);
  struct Mutation {
    const char* what;
    std::string text;
    std::set<Defect> want;  // exactly these (pass, strategy, verdict) on tp=2
  };
  const Mutation mutations[] = {
      {"fwd's out-feature output says S(0) (rows) where the ranks hold columns",
       mutate(own, R"j("out": ["S(1)"], "args": ["R", "S(1)", "R", "S(1)")j", R"j("out": ["S(0)"], "args": ["R", "S(1)", "R", "S(1)")j"),
       {{Pass::fwd, {1}, RuleVerdict::wrong_shape}}},
      {"fwd's contraction strategy leaves lhs_scale Replicate",
       mutate(own, R"j("args": ["S(1)", "S(2)", "S(1)", "S(2)")j", R"j("args": ["S(1)", "S(2)", "R", "S(2)")j"),
       {{Pass::fwd, {2}, RuleVerdict::wrong_shape}}},
      {"the out-feature rules of fwd (#1) and dgrad (#3) swapped",
       mutate(mutate(own, R"j({"passes": ["fwd"],   "out": ["S(1)"])j", R"j({"passes": ["dgrad"],   "out": ["S(1)"])j"),
              R"j({"passes": ["dgrad"], "out": ["S(1)"], "args": ["R", "S(2)")j", R"j({"passes": ["fwd"], "out": ["S(1)"], "args": ["R", "S(2)")j"),
       {{Pass::fwd, {3}, RuleVerdict::wrong_shape}, {Pass::dgrad, {1}, RuleVerdict::wrong_shape}}},
      {"fwd's contraction output says Replicate: each rank's partial sum taken as the whole",
       mutate(own, R"j("out": ["P"],    "args": ["S(1)", "S(2)")j", R"j("out": ["R"],    "args": ["S(1)", "S(2)")j"),
       {{Pass::fwd, {2}, RuleVerdict::wrong_values}}},
  };
  for (const Mutation& m : mutations) {
    CAPTURE(m.what);
    const RuleVerifyReport r = verify_rules(parse_rule_table(m.text, "mutated.json"), options(seed, {"tp=2"}));
    CHECK(r.defects() > 0);
    CHECK(defects(r, "tp=2") == m.want);
  }
}

TEST_CASE("the op each rank runs equals hand-written oracles and fp8moe's reference quantizers") {
  const std::uint64_t seed = fp8moe::test::seed_for(229);
  INFO("seed " << seed);
  // N and K grow with the mesh (whole 128-blocks on every shard): 512 up to 4 ranks, 128 per rank beyond.
  CHECK(default_rule_shapes().front().on(Mesh::parse("tp=2")).n == 512);
  CHECK(default_rule_shapes().front().on(Mesh::parse("dp=2,tp=4")).k == 1024);
  const RuleShapes sh = default_rule_shapes().front().on(Mesh::parse("dp=2,tp=2"));  // E=3, offs 20,20,45; N=K=512
  const auto ptrs = [](const std::vector<std::optional<TensorF>>& in) {
    std::vector<const TensorF*> p;
    for (const auto& t : in) p.push_back(t ? &*t : nullptr);
    return p;
  };
  const auto expert_of = [&](std::int64_t m) {
    std::int64_t e = 0;
    while (m >= sh.offs[static_cast<std::size_t>(e)]) ++e;
    return e;
  };
  SUBCASE("torchao fwd: out(m,n) = sum_k a(m,k) a_s(m,k/128) b(e,k,n) b_s(e,k/128,n/128)") {
    const RuleOp op = load_rule_table(kTorchao).ops[0];
    const auto in = rule_inputs(op, Pass::fwd, sh, seed);
    const TensorF out = run_rule_op(op, Pass::fwd, ptrs(in)).at(0);
    const TensorF &a = *in[0], &b = *in[1], &as = *in[2], &bs = *in[3];
    REQUIRE(out.shape == std::vector<std::int64_t>{45, 512});
    for (std::int64_t m = 0; m < 45; m += 4) {
      for (std::int64_t n = 0; n < 512; n += 37) {
        const std::int64_t e = expert_of(m);
        double acc = 0;
        for (std::int64_t k = 0; k < 512; ++k) {
          acc += (double(a(m, k)) * as(m, k / 128)) * (double(b(e, k, n)) * bs(e, k / 128, n / 128));
        }
        CHECK(out(m, n) == round_bf16(acc));
      }
    }
  }
  SUBCASE("torchao wgrad: out(e,n,k) = sum over group e of a(n,m) a_s(n, block of m) b(m,k) b_s(block of m, k)") {
    const RuleOp op = load_rule_table(kTorchao).ops[0];
    const auto in = rule_inputs(op, Pass::wgrad, sh, seed);
    const TensorF out = run_rule_op(op, Pass::wgrad, ptrs(in)).at(0);
    const TensorF &a = *in[0], &b = *in[1], &as = *in[2], &bs = *in[3];
    REQUIRE(out.shape == std::vector<std::int64_t>{3, 512, 512});
    REQUIRE(as.shape == std::vector<std::int64_t>{512, 2});  // groups of 20, 0, 25 tokens: 1 + 0 + 1 blocks
    const std::int64_t base[3] = {0, 1, 1}, start[3] = {0, 20, 20};
    for (std::int64_t e = 0; e < 3; ++e) {
      for (std::int64_t n = 0; n < 512; n += 41) {
        for (std::int64_t k = 0; k < 512; k += 43) {
          double acc = 0;
          for (std::int64_t m = start[e]; m < sh.offs[static_cast<std::size_t>(e)]; ++m) {
            const std::int64_t blk = base[e] + (m - start[e]) / 128;
            acc += (double(a(n, m)) * as(n, blk)) * (double(b(m, k)) * bs(blk, k));
          }
          CHECK(out(e, n, k) == round_bf16(acc));
        }
      }
    }
    for (std::int64_t n = 0; n < 512; n += 97) CHECK(out(1, n, 5) == 0.0f);  // the empty group
  }
  SUBCASE("fp8moe dgrad: dA(m,k) = sum_n dOut(m,n) s(m,n/128) W(e,n,k) W_s(e,n/128,k/128)") {
    const RuleOp op = load_rule_table(kOwnMm).ops[0];
    const auto in = rule_inputs(op, Pass::dgrad, sh, seed);
    const TensorF out = run_rule_op(op, Pass::dgrad, ptrs(in)).at(0);
    const TensorF &a = *in[0], &w = *in[1], &as = *in[2], &ws = *in[3];
    for (std::int64_t m = 1; m < 45; m += 5) {
      for (std::int64_t k = 3; k < 512; k += 31) {
        const std::int64_t e = expert_of(m);
        double acc = 0;
        for (std::int64_t n = 0; n < 512; ++n) {
          acc += (double(a(m, n)) * as(m, n / 128)) * (double(w(e, n, k)) * ws(e, n / 128, k / 128));
        }
        CHECK(out(m, k) == round_bf16(acc));
      }
    }
  }
  SUBCASE("the quantizers: codes and scales equal reference::quantize_act_lhs and quantize_grouped_weight") {
    const RuleTable q = load_rule_table(kOwnQuant);
    for (std::size_t i = 0; i < q.ops.size(); ++i) {
      const RuleOp& op = q.ops[i];
      const auto in = rule_inputs(op, Pass::fwd, sh, seed + i);
      const std::vector<TensorF> out = run_rule_op(op, Pass::fwd, ptrs(in));
      const Quantized ref = i == 0 ? quantize_act_lhs(*in[0], QuantOptions{})
                                   : quantize_grouped_weight(*in[0], WeightOrientation::fwd, QuantOptions{});
      REQUIRE(out[0].shape == ref.codes.shape);
      REQUIRE(out[1].shape == ref.scales.shape);
      std::size_t bad = 0;
      for (std::size_t j = 0; j < ref.codes.data.size(); ++j) {
        bad += f32_bits(out[0].data[j]) != f32_bits(fp8_decode(ref.codes.data[j], Fp8Format::e4m3));
      }
      for (std::size_t j = 0; j < ref.scales.data.size(); ++j) bad += f32_bits(out[1].data[j]) != f32_bits(ref.scales.data[j]);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("malformed tables are refused naming the entry and the fix") {
  const std::string t = slurp(kTorchao);
  const std::pair<std::string, std::vector<std::string>> bad[] = {
      {"not json", {"is not JSON"}},
      // a number past a double: nlohmann's out_of_range, not a parse_error (a fuzz finding)
      {mutate(t, R"j("format": "fp8moe-rules-1")j", R"j("format": 9999999999999e999999)j"), {"is not JSON", "overflow"}},
      {mutate(t, R"j("format": "fp8moe-rules-1")j", R"j("format": "x")j"), {"format", "fp8moe-rules-1"}},
      {mutate(t, R"j("Shard(2)",    "Replicate()", "Shard(2)")j", R"j("Shard(x)",    "Replicate()", "Shard(2)")j"),
       {"ops[0].strategies[1][1][1]", "Shard(x)"}},
      {mutate(t, R"j("Replicate()", "Replicate()", null]])j", R"j("Replicate()", null]])j"),
       {"ops[0].strategies[0][1]", "one placement per argument (6: a, b, a_s, b_s, offs, out_dtype"}},
      {mutate(t, R"j("Shard(0)",    "Replicate()", "Replicate()", null])j", R"j("Shard(0)",    "Replicate()", null, null])j"),
       {"ops[0].strategies[3][1][4]", "offs is a tensor"}},
      {mutate(t, R"j("role": "rhs_scale")j", R"j("role": "weight_scale")j"), {"ops[0].arguments[3].role", "weight_scale"}},
      {mutate(t, R"j("fwd": "M,K/128")j", R"j("fwd": "K/128,M")j"), {"ops[0]", "a_s", "same order"}},
      {mutate(t, R"j("wgrad": "E,N,K"})j", R"j("wgrad": "E,N"})j"), {"ops[0]", "wgrad", "the output is 3-D with E"}},
      {mutate(t, R"j("kind": "grouped_mm")j", R"j("kind": "gemm")j"), {"ops[0].kind", "grouped_mm or quantize"}},
      {mutate(t, R"j({"name": "out_dtype", "tensor": false})j", R"j("out_dtype")j"), {"ops[0].arguments[5]", "expected an object"}},
      {mutate(t, R"j("fwd": "E,K,N")j", R"j("fwd": "E,K,Q")j"), {"ops[0].arguments[1].shape.fwd", "'Q'"}},
  };
  for (const auto& [text, words] : bad) {
    CAPTURE(text.substr(0, 200));
    std::string msg;
    try {
      (void)parse_rule_table(text, "bad.json");
    } catch (const Error& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    REQUIRE_FALSE(msg.empty());
    CHECK(msg.find("bad.json") != std::string::npos);
    for (const std::string& w : words) CHECK(msg.find(w) != std::string::npos);
  }
}

TEST_CASE("fp8moe rules verify: exit 1 on torchao's table with the defects named, 0 on fp8moe's, 2 on a malformed one") {
  using fp8moe::test::quote;
  const auto cli = [](const std::string& a) { return fp8moe::test::run_cli("rules", a, /*stderr_too=*/false); };
  const auto r = cli("verify " + quote(kTorchao) + " --mesh tp=2");
  CAPTURE(r.output);
  CHECK(r.rc == 1);
  CHECK(r.output.find("torchao.emulated_blockwise_fp8_grouped_mm fwd on tp=2: #5 [S(2)] <- a R, b S(1), a_s R, b_s S(1), "
                      "offs R, out_dtype None chosen -> wrong-shape") != std::string::npos);
  CHECK(r.output.find("fwd on tp=2: #4 [S(1)] <- a S(0), b R, a_s S(0), b_s R, offs R, out_dtype None chosen -> unsafe") !=
        std::string::npos);
  CHECK(r.output.find("-> exit 1") != std::string::npos);
  for (const std::string& own : {kOwnMm, kOwnQuant}) {
    const auto ok = cli("verify " + quote(own));
    CAPTURE(ok.output);
    CHECK(ok.rc == 0);
    CHECK(ok.output.find("cases correct -> exit 0") != std::string::npos);
  }
  const auto j = cli("verify " + quote(kTorchao) + " --mesh tp=2 --format json --seed 5");
  REQUIRE(j.rc == 1);
  const nlohmann::json doc = nlohmann::json::parse(j.output);
  CHECK(doc["seed"] == 5);
  CHECK(doc["rows"].size() == (12 + 12 + 9) * 2);
  int defects = 0;
  for (const auto& row : doc["rows"]) {
    defects += row["verdict"] == "wrong-shape" || row["verdict"] == "unsafe" || row["verdict"] == "wrong-values";
    CHECK(row.contains("strategy_text"));
  }
  CHECK(defects == doc["defects"]);
  CHECK(defects > 0);
  const auto bad = fp8moe::test::run_cli("rules", "verify /nonexistent.json");
  CHECK(bad.rc == 2);
  CHECK(bad.output.find("/nonexistent.json") != std::string::npos);
  const auto sub = fp8moe::test::run_cli("rules", "check x.json");
  CHECK(sub.rc == 2);
  CHECK(sub.output.find("the subcommand is verify") != std::string::npos);
  const auto one = fp8moe::test::run_cli("rules", "verify " + quote(kOwnMm) + " --mesh 1");
  CHECK(one.rc == 2);
  CHECK(one.output.find("a mesh of 2 to 16 ranks") != std::string::npos);
  // Your own token counts: fp8moe's rules hold on them too; bad shape sets are refused, naming the value.
  const auto mine = cli("verify " + quote(kOwnMm) + " --mesh tp=2 --offs 7,7,30 --offs 1,2,3,300 --n 256 --k 256");
  CAPTURE(mine.output);
  CHECK(mine.rc == 0);
  CHECK(mine.output.find("offs=7,7,30 (E=3 M=30 offs=7,7,30 N=256 K=256)") != std::string::npos);
  for (const auto& [args, words] : {std::pair{"--offs 5,3", "non-decreasing"}, std::pair{"--offs 5 --n 100", "N = 100: give a multiple of 128"},
                                    std::pair{"--n 256", "give --offs too"}, std::pair{"--offs 0,0", "M = 0 tokens"},
                                    std::pair{"--offs 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64 --n 8192 --k 8192", "over the verifier's 2^24"}}) {
    const auto bad_shape = fp8moe::test::run_cli("rules", "verify " + quote(kOwnMm) + " --mesh tp=2 " + args);
    CAPTURE(args);
    CAPTURE(bad_shape.output);
    CHECK(bad_shape.rc == 2);
    CHECK(bad_shape.output.find(words) != std::string::npos);
  }
  const auto big = fp8moe::test::run_cli("rules", "verify " + quote(kOwnMm) + " --mesh dp=4,tp=8");
  CHECK(big.rc == 2);
  CHECK(big.output.find("--mesh dp=4,tp=8: 32 rank(s)") != std::string::npos);
}

}  // namespace fp8moe::sim
