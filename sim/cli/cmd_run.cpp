// `fp8moe run`: one case on a fake mesh, with its metrics and diagnostics. Op level: one pass with
// explicit operand placements. Layer level: the SwiGLU expert block under a parallel plan. The
// flags become a one-section scenario (scenarios::scenario_from_flags) expanded as a scenario
// file is: the same keys, defaults, checks and messages as `fp8moe sweep`, and the case a sweep of
// the same values would run. `--list` enumerates what the mesh admits.
#include <fmt/core.h>

#include <optional>
#include <tuple>

#include "reference/error.hpp"
#include "results/h5.hpp"
#include "results/output_file.hpp"
#include "scenarios/keys.hpp"
#include "sim/backend/backend.hpp"
#include "sim/cli/command.hpp"
#include "sim/limits/limits.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/enumerate.hpp"
#include "sim/runner/op_runner.hpp"
#include "sim/runner/print_report.hpp"
#include "sim/sweep/expand.hpp"
#include "sim/sweep/inputs.hpp"

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
    {"inputs", Key::inputs, "run on your tensors: FILE.h5[:GROUP] (op: A, W, grad_out; layer: x, w1, w3, w2, grad_y; "
                            "offs); shapes and offsets come from the file"},
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
    {"backend", Key::backend, "per-rank math: reference, cuda-simt, cuda-cublaslt, cuda-cutlass, or cuda-fastest (cuda-cutlass where built, else cuda-cublaslt; fp8moe info lists those built in)"},
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
  // cuBLASLt and CUTLASS run the tensor cores that hopper-tc:cublas models bit for bit, and no
  // other mode: with those backends and no --mode, run takes that one rather than refusing the default.
  if (!given("mode") && given("backend") && sim::runs_tensor_cores(vm["backend"].as<std::string>())) {
    out.push_back({Key::mode, "--mode", "hopper-tc:cublas"});
  }
  if (vm["pow2-scales"].as<bool>()) out.push_back({Key::pow2_scales, "--pow2-scales", "true"});
  if (vm["fp8-dispatch"].as<bool>()) out.push_back({Key::fp8_dispatch, "--fp8-dispatch", "true"});
  return out;
}

// A result as float32 (bf16 and fp32 values are exact in it) or, for hp64, float64.
void write_result(h5::Group& g, const std::string& name, const TensorD& t, bool fp64) {
  if (fp64) {
    (void)g.write(name, t);
    return;
  }
  (void)g.write(name, to_float(t));
}

void write_result(h5::Group& g, const std::string& name, const TensorF& t, bool) { (void)g.write(name, t); }

void write_offs(h5::Group& g, const std::vector<std::int32_t>& offs) {
  Tensor<std::int32_t> o({static_cast<std::int64_t>(offs.size())});
  o.data = offs;
  (void)g.write("offs", o);
  g.set_attr("offs", offs);
}

// Where a rank's piece lies in the global tensor: [box_begin, box_end) per dim.
void set_box(h5::Object& o, const std::vector<Range>& box) {
  std::vector<std::int32_t> begin, end;
  for (const Range& x : box) {
    begin.push_back(static_cast<std::int32_t>(x.begin));
    end.push_back(static_cast<std::int32_t>(x.end));
  }
  o.set_attr("box_begin", begin);
  o.set_attr("box_end", end);
}

// --save: the inputs under the names --inputs reads, then a group named after the mode holding
// the assembled global results (op: out, grad_A or grad_W; layer: y, dx, dw1, dw2, dw3, w*_new)
// and each rank's own results under ranks/<r>/: op level the local output with its box in the
// global one; layer level its rows of y and dx (and their global rows) and its at-rest shards of
// the gradients (and updated weights) with their boxes;
// attributes name the case. Built in PATH.tmp and published whole.
struct RunSave {
  const scenarios::Case& c;
  results::OutputFile& out;

  h5::File begin() const {
    h5::File f = h5::File::create(out.tmp());
    for (const auto& [k, v] : std::vector<std::pair<const char*, std::string>>{
             {"tool", "fp8moe run"}, {"version", FP8MOE_VERSION}, {"level", c.level}, {"mesh", c.mesh},
             {"placements", c.placements()}, {"plan", c.level == "op" ? c.op_verdict : c.plan}, {"mode", c.mode_label()},
             {"reduce_dtype", reduce_dtype_name(c.reduce.dtype)}, {"reduce_order", reduce_order_name(c.reduce.order)},
             {"case_key", c.key()}, {"inputs", c.inputs.empty() ? "generated" : c.inputs}}) {
      f.set_attr(k, v);
    }
    write_offs(f, c.offs);
    return f;
  }

  void finish(h5::File& f) const {
    f.set_attr("status", "complete");  // written last (reference/SPEC.md 14.1)
    f.close();
    out.publish();
  }

