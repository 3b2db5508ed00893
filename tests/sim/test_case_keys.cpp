// The scenario key registry (scenarios/keys.hpp + sim/sweep/case_keys.hpp, issue 17 item 1):
// every key has a rule and a place in the case key; the README documents every key with the
// registry's default; a key's value reaches the case, the case key and the HDF5 row (checked
// against the scenario text itself, on random scenarios); `fp8moe run`'s flags expand to the
// case a scenario file of the same values expands to, with the same checks; the key added with
// the registry (`out_dtype`) lands in the GEMMs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "reference/error.hpp"
#include "reference/gemm.hpp"
#include "reference/formats.hpp"
#include "results/store.hpp"
#include "scenarios/keys.hpp"
#include "scenarios/scenario.hpp"
#include "sim/backend/backend.hpp"
#include "sim/runner/op_runner.hpp"
#include "sim/sweep/case_keys.hpp"
#include "sim/sweep/expand.hpp"
#include "sim/sweep/run_case.hpp"
#include "support/test_support.hpp"

using namespace fp8moe;
using scenarios::Case;
using scenarios::Key;
using scenarios::kKeys;

namespace {

scenarios::Expansion expand_text(const std::string& text) {
  return scenarios::expand({scenarios::parse_scenario_text(text, "keys.ini")});
}

}  // namespace

TEST_CASE("every registry key has a rule and exactly one place in the case key") {
  std::set<Key> order(scenarios::kCaseKeyOrder.begin(), scenarios::kCaseKeyOrder.end());
  CHECK(order.size() == scenarios::kKeyCount);
  for (const scenarios::KeySyntax& k : kKeys) {
    CAPTURE(k.name);
    const scenarios::KeyRule& r = scenarios::key_rule(k.key);
    const bool complete = r.values && r.apply && r.key && r.row;
    CHECK(complete);
    CHECK(order.count(k.key) == 1);
    CHECK(scenarios::key_name(k.key) == k.name);
    // Its built-in default is one of its own valid values.
    CHECK_NOTHROW((void)r.values(std::string(k.builtin)));
  }
  CHECK(scenarios::scenario_keys().size() == scenarios::kKeyCount);
}

TEST_CASE("scenarios/README.md documents every key with the registry's default and level") {
  std::ifstream in(std::string(FP8MOE_SOURCE_DIR) + "/scenarios/README.md");
  REQUIRE(in);
  std::map<std::string, std::string> documented;  // key -> default column
  std::map<std::string, scenarios::Scope> scope;   // key -> the level its cell names ("(op)", "(layer)")
  std::string line;
  bool in_keys = false;
  while (std::getline(in, line)) {
    if (line.rfind("| key | values | default | meaning |", 0) == 0) in_keys = true;
    if (!in_keys || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string c; std::getline(ss, c, '|');) cells.push_back(c);
    REQUIRE(cells.size() >= 4);
    std::string dflt = cells[2];
    dflt.erase(std::remove(dflt.begin(), dflt.end(), '`'), dflt.end());
    dflt.erase(0, dflt.find_first_not_of(' '));
    dflt.erase(dflt.find_last_not_of(' ') + 1);
    // The first cell names one key or several ("`n`, `k` (op)").
    const std::string& names = cells[0];
    const scenarios::Scope sc = names.find("(op)") != std::string::npos      ? scenarios::Scope::op
                                : names.find("(layer)") != std::string::npos ? scenarios::Scope::layer
                                                                            : scenarios::Scope::both;
    for (std::size_t b = names.find('`'); b != std::string::npos; b = names.find('`', names.find('`', b + 1) + 1)) {
      const std::size_t e = names.find('`', b + 1);
      documented[names.substr(b + 1, e - b - 1)] = dflt;
      scope[names.substr(b + 1, e - b - 1)] = sc;
    }
  }
  for (const scenarios::KeySyntax& k : kKeys) {
    CAPTURE(k.name);
    REQUIRE(documented.count(std::string(k.name)) == 1);
    const std::string want = k.builtin.empty() ? "empty" : std::string(k.builtin);
    CHECK(documented[std::string(k.name)] == want);
    CHECK(scope[std::string(k.name)] == k.scope);
  }
  CHECK(documented.size() == scenarios::kKeyCount);
}

