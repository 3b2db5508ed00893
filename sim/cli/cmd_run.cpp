// `fp8moe run`: one case on a fake mesh, with its metrics and diagnostics. Op level: one pass with
// explicit operand placements. Layer level: the SwiGLU expert block under a parallel plan. The
// flags become a one-section scenario (scenarios::scenario_from_flags) expanded as a scenario
// file is: the same keys, defaults, checks and messages as `fp8moe sweep`, and the case a sweep of
// the same values would run. `--list` enumerates what the mesh admits.
#include <fmt/core.h>

#include "reference/error.hpp"
#include "scenarios/keys.hpp"
#include "sim/backend/backend.hpp"
#include "sim/cli/command.hpp"
#include "sim/limits/limits.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/enumerate.hpp"
#include "sim/runner/op_runner.hpp"
#include "sim/runner/print_report.hpp"
#include "sim/sweep/expand.hpp"

namespace fp8moe::cli {
namespace {

using namespace fp8moe::sim;
using scenarios::Key;

int list_scenarios(const scenarios::Case& c) {
  const Mesh mesh = Mesh::parse(c.mesh);
  if (c.level == "layer") {
    fmt::print("# layer plans on mesh {}\n", mesh.str());
    for (const PlanChoice& p : enumerate_layer_plans(mesh)) {
      fmt::print("{:<8} {:<8} {}\n", p.name, p.valid ? "valid" : "rejected", p.reason);
    }
    return 0;
  }
  for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
    const Enumeration en = enumerate_op(p, c.op_shape(), mesh, c.reduce);
    fmt::print("# {} on mesh {}: {} direct, {} by redistribution, {} rejected\n", pass_name(p), mesh.str(), en.direct,
               en.redistribute, en.rejected);
    for (const EnumeratedCase& e : en.cases) {
      fmt::print("{:<6} {}={:<12} {}={:<12} {:<12} {}\n", pass_name(p), lhs_name(p), str(e.lhs), rhs_name(p), str(e.rhs),
                 verdict_name(e.decision.verdict),
                 e.decision.verdict == Verdict::direct ? strategy_str(e.decision.strategy, mesh) : e.decision.reason);
    }
  }
  return 0;
}

// Each flag, the scenario key it sets, and its help; the default shown is the registry's (or
// run's own, for the keys that choose the one case run executes).
struct KeyFlag {
  const char* flag;  // long name, ",X" for a short one
  Key key;
  const char* help;
  const char* run_default = nullptr;  // run's own default where it differs from the registry's
};

const KeyFlag kRunFlags[] = {
    {"level", Key::level, "op or layer", "layer"},
    {"mesh", Key::mesh, "device mesh, e.g. tp=2 or dp=2,tp=2", "tp=2"},
    {"pass", Key::pass, "op level: fwd, dgrad or wgrad", "fwd"},
    {"lhs", Key::lhs, "op level: placements of the lhs (A or dOut), e.g. R or S(1),R", "R on every mesh dim"},
    {"rhs", Key::rhs, "op level: placements of the rhs (W, or A for wgrad), e.g. S(1)", "R on every mesh dim"},
    {"plan", Key::plan, "layer level: single, dp, fsdp, tp, ep, fsdp+tp, dp+ep", "tp"},
    {"experts,E", Key::experts, "experts E"},
    {"tokens,M", Key::tokens, "routed tokens M"},
    {"n,N", Key::n, "op level: output features N"},
    {"k,K", Key::k, "op level: input features K"},
    {"dim", Key::dim, "layer level: model dim D"},
    {"hidden", Key::hidden, "layer level: expert hidden H"},
    {"offs", Key::offs, "cumulative token offsets, e.g. 128,256 (fix experts and tokens; default: the routing)"},
    {"routing", Key::routing, "uniform, balanced or zipf:S"},
    {"empty-experts", Key::empty_experts, "experts that receive no tokens, e.g. 0,3"},
    {"dist", Key::dist, "normal, uniform, student-t or outliers"},
    {"seed", Key::seed, "data seed"},
    {"mode", Key::mode, "exact, torchao-emulated, promote-fp32[:deepgemm|:cublas], hopper-tc[:...], bf16 or hp64"},
    {"format", Key::format, "e4m3 or e5m2"},
    {"block", Key::block, "64, 128 or 256"},
    {"pad", Key::pad, "token-group padding: on, off or auto"},
    {"out-dtype", Key::out_dtype, "GEMM output dtype: bf16 or fp32"},
    {"reduce-order", Key::reduce_order, "ascending or ring"},
    {"reduce-dtype", Key::reduce_dtype, "fp32 or bf16 (partial sums rounded)"},
    {"fsdp-gather", Key::fsdp_gather, "layer level: FSDP2 all-gather in bf16 or fp8"},
    {"lr", Key::lr, "layer level: one SGD step with this learning rate"},
    {"backend", Key::backend, "per-rank math: reference, cuda-simt or cuda-cublaslt (fp8moe info lists those built in)"},
};

std::string long_name(const char* flag) {
  const std::string f = flag;
  return f.substr(0, f.find(','));
}

// The flags given (and run's own defaults for the others it needs) as scenario values.
std::vector<scenarios::FlagValue> flag_values(const po::variables_map& vm) {
  std::vector<scenarios::FlagValue> out;
  auto given = [&](const std::string& name) { return vm.count(name) > 0; };
  std::string mesh = given("mesh") ? vm["mesh"].as<std::string>() : "tp=2";
  std::string replicated_text = "R";
  try {
    replicated_text = str(replicated(Mesh::parse(mesh)));
  } catch (const Error&) {
    // the expansion reports the mesh with its flag
  }
  for (const KeyFlag& f : kRunFlags) {
    const std::string name = long_name(f.flag);
    if (given(name)) {
      out.push_back({f.key, "--" + name, vm[name].as<std::string>()});
    } else if (f.run_default) {
      const bool placement = f.key == Key::lhs || f.key == Key::rhs;
      out.push_back({f.key, "--" + name, placement ? replicated_text : f.run_default});
    }
  }
  if (vm["pow2-scales"].as<bool>()) out.push_back({Key::pow2_scales, "--pow2-scales", "true"});
  if (vm["fp8-dispatch"].as<bool>()) out.push_back({Key::fp8_dispatch, "--fp8-dispatch", "true"});
  return out;
}

}  // namespace

