// `fp8moe run`: one placement scenario on a fake mesh, with its metrics and diagnostics, before
// the sweep engine exists. Op level: one pass with explicit operand placements. Layer level: the
// SwiGLU expert block under a parallel plan. `--list` enumerates the scenarios a mesh admits.
#include <fmt/core.h>

#include <cmath>

#include "reference/datagen.hpp"
#include "reference/groups.hpp"
#include "sim/backend/backend.hpp"
#include "sim/cli/command.hpp"
#include "sim/cli/flags.hpp"
#include "sim/limits/limits.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/enumerate.hpp"
#include "sim/runner/op_runner.hpp"
#include "sim/runner/print_report.hpp"

namespace fp8moe::cli {
namespace {

using namespace fp8moe::sim;

void parse_mode_label(const std::string& s, GemmOptions& g) {
  const std::vector<ModeSpec> m = parse_mode_spec(s);
  if (m.size() != 1) fail("--mode '", s, "' names both promotion families: write ", s, ":deepgemm or ", s, ":cublas");
  g.mode = m[0].mode;
  g.promotion = m[0].promo;
}

int list_scenarios(const std::string& level, const Mesh& mesh, const OpShape& shape, const ReduceOptions& reduce) {
  if (level == "layer") {
    fmt::print("# layer plans on mesh {}\n", mesh.str());
    for (const PlanChoice& c : enumerate_layer_plans(mesh)) {
      fmt::print("{:<8} {:<8} {}\n", c.name, c.valid ? "valid" : "rejected", c.reason);
    }
    return 0;
  }
  for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
    const Enumeration en = enumerate_op(p, shape, mesh, reduce);
    fmt::print("# {} on mesh {}: {} direct, {} by redistribution, {} rejected\n", pass_name(p), mesh.str(), en.direct,
               en.redistribute, en.rejected);
    for (const EnumeratedCase& c : en.cases) {
      fmt::print("{:<6} {}={:<12} {}={:<12} {:<12} {}\n", pass_name(p), lhs_name(p), str(c.lhs), rhs_name(p), str(c.rhs),
                 verdict_name(c.decision.verdict),
                 c.decision.verdict == Verdict::direct ? strategy_str(c.decision.strategy, mesh) : c.decision.reason);
    }
  }
  return 0;
}

}  // namespace

