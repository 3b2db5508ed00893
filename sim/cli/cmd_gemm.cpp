// `fp8moe gemm`: the three grouped passes on generated (or user) data in every arithmetic mode,
// with SQNR against hp64 and bf16 per pass and mode. With no flags it runs torchao's padded
// op-level case (E=3, offs [129,384,500], K=N=256).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "reference/datagen.hpp"
#include "reference/gemm.hpp"
#include "reference/groups.hpp"
#include "reference/metrics.hpp"
#include "sim/cli/command.hpp"
#include "sim/cli/flags.hpp"
#include "sim/cli/gemm_io.hpp"
#include "sim/limits/limits.hpp"
#include "sim/sweep/expand.hpp"

namespace fp8moe::cli {
namespace {

// The --modes list. Before any work: a family named explicitly that these options cannot compute
// (hopper-tc:cublas outside cuBLASLt's options) is an error; a bare promoted mode keeps the
// families that can, with a note.
std::vector<std::string> split_modes(const std::string& list) {
  std::vector<std::string> v;
  std::string cur;
  for (char c : list + ",") {
    if (c == ',') {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return v;
}

std::vector<ModeSpec> parse_modes(const std::string& list, const GemmOptions& base) {
  std::vector<ModeSpec> out;
  for (const std::string& tok : split_modes(list)) {
    const std::vector<ModeSpec> specs = parse_mode_spec(tok);
    for (const ModeSpec& m : specs) {
      GemmOptions o = base;
      o.mode = m.mode;
      o.promotion = m.promo;
      const std::string why = mode_unsupported(o);
      if (why.empty()) {
        out.push_back(m);
      } else if (specs.size() == 1) {
        fail("--modes ", tok, ": ", why);
      } else {
        fmt::print(stderr, "note: --modes {}: {} left out ({})\n", tok, m.label(), why);
      }
    }
  }
  if (out.empty()) fail("--modes is empty: give a comma list such as hp64,bf16,exact,torchao-emulated,promote-fp32");
  return out;
}

std::vector<Pass> parse_passes(const std::string& s) {
  if (s == "all") return {Pass::fwd, Pass::dgrad, Pass::wgrad};
  std::vector<Pass> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(parse_pass(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (out.empty()) fail("--pass is empty: use fwd, dgrad, wgrad or all");
  return out;
}

// Op-level floors of torchao's tests for a quantized mode vs the bf16 reference (reference/SPEC.md 9.1).
double op_floor_db(Pass p) { return p == Pass::fwd ? 27.0 : 26.0; }

void require_finite(const TensorF& t, const char* name, bool allow) {
  std::int64_t bad = 0, first = -1;
  for (std::size_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(t.data[i])) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return;
  if (!allow) {
    fail(name, " has ", bad, " non-finite value(s), the first at flat index ", first, " (", t.data[static_cast<std::size_t>(first)],
         "): fix the input, or pass --allow-nonfinite to propagate them into the results");
  }
  fmt::print(stderr, "warning: {} has {} non-finite value(s); metrics of affected outputs will be NaN\n", name, bad);
}

TensorD run_one(Pass p, const GemmData& d, const GemmOptions& opt) {
  switch (p) {
    case Pass::fwd: return grouped_fwd(d.A, d.W, d.offs, opt);
    case Pass::dgrad: return grouped_dgrad(d.grad_out, d.W, d.offs, opt);
    case Pass::wgrad: return grouped_wgrad(d.grad_out, d.A, d.offs, opt);
  }
  return {};
}

std::string fmt_db(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.2f}", v);
}

std::string offs_str(const std::vector<std::int32_t>& offs) {
  std::string s;
  for (std::size_t i = 0; i < offs.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(offs[i]);
  }
  return s;
}

// cmd_gemm in phases: parse the request, lock --save, load the data's shape (--inputs), expand the
// flags as a one-section scenario (the same keys, defaults, checks and messages as a scenario
// file), generate the data, run every pass in every mode, save.

// What the flags ask for beyond the case: the passes and modes to tabulate, and the I/O.
struct GemmRequest {
  std::string passes_text = "all";
  std::vector<Pass> passes;
  std::vector<ModeSpec> modes;
  bool allow_nonfinite = false;
  bool any_quantized = false;
  bool save = false;  // --save: every mode's outputs are kept
};

// The flags of the scenario keys gemm takes (run's spelling; --empty is empty_experts).
struct KeyFlag {
  const char* name;
  scenarios::Key key;
};
const KeyFlag kGemmKeyFlags[] = {
    {"experts", scenarios::Key::experts}, {"tokens", scenarios::Key::tokens}, {"n", scenarios::Key::n},
    {"k", scenarios::Key::k},             {"offs", scenarios::Key::offs},     {"routing", scenarios::Key::routing},
    {"empty", scenarios::Key::empty_experts}, {"dist", scenarios::Key::dist}, {"seed", scenarios::Key::seed},
    {"format", scenarios::Key::format},   {"block", scenarios::Key::block},   {"pad", scenarios::Key::pad},
    {"out-dtype", scenarios::Key::out_dtype},
};

GemmRequest parse_request(const po::variables_map& vm) {
  GemmRequest q;
  q.passes_text = vm["pass"].as<std::string>();
  q.passes = parse_passes(q.passes_text);
  // The modes are listed as given; hopper-tc:cublas is checked against the case's options once
  // the case is expanded (tabulated modes).
  q.allow_nonfinite = vm["allow-nonfinite"].as<bool>();
  q.save = vm.count("save") > 0;
  return q;
}

// The case's shape and numerics: the flags (or, with --inputs, the file's shapes and offsets) as
// a one-section scenario, expanded at op level on one device. Without a shape flag: torchao's
// padded op-level case (offs 129,384,500), gemm's own default as run's is the tp plan.
scenarios::Case expand_flags(const po::variables_map& vm, const GemmRequest& q, const GemmData* inputs,
                             const std::vector<ModeSpec>& modes) {
  using scenarios::Key;
  // One device: lhs and rhs = all enumerate the one placement pair a mesh of no dims has.
  std::vector<scenarios::FlagValue> v{
      {Key::level, "--level", "op"}, {Key::mesh, "--mesh", "1"}, {Key::pass, "--pass", q.passes_text}};
  // One mode stands for the list: a quantized one when any is (the block rules and padding apply).
  std::string mode = "hp64";
  for (const ModeSpec& m : modes) {
    if (is_quantized(m.mode)) {
      mode = m.label();
      break;
    }
  }
  v.push_back({Key::mode, "--modes", mode});
  for (const KeyFlag& f : kGemmKeyFlags) {
    if (vm.count(f.name)) v.push_back({f.key, cat("--", f.name), vm[f.name].as<std::string>()});
  }
  if (vm["pow2-scales"].as<bool>()) v.push_back({Key::pow2_scales, "--pow2-scales", "true"});
  if (inputs) {  // the shapes and offsets of the user's tensors
    v.push_back({Key::offs, "--inputs", offs_str(inputs->offs)});
    v.push_back({Key::n, "--inputs", std::to_string(inputs->W.dim(1))});
    v.push_back({Key::k, "--inputs", std::to_string(inputs->A.dim(1))});
  } else if (!vm.count("experts") && !vm.count("tokens") && !vm.count("offs") && !vm.count("routing") &&
             !vm.count("empty")) {
    v.push_back({Key::offs, "--offs", "129,384,500"});  // torchao's padded op-level case
  }
  const scenarios::Expansion ex = scenarios::expand({scenarios::scenario_from_flags("fp8moe gemm", v)});
  if (ex.cases.empty()) fail("the flags give no case to run");
  scenarios::Case c = ex.cases.front();
  for (const scenarios::Case& x : ex.cases) {
    if (x.seed != c.seed || x.offs != c.offs) {
      fail("fp8moe gemm runs one data set but these flags give several (a seed range or a list of shapes): give one value "
           "per flag, or use fp8moe sweep");
    }
  }
  return c;
}

// The memory estimate, before any tensor is generated or run (issue 16 defect 4).
void check_memory(const GemmRequest& q, const scenarios::Case& c) {
  const std::int64_t E = c.experts, M = c.tokens, N = c.n, K = c.k;
  const std::int64_t kept = q.save ? static_cast<std::int64_t>(q.modes.size() * q.passes.size()) : 0;
  std::int64_t need = 0;
  try {
    need = sim::gemm_memory_estimate(E, M, N, K, c.gemm.quant.block, kept);
  } catch (const Error& e) {
    fail("E=", E, " M=", M, " N=", N, " K=", K, ": ", e.what(), ": use smaller --tokens, --n, --k or --experts");
  }
  sim::require_host_memory(need, cat("fp8moe gemm E=", E, " M=", M, " N=", N, " K=", K),
                           "use smaller --tokens, --n, --k or --experts");
}

// The output is checked and locked before the run: a bad --save fails in a second, not after it.
// (OutputFile holds the lock: it stays where it is made.)
void lock_save(const po::variables_map& vm, std::optional<results::OutputFile>& save) {
  if (vm.count("save")) {
    results::OutputRequest req;
    req.path = vm["save"].as<std::string>();
    req.flag = "--save";
    req.force = vm["force"].as<bool>();
    if (vm.count("inputs")) req.inputs.push_back(inputs_file(vm["inputs"].as<std::string>()));
    save.emplace(req);
  }
}

// --inputs: the user's tensors, each checked for NaN/Inf (grad_out is generated once the case
// gives the seed and distribution).
GemmData load_inputs(const po::variables_map& vm, const GemmRequest& q, std::string& source) {
  for (const char* k : {"experts", "tokens", "offs", "routing", "empty"}) {
    if (vm.count(k)) fail("--", k, " cannot be combined with --inputs: the shapes and offsets come from the file");
  }
  GemmData d = load_gemm_inputs(vm["inputs"].as<std::string>());
  source = vm["inputs"].as<std::string>();
  require_finite(d.A, "A", q.allow_nonfinite);
  require_finite(d.W, "W", q.allow_nonfinite);
  if (d.grad_out.rank() != 0) require_finite(d.grad_out, "grad_out", q.allow_nonfinite);
  return d;
}

// Generated data (or the missing grad_out of --inputs) from the case's distribution and seed.
void generate_inputs(const scenarios::Case& c, GemmData& d, std::string& source) {
  const std::int64_t M = c.tokens, N = c.n, K = c.k;
  if (d.A.rank() == 0) {
    d.offs = c.offs;
    d.A = generate({M, K}, c.dist, c.seed, kTensorA);
    d.W = generate({c.experts, N, K}, c.dist, c.seed, kTensorW);
    source = fmt::format("generated, dist {}, seed {}", dist_name(c.dist), c.seed);
  }
  if (d.grad_out.rank() == 0) {
    d.grad_out = generate({M, N}, c.dist, c.seed, kTensorGradOut);
    if (source.find("generated") == std::string::npos) source += " (grad_out generated)";
  }
}

// One pass in every mode against hp64 and bf16, one line each; the outputs kept for --save.
// Returns whether a quantized mode fell below its floor.
bool run_pass(Pass p, const GemmRequest& q, const GemmOptions& base, const GemmData& d, std::vector<ModeOutputs>& saved) {
  bool below_floor = false;
  GemmOptions o = base;
  const auto timed = [&](const GemmOptions& opt, double& ms) {
    const auto t0 = std::chrono::steady_clock::now();
    TensorD r = run_one(p, d, opt);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  double ms_hp = 0, ms_bf = 0;
  o.mode = Mode::hp64;
  const TensorD ref = timed(o, ms_hp);
  o.mode = Mode::bf16;
  const TensorD ref_bf16 = timed(o, ms_bf);
  for (std::size_t i = 0; i < q.modes.size(); ++i) {
    o.mode = q.modes[i].mode;
    o.promotion = q.modes[i].promo;
    double ms = o.mode == Mode::hp64 ? ms_hp : ms_bf;
    TensorD y = o.mode == Mode::hp64 ? ref : o.mode == Mode::bf16 ? ref_bf16 : timed(o, ms);
    const Metrics vs_hp = compare(ref.data, y.data);
    const Metrics vs_bf = compare(ref_bf16.data, y.data);
    std::string status = "-";
    if (is_quantized(o.mode)) {
      const bool ok = vs_bf.sqnr_db >= op_floor_db(p);  // NaN fails
      status = ok ? fmt::format("ok (floor {:.0f} dB)", op_floor_db(p))
                  : fmt::format("BELOW FLOOR {:.0f} dB", op_floor_db(p));
      below_floor = below_floor || !ok;
    }
    fmt::print("{:<6} {:<22} {:>11} {:>11} {:>10.3e} {:>11.4e} {:>8} {:>10.2f}  {}\n", pass_name(p),
               q.modes[i].label(), fmt_db(vs_hp.sqnr_db), fmt_db(vs_bf.sqnr_db), vs_hp.rel_err, vs_hp.max_abs_err,
               fmt_db(vs_bf.max_ulp), ms, status);
    if (q.save) {
      (p == Pass::fwd ? saved[i].out : p == Pass::dgrad ? saved[i].grad_A : saved[i].grad_W) = std::move(y);
    }
  }
  return below_floor;
}

void print_header(const GemmOptions& base, const GemmData& d, const std::string& source) {
  const std::int64_t M = d.A.dim(0), K = d.A.dim(1), N = d.W.dim(1), E = d.W.dim(0);
  fmt::print("# fp8moe gemm: E={} M={} N={} K={} offs=[{}] ({})\n", E, M, N, K, offs_str(d.offs), source);
  fmt::print("# format={} block={} pow2_scales={} padding={} out={}\n", format_name(base.quant.format), base.quant.block,
             base.quant.pow2_scales ? "on" : "off", base.pad ? "on" : "off", out_dtype_name(base.out));
  fmt::print("{:<6} {:<22} {:>11} {:>11} {:>10} {:>11} {:>8} {:>10}  {}\n", "pass", "mode", "sqnr_hp64", "sqnr_bf16",
             "rel_err", "max_abs", "max_ulp", "time_ms", "status");
}

void save_run(results::OutputFile& save, const GemmOptions& base, const GemmData& d,
              const std::vector<ModeOutputs>& saved, const std::string& source) {
  save_gemm_run(save, d, saved,
                {{"tool", "fp8moe gemm"},
                 {"version", FP8MOE_VERSION},
                 {"source", source},
                 {"format", format_name(base.quant.format)},
                 {"block", std::to_string(base.quant.block)},
                 {"pow2_scales", base.quant.pow2_scales ? "true" : "false"},
                 {"padding", base.pad ? "on" : "off"},
                 {"out_dtype", out_dtype_name(base.out)}});
}

}  // namespace

int cmd_gemm(const Args& args) {
  po::options_description desc("fp8moe gemm options");
  desc.add_options()("help,h", "show this help")
      ("pass", po::value<std::string>()->default_value("all"), "fwd, dgrad, wgrad, a comma list, or all")
      ("experts,E", po::value<std::string>(), "number of experts E (default 2 with --tokens or --routing)")
      ("tokens,M", po::value<std::string>(), "number of routed tokens M (default 256 with --experts or --routing)")
      ("n,N", po::value<std::string>(), "output features N of the expert weight (E,N,K) (default 256)")
      ("k,K", po::value<std::string>(), "input features K (default 256)")
      ("offs", po::value<std::string>(), "explicit cumulative token offsets (default when no shape flag is given: 129,384,500, torchao's padded case)")
      ("routing", po::value<std::string>(), "balanced, uniform or zipf:S (instead of --offs; default balanced)")
      ("empty", po::value<std::string>(), "comma list of experts that receive no tokens (with --routing)")
      ("dist", po::value<std::string>(), "normal, uniform, student-t or outliers (default normal)")
      ("seed", po::value<std::string>(), "data seed (default 0)")
      ("modes", po::value<std::string>()->default_value("hp64,bf16,exact,torchao-emulated,promote-fp32,hopper-tc"),
       "comma list: hp64, bf16, exact, torchao-emulated, promote-fp32[:deepgemm|:cublas], hopper-tc[:deepgemm|:cublas]")
      ("format", po::value<std::string>(), "FP8 format: e4m3 or e5m2 (default e4m3)")
      ("block", po::value<std::string>(), "quantization block: 64, 128 or 256 (default 128)")
      ("pow2-scales", po::bool_switch(), "round scale multipliers down to powers of two")
      ("pad", po::value<std::string>(), "token-group padding: on, off, or auto (default: on when a group is not a multiple of the block)")
      ("out-dtype", po::value<std::string>(), "output dtype of the passes: bf16 or fp32 (default bf16)")
      ("inputs", po::value<std::string>(), "run on your tensors: FILE.h5[:GROUP] with A, W, offs (grad_out optional)")
      ("save", po::value<std::string>(), "write inputs, offsets and every mode's outputs to FILE.h5")
      ("force", po::bool_switch(), "overwrite an existing --save file (never the --inputs file)")
      ("allow-nonfinite", po::bool_switch(), "propagate NaN/Inf in --inputs instead of rejecting them")
      ("threads", po::value<int>()->default_value(0), "OpenMP threads (0 = all cores)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe gemm [--pass P] [--experts E --tokens M --n N --k K] [--offs ...|--routing ...] [--modes ...] [--save F.h5] [--inputs F.h5[:G]]")) return 0;
  set_threads(vm["threads"].as<int>());

  GemmRequest q = parse_request(vm);
  std::optional<results::OutputFile> save;
  lock_save(vm, save);
  std::string source;
  GemmData d;
  if (vm.count("inputs")) d = load_inputs(vm, q, source);
  // Modes first as listed (an unknown mode is named before anything else), then checked against
  // the case's options.
  std::vector<ModeSpec> listed;
  for (const std::string& m : split_modes(vm["modes"].as<std::string>())) {
    for (const ModeSpec& spec : parse_mode_spec(m)) listed.push_back(spec);
  }
  const scenarios::Case c = expand_flags(vm, q, vm.count("inputs") ? &d : nullptr, listed);
  GemmOptions base = c.gemm;
  q.modes = parse_modes(vm["modes"].as<std::string>(), base);
  for (const ModeSpec& ms : q.modes) q.any_quantized = q.any_quantized || is_quantized(ms.mode);
  check_memory(q, c);
  generate_inputs(c, d, source);
  require_finite(d.grad_out, "grad_out", q.allow_nonfinite);

  print_header(base, d, source);
  std::vector<ModeOutputs> saved;
  for (const ModeSpec& ms : q.modes) saved.push_back({ms.label(), ms.mode == Mode::hp64, {}, {}, {}});
  bool below_floor = false;
  for (Pass p : q.passes) below_floor = run_pass(p, q, base, d, saved) || below_floor;
  if (save) {
    save_run(*save, base, d, saved, source);
    fmt::print("# saved inputs and outputs to {}\n", vm["save"].as<std::string>());
  }
  if (below_floor) fmt::print(stderr, "warning: at least one quantized mode is below its op-level floor (reference/SPEC.md 9.1)\n");
  return 0;
}

}  // namespace fp8moe::cli