int cmd_run(const Args& args) {
  po::options_description desc("fp8moe run options (the keys of scenario files, scenarios/README.md)");
  desc.add_options()("help,h", "show this help")(
      "list", po::bool_switch(), "list the scenarios the mesh admits (valid and rejected with the reason)");
  for (const KeyFlag& f : kRunFlags) {
    const std::string dflt = f.run_default ? f.run_default : std::string(scenarios::syntax(f.key).builtin);
    desc.add_options()(f.flag, po::value<std::string>(), cat(f.help, " (default ", dflt, ")").c_str());
  }
  desc.add_options()("pow2-scales", po::bool_switch(), "power-of-two scales")(
      "fp8-dispatch", po::bool_switch(), "layer level: EP all-to-all in fp8 with 1x128 scales")(
      "threads", po::value<int>()->default_value(0), "OpenMP threads (0 = all cores)");
  po::variables_map vm;
  if (!parse(args, desc, vm,
             "usage: fp8moe run [--level op|layer] --mesh dp=2,tp=2 [--plan fsdp+tp | --pass fwd --lhs R --rhs S(1)] [--list]")) {
    return 0;
  }
  set_threads(vm["threads"].as<int>());
  const bool list = vm["list"].as<bool>();
  // Sizes and memory are checked by the expansion before the routing (a loop over the tokens) and
  // before any rank's tensors: every rank of the fake mesh lives in this process.
  scenarios::ExpandOptions opt;
  opt.host_memory = list ? 0 : available_memory();
  const scenarios::Expansion ex = scenarios::expand({scenarios::scenario_from_flags("fp8moe run", flag_values(vm))}, opt);
  if (ex.cases.size() != 1) {
    fail("fp8moe run runs one case but these flags give ", ex.cases.size(),
         " (a list of values, a seed range or a mode naming both promotion families): give one value per flag, or use "
         "fp8moe sweep");
  }
  const scenarios::Case& c = ex.cases.front();
  if (list) return list_scenarios(c);
  if (!c.rejected.empty()) fail("this ", c.level, " case cannot run: ", c.rejected);
  auto backend = make_backend(c.backend);
  if (c.level == "op") {
    fmt::print("{}", format_report(run_op(c, *backend).report));
  } else {
    fmt::print("{}", format_report(run_layer(c)));
  }
  return 0;
}

}  // namespace fp8moe::cli