// A random single-valued scenario: one value per key from the values the key accepts.
std::map<std::string, std::string> random_scenario(std::mt19937_64& rng) {
  auto pick = [&](std::vector<std::string> v) { return v[rng() % v.size()]; };
  std::map<std::string, std::string> s;
  const bool op = rng() % 2 == 0;
  s["level"] = op ? "op" : "layer";
  s["mesh"] = op ? pick({"1", "tp=2", "dp=2"}) : pick({"tp=2", "dp=2", "ep=2"});
  if (op) {
    s["pass"] = pick({"fwd", "dgrad", "wgrad"});
    if (s["mesh"] != "1") s["lhs"] = s["rhs"] = "R";  // a mesh of no dims: `all` is its one pair
    s["n"] = pick({"128", "256"});
    s["k"] = pick({"128", "384"});
  } else {
    s["plan"] = s["mesh"].substr(0, 2);
    s["dim"] = pick({"128", "256"});
    s["hidden"] = pick({"128", "256"});
    s["lr"] = pick({"0", "0.5"});
  }
  s["mode"] = pick({"exact", "torchao-emulated", "promote-fp32:cublas", "hopper-tc:deepgemm", "bf16"});
  s["experts"] = pick({"1", "2", "3"});
  s["tokens"] = pick({"200", "256", "384"});
  s["routing"] = pick({"balanced", "uniform"});
  s["dist"] = pick({"normal", "uniform", "outliers"});
  s["seed"] = std::to_string(rng() % 1000);
  s["format"] = "e4m3";
  s["block"] = "128";
  s["pow2_scales"] = pick({"true", "false"});
  s["pad"] = "auto";
  s["out_dtype"] = pick({"bf16", "fp32"});
  s["reduce_dtype"] = pick({"fp32", "bf16"});
  s["reduce_order"] = pick({"ascending", "ring"});
  return s;
}

TEST_CASE("a key's value reaches the case key and the HDF5 row as the scenario states it") {
  const std::uint64_t seed = test::seed_for(171);
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const auto s = random_scenario(rng);
    std::string text = "[scenario.r]\n";
    for (const auto& [k, v] : s) text += k + " = " + v + "\n";
    CAPTURE(text);
    const auto ex = expand_text(text);
    REQUIRE(ex.cases.size() == 1);
    const Case& c = ex.cases[0];
    REQUIRE(c.rejected.empty());
    const results::CaseRow row = sim::case_row_template(c);
    CHECK(row.case_key == c.key());
    const bool quant = is_quantized(c.gemm.mode);
    // Columns named after their key hold the value as the scenario wrote it.
    for (const char* k : {"level", "mesh", "experts", "tokens", "dist", "seed"}) {
      CAPTURE(k);
      CHECK(*results::column_text(row, k) == s.at(k));
    }
    const bool op = s.at("level") == "op";
    for (const char* k : {"n", "k", "dim", "hidden"}) {
      CAPTURE(k);
      const bool used = op == (k[0] == 'n' || k[0] == 'k');
      CHECK(*results::column_text(row, k) == (used ? s.at(k) : "0"));
    }
    if (op) CHECK(row.pass == s.at("pass"));
    if (!op) CHECK(row.plan == s.at("plan"));
    std::string mode = s.at("mode");
    CHECK(row.mode == mode);
    CHECK(row.pow2_scales == (quant && s.at("pow2_scales") == "true" ? 1 : 0));
    CHECK(row.routing == s.at("routing"));
    // One rank reduces nothing: its reduction keys are normalised to the defaults.
    CHECK(row.reduce_dtype == (c.world > 1 ? s.at("reduce_dtype") : "fp32"));
    CHECK(row.reduce_order == (c.world > 1 ? s.at("reduce_order") : "ascending"));
    // The case key carries every parameter that changes numbers, the new key only when not bf16.
    const std::string key = c.key();
    CHECK(key.find("E=" + s.at("experts") + " M=" + s.at("tokens")) != std::string::npos);
    CHECK(key.find("seed=" + s.at("seed") + " mode=" + mode) != std::string::npos);
    CHECK((key.find("out_dtype=fp32") != std::string::npos) == (s.at("out_dtype") == "fp32"));
    CHECK(c.gemm.out == (s.at("out_dtype") == "fp32" ? OutDtype::fp32 : OutDtype::bf16));
    CHECK((key.find("reduce=" + s.at("reduce_dtype") + "/" + s.at("reduce_order")) != std::string::npos) ==
          (c.world > 1));
  }
}

