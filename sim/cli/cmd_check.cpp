// `fp8moe check`: which arithmetic (and placement) a kernel or framework computed, from its inputs
// and outputs (sim/sweep/check.hpp). Exit 0 when --expect holds (or none is given), 1 when it
// does not, 2 on bad input: it gates CI.
#include <fmt/core.h>

#include <cmath>

#include "reference/error.hpp"
#include "scenarios/keys.hpp"
#include "sim/cli/command.hpp"
#include "sim/sweep/json_out.hpp"
#include "sim/sweep/check.hpp"

namespace fp8moe::cli {
namespace {

using scenarios::Key;

// The case flags: scenario keys, as run spells them.
struct KeyFlag {
  const char* flag;
  Key key;
  const char* help;
};
const KeyFlag kCheckFlags[] = {
    {"level", Key::level, "op or layer (default op)"},
    {"pass", Key::pass, "op level: fwd, dgrad or wgrad (default: every output the file holds)"},
    {"plan", Key::plan, "layer level: the plan (default single)"},
    {"mesh", Key::mesh, "the mesh the outputs were computed on (default 1: one device)"},
    {"lhs", Key::lhs, "op level: placements of the lhs, e.g. R or S(1),R"},
    {"rhs", Key::rhs, "op level: placements of the rhs"},
    {"seed", Key::seed, "seed of a grad_out/grad_y the inputs lack (default 0)"},
    {"dist", Key::dist, "distribution of such a generated tensor (default normal)"},
    {"block", Key::block, "quantization block: 64, 128 or 256 (default 128)"},
    {"fp8-format", Key::format, "FP8 format of the codes: e4m3 or e5m2 (default e4m3)"},
    {"pad", Key::pad, "token-group padding: auto, on or off (default auto)"},
    {"reduce-dtype", Key::reduce_dtype, "dtype of the Partial sums: fp32 or bf16 (default fp32)"},
    {"reduce-order", Key::reduce_order, "their order: ascending or ring (default ascending)"},
};

std::string coords_text(const std::vector<std::int64_t>& c) {
  std::string s;
  for (std::size_t i = 0; i < c.size(); ++i) s += (i ? "," : "") + std::to_string(c[i]);
  return "(" + s + ")";
}

void print_table(const sim::CheckReport& r) {
  fmt::print("# fp8moe check: the case {}\n", r.case_key);
  fmt::print("# per model: bitwise-equal fraction; ulp_vs_model, the largest distance from the model's value in ULPs of "
             "the tensor's dtype; sqnr_db of yours against the model's\n");
  fmt::print("{:<8} {:<6} {:<24} {:>9} {:>12} {:>9} {:>11}  {}\n", "tensor", "dtype", "model", "bitwise", "ulp_vs_model",
             "sqnr_db", "mismatches", "first mismatch (model vs yours)");
  for (const sim::TensorCheck& t : r.tensors) {
    for (const sim::ModelMatch& m : t.models) {
      const std::string first =
          m.mismatches ? fmt::format("{} {} vs {}", coords_text(m.first), m.model_value, m.user_value) : std::string("-");
      fmt::print("{:<8} {:<6} {:<24} {:>9.6f} {:>12} {:>9.2f} {:>11}  {}\n", t.tensor, t.dtype, m.model, m.bitwise_frac,
                 std::isinf(m.max_ulp) ? std::string("inf") : fmt::format("{:.0f}", m.max_ulp), m.sqnr_db, m.mismatches, first);
    }
  }
  for (const sim::TensorCheck& t : r.tensors) {
    fmt::print("# {}: {}\n", t.tensor, t.reading);
    for (const std::string& q : t.quantization) fmt::print("# {} quantization: {}\n", t.tensor, q);
  }
}

void print_check_json(const sim::CheckReport& r, const std::string& expect, const std::string& why) {
  sim::Json j;
  j["case_key"] = r.case_key;
  for (const sim::TensorCheck& t : r.tensors) {
    sim::Json jt{{"tensor", t.tensor}, {"shape", t.shape},     {"dtype", t.dtype},
                      {"equal", t.equal},   {"reading", t.reading}, {"quantization", t.quantization}};
    for (const sim::ModelMatch& m : t.models) {
      sim::Json jm{{"model", m.model},
                        {"bitwise_equal_frac", m.bitwise_frac},
                        {"ulp_vs_model", sim::json_number(m.max_ulp)},
                        {"sqnr_db", sim::json_number(m.sqnr_db)},
                        {"mismatches", m.mismatches},
                        {"where", m.where}};
      if (m.mismatches) jm["first"] = {{"at", m.first}, {"model", m.model_value}, {"yours", m.user_value}};
      jt["models"].push_back(jm);
    }
    j["tensors"].push_back(jt);
  }
  if (!expect.empty()) j["expect"] = {{"spec", expect}, {"holds", why.empty()}, {"why", why}};
  sim::print_json(j);
}

}  // namespace

int cmd_check(const Args& args) {
  po::options_description desc("fp8moe check options");
  desc.add_options()("help,h", "show this help")(
      "inputs", po::value<std::string>(), "your inputs: FILE.h5[:GROUP] in fp8moe's layout (README: check your kernel)")(
      "outputs", po::value<std::string>(), "your outputs: FILE.h5[:GROUP] with out/grad_A/grad_W (op) or y/dx/dw1/dw2/dw3 (layer)")(
      "modes", po::value<std::string>(), "the models to compare with (default: hp64, bf16, exact, torchao-emulated, "
                                         "promote-fp32 and hopper-tc in both families)")(
      "expect", po::value<std::string>(), "exit 1 unless every output is bitwise MODE, or (MODE:DB) within DB dB of it")(
      "format", po::value<std::string>()->default_value("table"), "table or json");
  for (const KeyFlag& f : kCheckFlags) desc.add_options()(f.flag, po::value<std::string>(), f.help);
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe check --inputs IN.h5[:G] --outputs OUT.h5[:G] [--level op|layer] "
                             "[--pass P | --plan PLAN] [--mesh M --lhs L --rhs R] [--modes ...] [--expect MODE[:DB]] [--format table|json]")) {
    return 0;
  }
  if (!vm.count("inputs") || !vm.count("outputs")) fail("give --inputs IN.h5[:GROUP] and --outputs OUT.h5[:GROUP]");
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "json") fail("--format ", format, ": use table or json");
  std::vector<scenarios::FlagValue> flags{{Key::inputs, "--inputs", vm["inputs"].as<std::string>()}};
  for (const KeyFlag& f : kCheckFlags) {
    if (vm.count(f.flag)) flags.push_back({f.key, std::string("--") + f.flag, vm[f.flag].as<std::string>()});
  }
  // One case: one device and the single plan unless given.
  if (!vm.count("mesh")) flags.push_back({Key::mesh, "--mesh", "1"});
  if (!vm.count("plan")) flags.push_back({Key::plan, "--plan", "single"});
  std::vector<std::string> models = sim::check_models();
  if (vm.count("modes")) {
    models.clear();
    for (const std::string& m : scenarios::split_values(vm["modes"].as<std::string>(), false)) {
      if (!m.empty()) models.push_back(m);
    }
    if (models.empty()) fail("--modes is empty: give models such as bf16,promote-fp32:deepgemm");
  }
  const sim::CheckReport r = sim::run_check(flags, models, vm["outputs"].as<std::string>());
  const std::string expect = vm.count("expect") ? vm["expect"].as<std::string>() : "";
  const std::string why = expect.empty() ? "" : sim::check_expectation(r, expect);
  if (format == "json") {
    print_check_json(r, expect, why);
  } else {
    print_table(r);
    if (!expect.empty()) fmt::print("# expect {}: {}\n", expect, why.empty() ? "holds" : "does not hold: " + why);
  }
  return why.empty() ? 0 : 1;
}

}  // namespace fp8moe::cli