int cmd_run(const Args& args) {
  po::options_description desc("fp8moe run options");
  desc.add_options()("help,h", "show this help")
      ("level", po::value<std::string>()->default_value("layer"), "op or layer")
      ("mesh", po::value<std::string>()->default_value("tp=2"), "device mesh, e.g. tp=2 or dp=2,tp=2")
      ("list", po::bool_switch(), "list the scenarios the mesh admits (valid and rejected with the reason)")
      ("pass", po::value<std::string>()->default_value("fwd"), "op level: fwd, dgrad or wgrad")
      ("lhs", po::value<std::string>(), "op level: placements of the lhs (A or dOut), e.g. R or S(1),R")
      ("rhs", po::value<std::string>(), "op level: placements of the rhs (W, or A for wgrad), e.g. S(1)")
      ("plan", po::value<std::string>()->default_value("tp"), "layer level: single, dp, fsdp, tp, ep, fsdp+tp, dp+ep")
      ("experts,E", po::value<std::int64_t>()->default_value(2), "experts E")
      ("tokens,M", po::value<std::int64_t>()->default_value(256), "routed tokens M")
      ("n,N", po::value<std::int64_t>()->default_value(256), "op level: output features N")
      ("k,K", po::value<std::int64_t>()->default_value(256), "op level: input features K")
      ("dim", po::value<std::int64_t>()->default_value(256), "layer level: model dim D")
      ("hidden", po::value<std::int64_t>()->default_value(256), "layer level: expert hidden H")
      ("offs", po::value<std::string>(), "cumulative token offsets, e.g. 128,256 (default: routing)")
      ("routing", po::value<std::string>()->default_value("balanced"), "uniform, balanced or zipf:S")
      ("dist", po::value<std::string>()->default_value("normal"), "normal, uniform, student-t or outliers")
      ("seed", po::value<std::string>()->default_value("0"), "data seed")
      ("mode", po::value<std::string>()->default_value("promote-fp32:cublas"),
       "exact, torchao-emulated, promote-fp32[:deepgemm|:cublas], bf16 or hp64")
      ("format", po::value<std::string>()->default_value("e4m3"), "e4m3 or e5m2")
      ("block", po::value<std::int64_t>()->default_value(128), "64, 128 or 256")
      ("pow2-scales", po::bool_switch(), "power-of-two scales")
      ("pad", po::value<std::string>()->default_value("auto"), "token-group padding: on, off or auto")
      ("reduce-order", po::value<std::string>()->default_value("ascending"), "ascending or ring")
      ("reduce-dtype", po::value<std::string>()->default_value("fp32"), "fp32 or bf16 (partial sums rounded)")
      ("fsdp-gather", po::value<std::string>()->default_value("bf16"), "layer level: FSDP2 all-gather in bf16 or fp8")
      ("fp8-dispatch", po::bool_switch(), "layer level: EP all-to-all in fp8 with 1x128 scales")
      ("lr", po::value<float>()->default_value(0.0f), "layer level: one SGD step with this learning rate")
      ("backend", po::value<std::string>()->default_value("reference"), "per-rank math: reference, cuda-simt or cuda-cublaslt (fp8moe info lists those built in)")
      ("threads", po::value<int>()->default_value(0), "OpenMP threads (0 = all cores)");
  po::variables_map vm;
  if (!parse(args, desc, vm,
             "usage: fp8moe run [--level op|layer] --mesh dp=2,tp=2 [--plan fsdp+tp | --pass fwd --lhs R --rhs S(1)] [--list]")) {
    return 0;
  }
  set_threads(vm["threads"].as<int>());
  const std::string level = vm["level"].as<std::string>();
  if (level != "op" && level != "layer") fail("--level '", level, "': use op or layer");
  const Mesh mesh = Mesh::parse(vm["mesh"].as<std::string>());

  GemmOptions g;
  parse_mode_label(vm["mode"].as<std::string>(), g);
  g.quant.format = parse_format(vm["format"].as<std::string>());
  g.quant.block = static_cast<int>(int_flag(vm, "block", 1, kInt32Max));
  g.quant.pow2_scales = vm["pow2-scales"].as<bool>();
  check_quant_options(g.quant);
  ReduceOptions reduce;
  reduce.order = parse_reduce_order(vm["reduce-order"].as<std::string>());
  reduce.dtype = parse_reduce_dtype(vm["reduce-dtype"].as<std::string>());

  const int E = static_cast<int>(int_flag(vm, "experts", 1, kMaxExperts));
  const std::int64_t M = vm["tokens"].as<std::int64_t>();
  const std::uint64_t seed = seed_flag(vm);
  std::vector<std::int32_t> offs;
  if (vm.count("offs")) {
    offs = parse_int_list(vm["offs"].as<std::string>(), "--offs");
    check_offsets(offs, offs.back());
    if (static_cast<int>(offs.size()) != E) fail("--offs has ", offs.size(), " entries but --experts is ", E);
  }
  // Sizes and memory before the routing (a loop over the tokens) and before any rank's tensors:
  // every rank of the fake mesh lives in this process (issue 16 defect 4: --mesh dp=100000).
  CaseSize size;
  size.layer = level == "layer";
  size.pass = level == "op" ? parse_pass(vm["pass"].as<std::string>()) : Pass::fwd;
  size.world = mesh.world();
  size.experts = E;
  size.tokens = offs.empty() ? M : offs.back();
  size.n = vm["n"].as<std::int64_t>();
  size.k = vm["k"].as<std::int64_t>();
  size.dim = vm["dim"].as<std::int64_t>();
  size.hidden = vm["hidden"].as<std::int64_t>();
  const std::string what = cat("this ", level, " case on mesh ", mesh.str(), " (E=", E, " M=", size.tokens, ")");
  std::int64_t need = 0;
  try {
    need = host_memory_estimate(size);
  } catch (const Error& e) {
    fail(what, ": ", e.what(), ": use smaller --tokens and dims");
  }
  try {
    check_token_offsets(size.tokens, E, g.quant.block, is_quantized(g.mode));
  } catch (const Error& e) {
    fail(e.what(), " (the case would need about ", format_bytes(need), "): use fewer --tokens or --experts");
  }
  if (!vm["list"].as<bool>()) require_host_memory(need, what, "use smaller --tokens and dims, or a smaller --mesh");
  if (offs.empty()) offs = make_offsets(M, E, parse_routing(vm["routing"].as<std::string>()), seed);
  g.pad = resolve_padding(vm["pad"].as<std::string>(), offs, g.quant.block);

  OpShape shape;
  shape.E = E;
  shape.M = offs.back();
  shape.N = vm["n"].as<std::int64_t>();
  shape.K = vm["k"].as<std::int64_t>();
  if (vm["list"].as<bool>()) return list_scenarios(level, mesh, shape, reduce);

  if (level == "op") {
    OpScenario sc;
    sc.mesh = mesh.str();
    sc.pass = parse_pass(vm["pass"].as<std::string>());
    const Placements R = replicated(mesh);
    sc.lhs = vm.count("lhs") ? parse_placements(vm["lhs"].as<std::string>(), mesh.ndim()) : R;
    sc.rhs = vm.count("rhs") ? parse_placements(vm["rhs"].as<std::string>(), mesh.ndim()) : R;
    sc.shape = shape;
    sc.offs = offs;
    sc.dist = parse_dist(vm["dist"].as<std::string>());
    sc.seed = seed;
    sc.gemm = g;
    sc.reduce = reduce;
    auto backend = make_backend(vm["backend"].as<std::string>());
    fmt::print("{}", format_report(run_op(sc, *backend).report));
    return 0;
  }
  LayerConfig cfg;
  cfg.mesh = mesh.str();
  cfg.plan = vm["plan"].as<std::string>();
  cfg.experts = E;
  cfg.dim = vm["dim"].as<std::int64_t>();
  cfg.hidden = vm["hidden"].as<std::int64_t>();
  cfg.tokens = offs.back();
  cfg.offs = offs;
  cfg.dist = parse_dist(vm["dist"].as<std::string>());
  cfg.seed = seed;
  cfg.gemm = g;
  cfg.reduce = reduce;
  cfg.fsdp_gather = parse_gather_dtype(vm["fsdp-gather"].as<std::string>());
  cfg.fp8_dispatch = vm["fp8-dispatch"].as<bool>();
  cfg.lr = vm["lr"].as<float>();
  if (!std::isfinite(cfg.lr) || cfg.lr < 0) {
    fail("--lr ", vm["lr"].as<float>(), ": the SGD learning rate must be a finite number >= 0 (0: no step), e.g. --lr 0.1");
  }
  cfg.backend = vm["backend"].as<std::string>();
  (void)make_backend(cfg.backend);  // an unknown backend fails before any work
  fmt::print("{}", format_report(run_layer(cfg)));
  return 0;
}

}  // namespace fp8moe::cli