TEST_CASE("fp8moe run's flags expand to the case a scenario file of the same values expands to") {
  using FV = scenarios::FlagValue;
  const std::vector<std::pair<std::vector<FV>, std::string>> same{
      {{{Key::level, "--level", "op"}, {Key::mesh, "--mesh", "tp=2"}, {Key::pass, "--pass", "dgrad"},
        {Key::lhs, "--lhs", "R"}, {Key::rhs, "--rhs", "S(2)"}, {Key::offs, "--offs", "100,384"},
        {Key::mode, "--mode", "hopper-tc:cublas"}},
       "level = op\nmesh = tp=2\npass = dgrad\nlhs = R\nrhs = S(2)\noffs = 100,384\nmode = hopper-tc:cublas\n"},
      {{{Key::level, "--level", "layer"}, {Key::mesh, "--mesh", "dp=2,tp=2"}, {Key::plan, "--plan", "fsdp+tp"},
        {Key::tokens, "--tokens", "512"}, {Key::lr, "--lr", "0.1"}, {Key::fsdp_gather, "--fsdp-gather", "fp8"},
        {Key::out_dtype, "--out-dtype", "fp32"}},
       "level = layer\nmesh = dp=2,tp=2\nplan = fsdp+tp\ntokens = 512\nlr = 0.1\nfsdp_gather = fp8\nout_dtype = fp32\n"},
  };
  for (const auto& [flags, text] : same) {
    CAPTURE(text);
    const auto a = scenarios::expand({scenarios::scenario_from_flags("fp8moe run", flags)});
    const auto b = expand_text("[scenario.run]\n" + text);
    REQUIRE(a.cases.size() == 1);
    REQUIRE(b.cases.size() == 1);
    CHECK(a.cases[0].key() == b.cases[0].key());
    CHECK(a.cases[0].offs == b.cases[0].offs);
    CHECK(a.cases[0].rejected == b.cases[0].rejected);
  }
  // The same checks, the same reason; the flag named instead of file:line.
  const std::vector<std::pair<FV, std::string>> bad{
      {{Key::experts, "--experts", "0"}, "experts = 0"},
      {{Key::block, "--block", "96"}, "block = 96"},
      {{Key::mode, "--mode", "fp4"}, "mode = fp4"},
      {{Key::out_dtype, "--out-dtype", "fp64"}, "out_dtype = fp64"},
      {{Key::lr, "--lr", "nan"}, "lr = nan"},
  };
  for (const auto& [flag, line] : bad) {
    CAPTURE(line);
    const std::string from_flag =
        test::error_of([&] { (void)scenarios::expand({scenarios::scenario_from_flags("fp8moe run", {flag})}); });
    const std::string from_file = test::error_of([&] { (void)expand_text("[scenario.run]\n" + line + "\n"); });
    REQUIRE(!from_flag.empty());
    REQUIRE(!from_file.empty());
    CHECK(from_flag.rfind(flag.flag + " " + flag.text + ": ", 0) == 0);
    CHECK(from_file.rfind("keys.ini:2: " + line + ": ", 0) == 0);
    // The reason after the location is the same sentence.
    CHECK(from_flag.substr(from_flag.find(": ") + 2) == from_file.substr(from_file.find(": ", 12) + 2));
  }
}

TEST_CASE("out_dtype = fp32 runs the GEMMs with fp32 outputs, bf16 rounds them") {
  const std::uint64_t seed = test::seed_for(172);
  INFO("seed ", seed);
  const std::string text = "[scenario.o]\nlevel = op\nmesh = 1\npass = fwd\nexperts = 2\ntokens = 256\n"
                           "mode = promote-fp32:cublas\nseed = " + std::to_string(seed % 100000) + "\nout_dtype = bf16, fp32\n";
  const auto ex = expand_text(text);
  REQUIRE(ex.cases.size() == 2);
  auto be = sim::make_backend("reference");
  const sim::OpRun bf = sim::run_op(ex.cases[0], *be);
  const sim::OpRun f32 = sim::run_op(ex.cases[1], *be);
  REQUIRE(bf.out.numel() == f32.out.numel());
  std::int64_t not_bf16 = 0;
  for (std::size_t i = 0; i < f32.out.numel(); ++i) {
    const double x = f32.out.data[i];
    REQUIRE(std::isfinite(x));
    // The bf16 case is the fp32 case rounded (same accumulation, one rounding at the end).
    CHECK(static_cast<float>(bf.out.data[i]) == round_bf16(static_cast<float>(x)));
    if (round_bf16(static_cast<float>(x)) != static_cast<float>(x)) ++not_bf16;
  }
  CHECK(not_bf16 > static_cast<std::int64_t>(f32.out.numel()) / 2);
  CHECK(ex.cases[1].key() == ex.cases[0].key() + " out_dtype=fp32");
  // hp64 computes in fp64 whatever the key says: one case, not two.
  const auto hp = expand_text("[scenario.h]\nlevel = op\nmesh = 1\npass = fwd\nmode = hp64\nout_dtype = bf16, fp32\n");
  CHECK(hp.cases.size() == 1);
  CHECK(test::error_of([] { (void)expand_text("[scenario.x]\nout_dtype = fp16\n"); }).find("keys.ini:2: out_dtype = fp16") == 0);
}