  void op(const OpRun& run) const {
    h5::File f = begin();
    const Pass p = c.pass;
    (void)f.write(p == Pass::fwd ? "A" : "grad_out", run.lhs);
    (void)f.write(p == Pass::wgrad ? "A" : "W", run.rhs);
    h5::Group g = f.create_group(c.mode_label());
    const bool fp64 = c.gemm.mode == Mode::hp64;
    write_result(g, out_name(p), run.out, fp64);
    h5::Group ranks = g.create_group("ranks");
    for (std::size_t r = 0; r < run.local.size(); ++r) {
      if (run.local[r].rank() == 0 && run.local_box[r].empty()) continue;
      h5::Group rg = ranks.create_group(std::to_string(r));
      write_result(rg, out_name(p), run.local[r], fp64);
      set_box(rg, run.local_box[r]);
    }
    finish(f);
  }

  void layer(const LayerRun& run, const LayerInputs& in) const {
    h5::File f = begin();
    for (const auto& [name, t] : {std::pair{"x", &in.x}, std::pair{"w1", &in.W1}, std::pair{"w3", &in.W3},
                                  std::pair{"w2", &in.W2}, std::pair{"grad_y", &in.dy}}) {
      (void)f.write(name, *t);
    }
    h5::Group g = f.create_group(c.mode_label());
    for (const auto& [name, t] : named_outputs(run.out)) write_result(g, name, *t, false);
    h5::Group ranks = g.create_group("ranks");
    for (const LayerLocal& l : run.local) {
      h5::Group rg = ranks.create_group(std::to_string(l.rank));
      (void)rg.write("y", l.y);
      (void)rg.write("dx", l.dx);
      Tensor<std::int64_t> rows({static_cast<std::int64_t>(l.rows.size())});
      rows.data = l.rows;
      (void)rg.write("rows", rows);  // the global token row of each row of y and dx
      for (const auto& [name, t, box] : {std::tuple{"dw1", &l.dw1, &l.w13_box}, std::tuple{"dw3", &l.dw3, &l.w13_box},
                                         std::tuple{"dw2", &l.dw2, &l.w2_box}, std::tuple{"w1_new", &l.w1_new, &l.w13_box},
                                         std::tuple{"w3_new", &l.w3_new, &l.w13_box}, std::tuple{"w2_new", &l.w2_new, &l.w2_box}}) {
        if (t->rank() == 0) continue;  // no SGD step
        h5::Dataset d = rg.write(name, *t);
        set_box(d, *box);
      }
    }
    finish(f);
  }
};

}  // namespace

int cmd_run(const Args& args) {
  po::options_description desc("fp8moe run options (the keys of scenario files, scenarios/README.md)");
  desc.add_options()("help,h", "show this help")(
      "list", po::bool_switch(), "list the scenarios the mesh admits (valid and rejected with the reason)");
  for (const KeyFlag& f : kRunFlags) {
    std::string dflt = f.run_default ? f.run_default : std::string(scenarios::syntax(f.key).builtin);
    if (f.key == Key::mode) dflt += "; hopper-tc:cublas with --backend cuda-cublaslt or cuda-cutlass";
    desc.add_options()(f.flag, po::value<std::string>(), cat(f.help, " (default ", dflt, ")").c_str());
  }
  desc.add_options()("pow2-scales", po::bool_switch(), "power-of-two scales")(
      "fp8-dispatch", po::bool_switch(), "layer level: EP all-to-all in fp8 with 1x128 scales")(
      "allow-nonfinite", po::bool_switch(), "propagate NaN/Inf in --inputs instead of refusing them")(
      "save", po::value<std::string>(), "write the inputs and the results (global, and each rank's at op level) to FILE.h5")(
      "force", po::bool_switch(), "overwrite an existing --save file (never the --inputs file)")(
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
  scenarios::Case c = ex.cases.front();
  if (list) return list_scenarios(c);
  if (!c.rejected.empty()) fail("this ", c.level, " case cannot run: ", c.rejected);
  if (!c.inputs.empty()) c.given = load_inputs(c.inputs, c.level, vm["allow-nonfinite"].as<bool>());
  // --save is checked and locked before the run: a bad path fails at once, not after it.
  std::optional<results::OutputFile> save;
  if (vm.count("save")) {
    results::OutputRequest req;
    req.path = vm["save"].as<std::string>();
    req.flag = "--save";
    req.force = vm["force"].as<bool>();
    if (!c.inputs.empty()) req.inputs.push_back(inputs_file(c.inputs));
    save.emplace(req);
  }
  auto backend = make_backend(c.backend);
  if (c.level == "op") {
    const OpRun run = run_op(c, *backend);
    fmt::print("{}", format_report(run.report));
    fmt::print("# placements as DTensor writes them: {} {}, {} {}\n", lhs_name(c.pass), dtensor_str(c.lhs),
               rhs_name(c.pass), dtensor_str(c.rhs));
    if (save) RunSave{c, *save}.op(run);
  } else {
    LayerRun run;
    fmt::print("{}", format_report(run_layer(c, save ? &run : nullptr)));
    if (save) RunSave{c, *save}.layer(run, layer_inputs(c));
  }
  if (save) fmt::print("# saved inputs and results to {}\n", vm["save"].as<std::string>());
  return 0;
}

}  // namespace fp8moe::cli
