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

namespace fp8moe::cli {
namespace {

// The --save group of a mode: its label with ':' for '/' (an HDF5 path separator).
std::string mode_group(const ModeSpec& m) {
  std::string g = m.label();
  for (char& c : g) c = c == '/' ? ':' : c;
  return g;
}

// The --modes list. Before any work: a family named explicitly that these options cannot compute
// (hopper-tc:cublas outside cuBLASLt's options) is an error; a bare promoted mode keeps the
// families that can, with a note.
std::vector<ModeSpec> parse_modes(const std::string& list, const GemmOptions& base) {
  std::vector<ModeSpec> out;
  for (const std::string& tok : [&] {
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
       }()) {
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

// cmd_gemm in phases: parse the request, lock --save, load or generate the data, check the block
// rules, run every pass in every mode, save.

// What the flags ask for, parsed and checked before any data exists.
struct GemmRequest {
  GemmOptions base;  // format, block, scales, output dtype (padding once the offsets are known)
  std::vector<Pass> passes;
  std::vector<ModeSpec> modes;
  std::uint64_t seed = 0;
  Dist dist = Dist::normal;
  bool allow_nonfinite = false;
  bool any_quantized = false;
  bool save = false;  // --save: every mode's outputs are kept
};

GemmRequest parse_request(const po::variables_map& vm) {
  GemmRequest q;
  q.base.quant.format = parse_format(vm["format"].as<std::string>());
  q.base.quant.block = static_cast<int>(int_flag(vm, "block", 1, kInt32Max));
  q.base.quant.pow2_scales = vm["pow2-scales"].as<bool>();
  check_quant_options(q.base.quant);
  q.base.out = parse_out_dtype(vm["out-dtype"].as<std::string>());
  if (q.base.out == OutDtype::fp64) fail("--out-dtype fp64 is not a GEMM output dtype: use bf16 or fp32");
  q.passes = parse_passes(vm["pass"].as<std::string>());
  q.modes = parse_modes(vm["modes"].as<std::string>(), q.base);
  q.seed = seed_flag(vm);
  q.dist = parse_dist(vm["dist"].as<std::string>());
  q.allow_nonfinite = vm["allow-nonfinite"].as<bool>();
  for (const ModeSpec& ms : q.modes) q.any_quantized = q.any_quantized || is_quantized(ms.mode);
  q.save = vm.count("save") > 0;
  return q;
}

// The memory estimate, before any tensor is generated or run (issue 16 defect 4).
void check_memory(const GemmRequest& q, std::int64_t E, std::int64_t M, std::int64_t N, std::int64_t K) {
  const std::int64_t kept = q.save ? static_cast<std::int64_t>(q.modes.size() * q.passes.size()) : 0;
  std::int64_t need = 0;
  try {
    need = sim::gemm_memory_estimate(E, M, N, K, q.base.quant.block, kept);
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

// --inputs: the user's tensors (grad_out generated when absent), each checked for NaN/Inf.
GemmData load_inputs(const po::variables_map& vm, const GemmRequest& q, std::string& source) {
  for (const char* k : {"experts", "tokens", "offs", "routing", "empty"}) {
    if (vm.count(k)) fail("--", k, " cannot be combined with --inputs: the shapes and offsets come from the file");
  }
  GemmData d = load_gemm_inputs(vm["inputs"].as<std::string>());
  source = vm["inputs"].as<std::string>();
  if (d.grad_out.rank() == 0) {
    d.grad_out = generate({d.A.dim(0), d.W.dim(1)}, q.dist, q.seed, kTensorGradOut);
    source += " (grad_out generated)";
  }
  require_finite(d.A, "A", q.allow_nonfinite);
  require_finite(d.W, "W", q.allow_nonfinite);
  require_finite(d.grad_out, "grad_out", q.allow_nonfinite);
  return d;
}

// --routing (or an explicit shape): offsets routed over E experts, the size checked first.
std::vector<std::int32_t> routed_offsets(const po::variables_map& vm, const GemmRequest& q, int E, std::int64_t M) {
  Routing r = parse_routing(vm.count("routing") ? vm["routing"].as<std::string>() : "uniform");
  if (vm.count("empty")) {
    for (std::int32_t e : parse_int_list(vm["empty"].as<std::string>(), "--empty")) r.empty_experts.push_back(e);
  }
  if (M < 0) fail("--tokens must be >= 0, got ", M);
  const std::int64_t N = vm["n"].as<std::int64_t>(), K = vm["k"].as<std::int64_t>();
  if (N <= 0 || K <= 0) fail("--n and --k must be positive, got N = ", N, ", K = ", K);
  // Before the routing, which loops over every token: offsets are int32, and the case must fit.
  try {
    sim::check_token_offsets(M, E, q.base.quant.block, q.any_quantized);
  } catch (const Error& e) {
    std::string est;
    try {
      est = cat(" (the case would need about ", format_bytes(sim::gemm_memory_estimate(E, M, N, K, q.base.quant.block, 0)), ")");
    } catch (const Error&) {
    }
    fail(e.what(), est, ": use fewer --tokens or --experts");
  }
  check_memory(q, E, M, N, K);
  return make_offsets(M, E, r, q.seed);
}

// The offsets of generated data: --offs, routed, or torchao's padded op-level case; E and M follow
// them.
std::vector<std::int32_t> choose_offsets(const po::variables_map& vm, const GemmRequest& q, int& E, std::int64_t& M) {
  if (vm.count("offs") && (vm.count("routing") || vm.count("empty"))) {
    fail("give either --offs or --routing (with --empty), not both");
  }
  const bool explicit_shape = vm.count("experts") || vm.count("tokens");
  M = vm.count("tokens") ? vm["tokens"].as<std::int64_t>() : 500;
  E = vm.count("experts") ? static_cast<int>(int_flag(vm, "experts", 1, sim::kMaxExperts)) : 3;
  if (vm.count("offs")) {
    std::vector<std::int32_t> offs = parse_int_list(vm["offs"].as<std::string>(), "--offs");
    check_offsets(offs, offs.back());
    if (vm.count("experts") && static_cast<int>(offs.size()) != E) {
      fail("--offs has ", offs.size(), " entries but --experts is ", E, ": give one cumulative offset per expert");
    }
    if (vm.count("tokens") && offs.back() != M) fail("the last of --offs is ", offs.back(), " but --tokens is ", M);
    E = static_cast<int>(offs.size());
    M = offs.back();
    return offs;
  }
  if (vm.count("routing") || explicit_shape) return routed_offsets(vm, q, E, M);
  return {129, 384, 500};  // torchao's padded op-level case
}

// Generated data: the offsets, then A, W and grad_out from the distribution and seed.
GemmData generate_inputs(const po::variables_map& vm, const GemmRequest& q, std::string& source) {
  GemmData d;
  int E = 0;
  std::int64_t M = 0;
  d.offs = choose_offsets(vm, q, E, M);
  if (M < 0) fail("--tokens must be >= 0, got ", M);
  if (E < 1) fail("--experts must be >= 1, got ", E);
  const std::int64_t N = vm["n"].as<std::int64_t>(), K = vm["k"].as<std::int64_t>();
  if (N <= 0 || K <= 0) fail("--n and --k must be positive, got N = ", N, ", K = ", K);
  check_memory(q, E, M, N, K);
  d.A = generate({M, K}, q.dist, q.seed, kTensorA);
  d.W = generate({E, N, K}, q.dist, q.seed, kTensorW);
  d.grad_out = generate({M, N}, q.dist, q.seed, kTensorGradOut);
  source = fmt::format("generated, dist {}, seed {}", dist_name(q.dist), q.seed);
  return d;
}

// Block rules, checked before anything is printed so a bad case fails as one line.
void check_block_rules(const GemmRequest& q, const GemmOptions& base, const GemmData& d, std::int64_t N, std::int64_t K) {
  if (!q.any_quantized) return;
  const int B = base.quant.block;
  if (K % B != 0) {
    fail("K = ", K, " is not a multiple of the quantization block ", B,
         ": weights are quantized in ", B, "x", B, " tiles and activations in 1x", B, " along K; use a K that is a multiple of ", B);
  }
  if (N % B != 0) {
    fail("N = ", N, " is not a multiple of the quantization block ", B,
         ": weights are quantized in ", B, "x", B, " tiles; use an N that is a multiple of ", B);
  }
  const bool wgrad = std::find(q.passes.begin(), q.passes.end(), Pass::wgrad) != q.passes.end();
  if (wgrad && !base.pad) {
    const auto sizes = group_sizes(d.offs);
    for (std::size_t e = 0; e < sizes.size(); ++e) {
      if (sizes[e] % B != 0) {
        fail("expert ", e, " has ", sizes[e], " tokens, not a multiple of the quantization block ", B,
             " (wgrad quantizes 128-token blocks per expert): turn token-group padding on (--pad on or auto)");
      }
    }
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
      ("experts,E", po::value<std::int64_t>(), "number of experts E (default 3)")
      ("tokens,M", po::value<std::int64_t>(), "number of routed tokens M (default 500)")
      ("n,N", po::value<std::int64_t>()->default_value(256), "output features N of the expert weight (E,N,K)")
      ("k,K", po::value<std::int64_t>()->default_value(256), "input features K")
      ("offs", po::value<std::string>(), "explicit cumulative token offsets, e.g. 129,384,500 (default when no routing is given)")
      ("routing", po::value<std::string>(), "uniform, balanced or zipf:S (instead of --offs)")
      ("empty", po::value<std::string>(), "comma list of experts that receive no tokens (with --routing)")
      ("dist", po::value<std::string>()->default_value("normal"), "normal, uniform, student-t or outliers")
      ("seed", po::value<std::string>()->default_value("0"), "data seed")
      ("modes", po::value<std::string>()->default_value("hp64,bf16,exact,torchao-emulated,promote-fp32,hopper-tc"),
       "comma list: hp64, bf16, exact, torchao-emulated, promote-fp32[:deepgemm|:cublas], hopper-tc[:deepgemm|:cublas]")
      ("format", po::value<std::string>()->default_value("e4m3"), "FP8 format: e4m3 or e5m2")
      ("block", po::value<std::int64_t>()->default_value(128), "quantization block: 64, 128 or 256")
      ("pow2-scales", po::bool_switch(), "round scale multipliers down to powers of two")
      ("pad", po::value<std::string>()->default_value("auto"),
       "token-group padding: on, off, or auto (on when a group is not a multiple of the block)")
      ("out-dtype", po::value<std::string>()->default_value("bf16"), "output dtype of the passes: bf16 or fp32")
      ("inputs", po::value<std::string>(), "run on your tensors: FILE.h5[:GROUP] with A, W, offs (grad_out optional)")
      ("save", po::value<std::string>(), "write inputs, offsets and every mode's outputs to FILE.h5")
      ("force", po::bool_switch(), "overwrite an existing --save file (never the --inputs file)")
      ("allow-nonfinite", po::bool_switch(), "propagate NaN/Inf in --inputs instead of rejecting them")
      ("threads", po::value<int>()->default_value(0), "OpenMP threads (0 = all cores)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe gemm [--pass P] [--experts E --tokens M --n N --k K] [--offs ...|--routing ...] [--modes ...] [--save F.h5] [--inputs F.h5[:G]]")) return 0;
  set_threads(vm["threads"].as<int>());

  const GemmRequest q = parse_request(vm);
  std::optional<results::OutputFile> save;
  lock_save(vm, save);
  std::string source;
  const GemmData d = vm.count("inputs") ? load_inputs(vm, q, source) : generate_inputs(vm, q, source);
  const std::int64_t M = d.A.dim(0), K = d.A.dim(1), N = d.W.dim(1), E = d.W.dim(0);
  check_offsets(d.offs, M);
  GemmOptions base = q.base;
  base.pad = resolve_padding(vm["pad"].as<std::string>(), d.offs, base.quant.block);
  if (vm.count("inputs")) check_memory(q, E, M, N, K);
  check_block_rules(q, base, d, N, K);

  print_header(base, d, source);
  std::vector<ModeOutputs> saved;
  for (const ModeSpec& ms : q.modes) saved.push_back({mode_group(ms), ms.mode == Mode::hp64, {}, {}, {}});
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
