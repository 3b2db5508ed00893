#include "sim/sweep/expand.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <type_traits>

#include "reference/checked.hpp"
#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "sim/backend/backend.hpp"
#include "sim/limits/limits.hpp"
#include "sim/rules/enumerate.hpp"

namespace fp8moe::scenarios {

using namespace fp8moe::sim;

namespace {

// Built-in value of each key when neither the scenario nor [defaults] sets it.
const std::map<std::string, std::string>& builtin_defaults() {
  static const std::map<std::string, std::string> d{
      {"level", "op"},          {"mesh", "1"},           {"plan", "all"},          {"placements", "direct"},
      {"lhs", "all"},           {"rhs", "all"},          {"pass", "all"},          {"mode", "promote-fp32:cublas"},
      {"backend", "reference"}, {"experts", "2"},        {"tokens", "256"},        {"n", "256"},
      {"k", "256"},             {"dim", "256"},          {"hidden", "256"},        {"routing", "balanced"},
      {"offs", "none"},         {"empty_experts", "none"}, {"dist", "normal"},     {"seed", "0"},
      {"format", "e4m3"},       {"block", "128"},        {"pow2_scales", "false"}, {"pad", "auto"},
      {"fsdp_gather", "bf16"},  {"reduce_dtype", "fp32"}, {"reduce_order", "ascending"},
      {"fp8_dispatch", "false"}, {"lr", "0"},            {"description", ""}};
  return d;
}

// Rethrows a value's parse error with its file and line.
template <class F>
auto at(const Value& v, const std::string& key, F&& f) -> decltype(f(v.text)) {
  try {
    return f(v.text);
  } catch (const Error& e) {
    fail(v.where(), ": ", key, " = ", v.text, ": ", e.what());
  }
}

// An integer key's value, parsed in 64 bits and range-checked before any narrowing (experts =
// 2^32+2 must not run as 2).
std::int64_t parse_int(const std::string& s, std::int64_t lo, std::int64_t hi) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(s, &used);
  } catch (const std::out_of_range&) {
    fail("'", s, "' is beyond 64 bits: use at most ", hi);
  } catch (const std::exception&) {
    fail("'", s, "' is not an integer");
  }
  if (used != s.size()) fail("'", s, "' is not an integer");
  if (x < lo) fail("must be >= ", lo);
  if (x > hi) fail("exceeds the limit ", hi, ": use at most ", hi);
  return x;
}

bool parse_bool(const std::string& s) {
  if (s == "true" || s == "on" || s == "yes" || s == "1") return true;
  if (s == "false" || s == "off" || s == "no" || s == "0") return false;
  fail("use true or false (on/off, yes/no, 1/0)");
}

// "0..3" -> 0,1,2,3 for the integer axes (seeds); a single integer otherwise.
std::vector<Value> expand_ranges(const std::vector<Value>& vals, const std::string& key) {
  std::vector<Value> out;
  for (const Value& v : vals) {
    const auto dots = v.text.find("..");
    if (dots == std::string::npos) {
      out.push_back(v);
      continue;
    }
    const std::int64_t a = at(v, key, [&](const std::string& s) { return parse_int(s.substr(0, dots), 0, kInt64Max); });
    const std::int64_t b = at(v, key, [&](const std::string& s) { return parse_int(s.substr(dots + 2), 0, kInt64Max); });
    if (b < a || b - a > 10000) fail(v.where(), ": ", key, " = ", v.text, ": a range A..B needs A <= B, at most 10001 values");
    // Counted, not `x <= b; ++x`: that would overflow past b = 2^63 - 1.
    for (std::int64_t i = 0; i <= b - a; ++i) out.push_back(Value{std::to_string(a + i), v.file, v.line});
  }
  return out;
}


std::int64_t round_up(std::int64_t n, std::int64_t b) { return (n + b - 1) / b * b; }

bool plan_has(const std::string& plan, const char* part) {
  std::string p = "+" + plan + "+";
  return p.find(std::string("+") + part + "+") != std::string::npos;
}

// One scenario's resolved key values: the per-key lists the product walks over.
struct Axes {
  std::map<std::string, std::vector<Value>> v;
  const std::vector<Value>& operator[](const std::string& k) const { return v.at(k); }
};

// The number of cases a scenario's axes multiply to, refused past max_cases before the product is
// built (seed = 0..10000 with four modes and 30 shapes is 1.2 million cases).
void check_product_size(const Section& sec, const std::vector<std::pair<const char*, std::size_t>>& axes,
                        std::int64_t max_cases) {
  std::int64_t n = 1;
  std::string named;
  for (const auto& [name, size] : axes) {
    if (size > 1) named += cat(named.empty() ? "" : " x ", name, " ", size);
    n = checked_mul(n, static_cast<std::int64_t>(size), "cases");  // each factor is a list in memory: no overflow
    if (n > max_cases) {
      fail(sec.file, ":", sec.line, ": scenario ", sec.name, " expands to more than the limit of ", max_cases, " cases (",
           named, " ...): use fewer values per axis or split it into several scenarios");
    }
  }
}

// Machine-independent limits of one case (int32 offsets, 64-bit memory estimate) and, with
// opt.host_memory, the machine's memory for the CPU reference: checked before the routing, which
// loops over the tokens, so that `fp8moe list` refuses a huge case at once.
void check_case_size(const Case& c, const Section& sec, const ExpandOptions& opt) {
  const std::string where = cat(sec.file, ":", sec.line, ": scenario ", sec.name, ": ");
  std::int64_t need = 0;
  try {
    need = c.memory_estimate();
  } catch (const Error& e) {
    fail(where, c.level, " case E=", c.experts, " M=", c.tokens, c.level == "op" ? cat(" N=", c.n, " K=", c.k) : cat(" D=", c.dim, " H=", c.hidden),
         " on mesh ", c.mesh, ": ", e.what(), ": use smaller tokens/dims");
  }
  try {
    check_token_offsets(c.tokens, c.experts, c.gemm.quant.block, is_quantized(c.gemm.mode));
  } catch (const Error& e) {
    fail(where, e.what(), " (the case would need about ", format_bytes(need), "): use fewer tokens or experts");
  }
  if (opt.host_memory > 0 && c.backend == "reference" && need > opt.host_memory) {
    fail(where, "case (", c.key(), ") needs about ", format_bytes(need), " (estimate) but this machine has ",
         format_bytes(opt.host_memory), " available: use smaller tokens/dims, fewer ranks, or a GPU backend");
  }
}

}  // namespace

bool glob_match(const std::string& p, const std::string& s) {
  std::size_t pi = 0, si = 0, star = std::string::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi, ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = si;
    } else if (star != std::string::npos) {
      pi = star + 1, si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string Case::mode_label() const { return fp8moe::mode_label(gemm.mode, gemm.promotion); }

std::string Case::placements() const {
  if (level == "op") return cat(lhs_name(pass), "=", str(lhs), " ", rhs_name(pass), "=", str(rhs));
  if (!rejected.empty()) return "";
  return make_layer_plan(plan, Mesh::parse(mesh)).describe();
}

std::string Case::key() const {
  std::string key = cat("level=", level, " mesh=", mesh);
  if (level == "op") {
    key += cat(" pass=", pass_name(pass), " ", lhs_name(pass), "=", str(lhs), " ", rhs_name(pass), "=", str(rhs),
             " E=", experts, " M=", tokens, " N=", n, " K=", k);
  } else {
    key += cat(" plan=", plan, " E=", experts, " M=", tokens, " D=", dim, " H=", hidden);
  }
  std::string o;
  for (std::size_t i = 0; i < offs.size(); ++i) o += (i ? "," : "") + std::to_string(offs[i]);
  key += cat(" offs=", o, " dist=", dist_name(dist), " seed=", seed, " mode=", mode_label(), " backend=", backend);
  if (is_quantized(gemm.mode)) {
    key += cat(" format=", format_name(gemm.quant.format), " block=", gemm.quant.block,
             " pow2=", gemm.quant.pow2_scales ? 1 : 0, " pad=", gemm.pad ? 1 : 0);
  }
  if (world > 1) key += cat(" reduce=", reduce_dtype_name(reduce.dtype), "/", reduce_order_name(reduce.order));
  if (level == "layer") {
    if (plan_has(plan, "fsdp")) key += cat(" fsdp_gather=", gather_dtype_name(fsdp_gather));
    if (plan_has(plan, "ep")) key += cat(" fp8_dispatch=", fp8_dispatch ? 1 : 0);
    if (lr != 0) key += cat(" lr=", lr);
  }
  return key;
}

std::int64_t Case::memory_estimate() const {
  CaseSize s;
  s.layer = level == "layer";
  s.pass = pass;
  s.world = world;
  s.experts = experts;
  s.tokens = tokens;
  s.n = n;
  s.k = k;
  s.dim = dim;
  s.hidden = hidden;
  return host_memory_estimate(s);
}

double Case::flops() const {
  if (level == "op") return 3 * 2.0 * static_cast<double>(tokens) * static_cast<double>(n) * static_cast<double>(k);
  return 3 * 18.0 * static_cast<double>(tokens) * static_cast<double>(dim) * static_cast<double>(hidden);
}

namespace {

// expand() in phases, per scenario: resolve its values (resolve_axes, parse_values), cross them
// (cross_product), resolve each element into cases (resolve_case, then expand_op_case or
// expand_layer_case) and filter those into the expansion (admit).

// ---- Resolve: a scenario's values per key, each parsed and checked once, with its line.

// Key values: the scenario's own, else [defaults], else built in (located at the header).
Axes resolve_axes(const ScenarioFile& f, const Section& sec) {
  Axes ax;
  for (const std::string& key : scenario_keys()) {
    if (const Entry* e = sec.find(key)) {
      ax.v[key] = e->values;
    } else if (const Entry* d = f.defaults.find(key)) {
      ax.v[key] = d->values;
    } else {
      ax.v[key] = {Value{builtin_defaults().at(key), sec.file, sec.line}};
    }
  }
  ax.v["seed"] = expand_ranges(ax["seed"], "seed");
  if (ax["offs"].front().text != "none" && (sec.find("experts") || sec.find("tokens"))) {
    const Value& v = sec.find("experts") ? sec.find("experts")->values.front() : sec.find("tokens")->values.front();
    fail(v.where(), ": give either offs (which fixes experts and tokens) or experts/tokens with a routing, not both");
  }
  return ax;
}

// A scenario's parsed values: the lists the product walks over. The keys the product takes as
// text (level, plan, lhs, rhs, placements, backend, pad) stay in Axes, checked.
struct Values {
  std::vector<Mesh> meshes;
  std::vector<Pass> passes;
  std::vector<ModeSpec> modes;
  std::vector<std::int64_t> experts, tokens, ns, ks, dims, hiddens, blocks;
  std::vector<std::uint64_t> seeds;
  std::vector<Routing> routings;
  bool offs_given = false;
  std::vector<std::vector<std::int32_t>> offs_list;  // when offs_given
  std::vector<std::vector<int>> empties;
  std::vector<Dist> dists;
  std::vector<Fp8Format> formats;
  std::vector<bool> pow2s, dispatches;
  std::vector<GatherDtype> gathers;
  std::vector<ReduceDtype> rdtypes;
  std::vector<ReduceOrder> rorders;
  std::vector<float> lrs;
};

// Every value of `key` through `parse`, an error naming the value's line.
template <class F>
auto parse_each(const Axes& ax, const std::string& key, F&& parse) {
  std::vector<std::decay_t<decltype(parse(std::string()))>> out;
  for (const Value& v : ax[key]) out.push_back(at(v, key, parse));
  return out;
}

std::vector<std::int32_t> parse_offs(const std::string& s) {
  std::string t = s;
  if (!t.empty() && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  auto o = parse_int_list(t, "offs");
  check_offsets(o, o.back());
  return o;
}

std::vector<int> parse_empty_experts(const std::string& s) {
  if (s == "none") return {};
  const auto l = parse_int_list(s, "empty_experts");
  return {l.begin(), l.end()};
}

float parse_lr(const std::string& s) {
  std::size_t used = 0;
  float x = 0;
  try {
    x = std::stof(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !std::isfinite(x) || x < 0) fail("use a finite number >= 0");
  return x;
}

// Each plan named must exist, and some mesh of the scenario must hold it when a level is layer.
void check_plans(const Axes& ax, const std::vector<Mesh>& meshes) {
  for (const Value& v : ax["plan"]) {
    if (v.text == "all") continue;
    const auto& names = layer_plan_names();
    if (std::find(names.begin(), names.end(), v.text) == names.end()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      fail(v.where(), ": plan = ", v.text, ": use all or one of ", all);
    }
    bool some_mesh = false;
    std::string why;
    for (const Mesh& m : meshes) {
      try {
        (void)make_layer_plan(v.text, m);
        some_mesh = true;
      } catch (const Error& e) {
        why = e.what();
      }
    }
    const bool layer_used = std::any_of(ax["level"].begin(), ax["level"].end(), [](const Value& l) { return l.text == "layer"; });
    if (layer_used && !some_mesh) fail(v.where(), ": plan = ", v.text, ": no mesh of this scenario can hold it (", why, ")");
  }
}

// What runs where: level, mesh, plan, placements, pass, mode, backend.
void parse_layout(const Axes& ax, Values& out) {
  for (const Value& v : ax["level"]) {
    if (v.text != "op" && v.text != "layer") fail(v.where(), ": level = ", v.text, ": use op or layer");
  }
  out.meshes = parse_each(ax, "mesh", [](const std::string& s) { return Mesh::parse(s); });
  check_plans(ax, out.meshes);
  for (const Value& v : ax["placements"]) {
    if (v.text != "direct" && v.text != "redistribute" && v.text != "all") {
      fail(v.where(), ": placements = ", v.text, ": use direct, redistribute or all");
    }
  }
  for (const Value& v : ax["pass"]) {
    if (v.text == "all") {
      for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) out.passes.push_back(p);
    } else {
      out.passes.push_back(at(v, "pass", [](const std::string& s) { return parse_pass(s); }));
    }
  }
  for (const Value& v : ax["mode"]) {
    for (const ModeSpec& m : at(v, "mode", parse_mode_spec)) out.modes.push_back(m);
  }
  for (const Value& v : ax["backend"]) {
    at(v, "backend", [](const std::string& s) { return backend_unsupported(s, GemmOptions{}); });
  }
}

// The data: sizes, seeds, blocks, routing or offsets, empty experts, distribution.
void parse_data(const Axes& ax, Values& out) {
  auto ints = [&](const std::string& key, std::int64_t lo, std::int64_t hi) {
    return parse_each(ax, key, [&](const std::string& s) { return parse_int(s, lo, hi); });
  };
  // Sizes stay 64-bit here: the case's checks (check_case_size) name the int32 offsets limit
  // and the memory estimate, which bound them and their products.
  out.experts = ints("experts", 1, kMaxExperts);
  out.tokens = ints("tokens", 0, kInt64Max);
  out.ns = ints("n", 1, kInt64Max);
  out.ks = ints("k", 1, kInt64Max);
  out.dims = ints("dim", 1, kInt64Max);
  out.hiddens = ints("hidden", 1, kInt64Max);
  out.blocks = ints("block", 1, kInt32Max);
  for (std::int64_t s : ints("seed", 0, kInt64Max)) out.seeds.push_back(static_cast<std::uint64_t>(s));
  for (std::size_t i = 0; i < out.blocks.size(); ++i) {
    QuantOptions q;
    q.block = static_cast<int>(out.blocks[i]);  // <= kInt32Max: fits an int
    at(ax["block"][i], "block", [&](const std::string&) { check_quant_options(q); return 0; });
  }
  out.routings = parse_each(ax, "routing", [](const std::string& s) { return parse_routing(s); });
  out.offs_given = ax["offs"].front().text != "none";
  if (out.offs_given) out.offs_list = parse_each(ax, "offs", parse_offs);
  out.empties = parse_each(ax, "empty_experts", parse_empty_experts);
  out.dists = parse_each(ax, "dist", [](const std::string& s) { return parse_dist(s); });
}

// The numerics: FP8 format and scales, padding, the collectives' dtypes and order, the step.
void parse_numerics(const Axes& ax, Values& out) {
  out.formats = parse_each(ax, "format", [](const std::string& s) { return parse_format(s); });
  out.pow2s = parse_each(ax, "pow2_scales", parse_bool);
  out.dispatches = parse_each(ax, "fp8_dispatch", parse_bool);
  for (const Value& v : ax["pad"]) {
    if (v.text != "auto" && v.text != "on" && v.text != "off") fail(v.where(), ": pad = ", v.text, ": use auto, on or off");
  }
  out.gathers = parse_each(ax, "fsdp_gather", [](const std::string& s) { return parse_gather_dtype(s); });
  out.rdtypes = parse_each(ax, "reduce_dtype", [](const std::string& s) { return parse_reduce_dtype(s); });
  out.rorders = parse_each(ax, "reduce_order", [](const std::string& s) { return parse_reduce_order(s); });
  out.lrs = parse_each(ax, "lr", parse_lr);
}

// Validate every value once, with its line, before any product is formed.
Values parse_values(const Axes& ax) {
  Values v;
  parse_layout(ax, v);
  parse_data(ax, v);
  parse_numerics(ax, v);
  return v;
}

// The factors of the product, as check_product_size names them.
std::vector<std::pair<const char*, std::size_t>> product_factors(const Axes& ax, const Values& v) {
  return {{"level", ax["level"].size()}, {"mesh", v.meshes.size()}, {"plan", ax["plan"].size()},
          {"pass", v.passes.size()}, {"lhs", ax["lhs"].size()}, {"rhs", ax["rhs"].size()},
          {"placements", ax["placements"].size()}, {"mode", v.modes.size()}, {"backend", ax["backend"].size()},
          {"experts x tokens (or offs)", v.offs_given ? v.offs_list.size() : v.experts.size() * v.tokens.size()},
          {"n", v.ns.size()}, {"k", v.ks.size()}, {"dim", v.dims.size()}, {"hidden", v.hiddens.size()},
          {"routing x empty_experts", v.routings.size() * v.empties.size()}, {"dist", v.dists.size()},
          {"seed", v.seeds.size()}, {"format", v.formats.size()}, {"block", v.blocks.size()},
          {"pow2_scales", v.pow2s.size()}, {"pad", ax["pad"].size()}, {"fsdp_gather", v.gathers.size()},
          {"reduce_dtype", v.rdtypes.size()}, {"reduce_order", v.rorders.size()},
          {"fp8_dispatch", v.dispatches.size()}, {"lr", v.lrs.size()}};
}

// ---- The product, outermost key first.

// One element of the product: a partially built case with the choices that are resolved only once
// every key is known.
struct Proto {
  Case c;
  std::string lhs, rhs, filter;  // op placements ("all" or a list) and the verdict filter
  Routing routing;               // unless offs were given
  bool pad_auto = false;
};

// Every element of `protos` with every value of one axis.
template <class Range, class Set>
void cross(std::vector<Proto>& protos, const Range& values, Set&& set) {
  std::vector<Proto> next;
  for (const Proto& c : protos) {
    for (const auto& x : values) {
      Proto d = c;
      set(d, x);
      next.push_back(std::move(d));
    }
  }
  protos = std::move(next);
}

std::vector<std::string> texts(const std::vector<Value>& values) {
  std::vector<std::string> out;
  for (const Value& v : values) out.push_back(v.text);
  return out;
}

// The keys of what runs where: level, mesh, plan, pass, placements, mode, backend.
void cross_layout(std::vector<Proto>& protos, const Axes& ax, const Values& v, const ExpandOptions& opt) {
  cross(protos, ax["level"], [](Proto& p, const Value& x) { p.c.level = x.text; });
  cross(protos, v.meshes, [](Proto& p, const Mesh& m) { p.c.mesh = m.str(); p.c.world = m.world(); });
  cross(protos, texts(ax["plan"]), [](Proto& p, const std::string& x) { p.c.plan = x; });
  cross(protos, v.passes, [](Proto& p, Pass x) { p.c.pass = x; });
  struct PlacementPick {
    std::string lhs, rhs, filter;
  };
  std::vector<PlacementPick> picks;
  for (const auto& l : texts(ax["lhs"])) {
    for (const auto& r : texts(ax["rhs"])) {
      for (const auto& p : texts(ax["placements"])) picks.push_back({l, r, p});
    }
  }
  cross(protos, picks, [](Proto& p, const PlacementPick& x) { p.lhs = x.lhs, p.rhs = x.rhs, p.filter = x.filter; });
  cross(protos, v.modes, [](Proto& p, const ModeSpec& m) { p.c.gemm.mode = m.mode, p.c.gemm.promotion = m.promo; });
  std::vector<std::string> backends;
  for (const Value& x : ax["backend"]) backends.push_back(opt.backend_override.empty() ? x.text : opt.backend_override);
  cross(protos, backends, [](Proto& p, const std::string& b) { p.c.backend = b; });
}

// The keys of the data: shape, routing, distribution, seed.
void cross_data(std::vector<Proto>& protos, const Axes& ax, const Values& v) {
  struct Shape {
    int E;
    std::int64_t M;
    std::vector<std::int32_t> offs;
    bool explicit_offs;
  };
  std::vector<Shape> shapes;
  if (v.offs_given) {
    for (const auto& o : v.offs_list) shapes.push_back({static_cast<int>(o.size()), o.back(), o, true});
  } else {
    for (auto E : v.experts) {
      for (auto M : v.tokens) shapes.push_back({static_cast<int>(E), M, {}, false});
    }
  }
  cross(protos, shapes, [](Proto& p, const Shape& s) { p.c.experts = s.E, p.c.tokens = s.M, p.c.offs = s.offs, p.c.routing = s.explicit_offs ? "explicit" : ""; });
  cross(protos, v.ns, [](Proto& p, std::int64_t x) { p.c.n = x; });
  cross(protos, v.ks, [](Proto& p, std::int64_t x) { p.c.k = x; });
  cross(protos, v.dims, [](Proto& p, std::int64_t x) { p.c.dim = x; });
  cross(protos, v.hiddens, [](Proto& p, std::int64_t x) { p.c.hidden = x; });
  struct RoutingPick {
    Routing r;
    std::vector<int> empty;
    std::string text;
  };
  std::vector<RoutingPick> rpicks;
  for (std::size_t i = 0; i < v.routings.size(); ++i) {
    for (const auto& e : v.empties) rpicks.push_back({v.routings[i], e, ax["routing"][i].text});
  }
  cross(protos, rpicks, [](Proto& p, const RoutingPick& r) {
    if (p.c.routing == "explicit") return;
    p.routing = r.r;
    p.routing.empty_experts = r.empty;
    p.c.routing = routing_name(p.routing);
  });
  cross(protos, v.dists, [](Proto& p, Dist d) { p.c.dist = d; });
  cross(protos, v.seeds, [](Proto& p, std::uint64_t s) { p.c.seed = s; });
}

// The keys of the numerics: format, block, scales, padding, collectives, dispatch, step.
void cross_numerics(std::vector<Proto>& protos, const Axes& ax, const Values& v) {
  cross(protos, v.formats, [](Proto& p, Fp8Format f) { p.c.gemm.quant.format = f; });
  cross(protos, v.blocks, [](Proto& p, std::int64_t b) { p.c.gemm.quant.block = static_cast<int>(b); });
  cross(protos, v.pow2s, [](Proto& p, bool b) { p.c.gemm.quant.pow2_scales = b; });
  cross(protos, texts(ax["pad"]), [](Proto& p, const std::string& x) { p.c.gemm.pad = x == "on", p.pad_auto = x == "auto"; });
  cross(protos, v.gathers, [](Proto& p, GatherDtype g) { p.c.fsdp_gather = g; });
  cross(protos, v.rdtypes, [](Proto& p, ReduceDtype d) { p.c.reduce.dtype = d; });
  cross(protos, v.rorders, [](Proto& p, ReduceOrder o) { p.c.reduce.order = o; });
  cross(protos, v.dispatches, [](Proto& p, bool b) { p.c.fp8_dispatch = b; });
  cross(protos, v.lrs, [](Proto& p, float lr) { p.c.lr = lr; });
}

std::vector<Proto> cross_product(const Section& sec, const Axes& ax, const Values& v, const ExpandOptions& opt) {
  std::vector<Proto> protos(1);
  protos[0].c.scenario = sec.name;
  protos[0].c.where = cat(sec.file, ":", sec.line);
  cross_layout(protos, ax, v, opt);
  cross_data(protos, ax, v);
  cross_numerics(protos, ax, v);
  return protos;
}

// ---- Resolve each product element into cases: routing, padding, plans and placements.

// Block rules that no placement can fix: the global feature dims and, for wgrad, the token groups
// (unless padded).
void check_block_rules(const Case& c, const Section& sec, const Value& pad_value) {
  const int B = c.gemm.quant.block;
  const std::vector<std::pair<const char*, std::int64_t>> dims_needed =
      c.level == "op" ? std::vector<std::pair<const char*, std::int64_t>>{{"n", c.n}, {"k", c.k}}
                      : std::vector<std::pair<const char*, std::int64_t>>{{"dim", c.dim}, {"hidden", c.hidden}};
  for (const auto& [name, val] : dims_needed) {
    if (val % B != 0) {
      const Entry* e = sec.find(name);
      const std::string w = e ? e->values.front().where() : cat(sec.file, ":", sec.line);
      fail(w, ": scenario ", sec.name, ": ", name, " = ", val, " is not a multiple of the quantization block ", B,
           ": use a multiple of ", B, " (e.g. ", round_up(val, B), ") or an unquantized mode");
    }
  }
  const bool runs_wgrad = c.level == "layer" || c.pass == Pass::wgrad;
  if (runs_wgrad && !c.gemm.pad && groups_need_padding(c.offs, B)) {
    std::string o;
    for (std::size_t i = 0; i < c.offs.size(); ++i) o += (i ? "," : "") + std::to_string(c.offs[i]);
    fail(pad_value.where(), ": scenario ", sec.name, ": pad = off but the token groups (offs ", o,
         ") are not multiples of the block ", B, ", which the wgrad quantizers need: set pad = on or auto");
  }
}

// The choices of one element that need every key: its size checked, its routing (deferred until
// the seed is known), its padding and block rules; then what it does not use is normalised.
void resolve_case(Proto& proto, const Section& sec, const ExpandOptions& opt, const Value& pad_value) {
  Case& c = proto.c;
  check_case_size(c, sec, opt);
  if (c.routing != "explicit") {
    try {
      c.offs = make_offsets(c.tokens, c.experts, proto.routing, c.seed);
    } catch (const Error& e) {
      fail(sec.file, ":", sec.line, ": scenario ", sec.name, ": routing ", c.routing, " of ", c.tokens, " tokens over ",
           c.experts, " experts: ", e.what());
    }
  }
  if (proto.pad_auto) c.gemm.pad = groups_need_padding(c.offs, c.gemm.quant.block);
  const bool quant = is_quantized(c.gemm.mode);
  if (quant) check_block_rules(c, sec, pad_value);
  // Normalise what the case does not use, so equal cases have equal keys.
  if (!quant) {
    c.gemm.quant = QuantOptions{};
    c.gemm.pad = false;
  }
  if (c.world == 1) c.reduce = ReduceOptions{};
}

// lhs or rhs = all: every placement the rules admit (or reject, with the reason), those with a
// given side or a verdict `placements` filters out left out.
std::vector<Case> enumerated_placements(const Case& c, const Proto& proto, const Mesh& mesh, const OpShape& shape) {
  const std::string &l = proto.lhs, &r = proto.rhs, &filter = proto.filter;
  std::vector<Case> out;
  const Enumeration en = enumerate_op(c.pass, shape, mesh, c.reduce);
  for (const EnumeratedCase& e : en.cases) {
    if (l != "all" && str(e.lhs) != str(parse_placements(l, mesh.ndim()))) continue;
    if (r != "all" && str(e.rhs) != str(parse_placements(r, mesh.ndim()))) continue;
    Case d = c;
    d.lhs = e.lhs;
    d.rhs = e.rhs;
    const Verdict v = e.decision.verdict;
    if (v == Verdict::reject) {
      d.rejected = e.decision.reason;
    } else if ((filter == "direct" && v != Verdict::direct) || (filter == "redistribute" && v != Verdict::redistribute)) {
      continue;  // filtered out by `placements`, not rejected
    }
    d.op_verdict = verdict_name(v);
    out.push_back(std::move(d));
  }
  return out;
}

// Both placements given: the one case, rejected with the rules' reason if they refuse it.
Case given_placements(const Case& c, const Proto& proto, const Mesh& mesh, const OpShape& shape, const Section& sec) {
  const std::string &l = proto.lhs, &r = proto.rhs;
  Case d = c;
  const Entry* le = sec.find("lhs");
  const Entry* re = sec.find("rhs");
  const std::string lw = le ? le->values.front().where() : d.where, rw = re ? re->values.front().where() : d.where;
  try {
    d.lhs = parse_placements(l, mesh.ndim());
  } catch (const Error& e) {
    fail(lw, ": lhs = ", l, " on mesh ", mesh.str(), ": ", e.what());
  }
  try {
    d.rhs = parse_placements(r, mesh.ndim());
  } catch (const Error& e) {
    fail(rw, ": rhs = ", r, " on mesh ", mesh.str(), ": ", e.what());
  }
  try {
    const ShardingDecision dec = decide(d.pass, shape, d.lhs, d.rhs, mesh, d.reduce);
    d.op_verdict = verdict_name(dec.verdict);
    if (dec.verdict == Verdict::reject) d.rejected = dec.reason;
  } catch (const Error& e) {
    fail(lw, ": placements ", l, " / ", r, " on mesh ", mesh.str(), ": ", e.what());
  }
  return d;
}

// An op-level element: its layer keys cleared, then one case per placement pair.
std::vector<Case> expand_op_case(Proto& proto, const Section& sec) {
  Case& c = proto.c;
  c.plan = "";
  c.dim = c.hidden = 0;
  c.fsdp_gather = GatherDtype::bf16;
  c.fp8_dispatch = false;
  c.lr = 0;
  const Mesh mesh = Mesh::parse(c.mesh);
  OpShape shape{c.experts, c.tokens, c.n, c.k};
  if (proto.lhs == "all" || proto.rhs == "all") return enumerated_placements(c, proto, mesh, shape);
  return {given_placements(c, proto, mesh, shape, sec)};
}

// A layer-level element: its op keys cleared, then one case per plan (plan = all: every plan the
// mesh holds, the others rejected with the reason).
std::vector<Case> expand_layer_case(Case& c) {
  c.n = c.k = 0;
  c.pass = Pass::fwd;
  c.lhs.clear();
  c.rhs.clear();
  const Mesh mesh = Mesh::parse(c.mesh);
  std::vector<std::pair<std::string, std::string>> plan_picks;  // name, rejection
  if (c.plan == "all") {
    for (const PlanChoice& p : enumerate_layer_plans(mesh)) plan_picks.emplace_back(p.name, p.valid ? "" : p.reason);
  } else {
    std::string why;
    try {
      (void)make_layer_plan(c.plan, mesh);
    } catch (const Error& e) {
      why = e.what();
    }
    plan_picks.emplace_back(c.plan, why);
  }
  std::vector<Case> out;
  for (const auto& [name, why] : plan_picks) {
    Case d = c;
    d.plan = name;
    d.rejected = why;
    if (!plan_has(name, "fsdp")) d.fsdp_gather = GatherDtype::bf16;
    if (!plan_has(name, "ep")) d.fp8_dispatch = false;
    if (d.rejected.empty() && d.fsdp_gather == GatherDtype::fp8 && d.gemm.mode != Mode::exact &&
        !is_promoted(d.gemm.mode)) {
      d.rejected = cat("fsdp_gather = fp8 runs the passes on the gathered fp8 weight: modes exact, "
                       "promote-fp32 and hopper-tc only, not ", d.mode_label());
    }
    out.push_back(std::move(d));
  }
  return out;
}

// ---- Filter: the expansion so far, across files and scenarios.

struct Collected {
  Expansion ex;
  std::set<std::string> seen_keys;
  int next_id = 0;
};

// Each case gets its backend's verdict, is dropped when an earlier case of its scenario has its
// key (an axis it does not use), gets its id, and is kept unless --only leaves it out.
void admit(std::vector<Case>& cases, const Section& sec, const ExpandOptions& opt, Collected& all) {
  for (Case& d : cases) {
    if (d.rejected.empty()) d.rejected = backend_unsupported(d.backend, d.gemm);
    const std::string key = cat(d.scenario, "|", d.key());
    if (!all.seen_keys.insert(key).second) continue;  // an axis this case does not use
    if (all.next_id >= opt.max_cases) {
      fail(sec.file, ":", sec.line, ": scenario ", sec.name, ": the files expand to more than the limit of ", opt.max_cases,
           " cases: use fewer values per axis (lhs/rhs = all enumerates every placement) or split the files");
    }
    d.id = all.next_id++;
    const bool keep = opt.only.empty() || glob_match(opt.only, d.scenario) ||
                      glob_match("*" + opt.only + "*", d.key());
    if (!keep) continue;
    (d.rejected.empty() ? all.ex.runnable : all.ex.rejected)++;
    all.ex.cases.push_back(std::move(d));
  }
}

void expand_scenario(const ScenarioFile& f, const Section& sec, const ExpandOptions& opt, Collected& all) {
  const Axes ax = resolve_axes(f, sec);
  const Values v = parse_values(ax);
  // The product's size first, in 64 bits against the limit: the product is built in memory.
  check_product_size(sec, product_factors(ax, v), opt.max_cases);
  std::vector<Proto> protos = cross_product(sec, ax, v, opt);
  const Value& pad_value = ax["pad"].front();
  for (Proto& proto : protos) {
    resolve_case(proto, sec, opt, pad_value);
    std::vector<Case> cases = proto.c.level == "op" ? expand_op_case(proto, sec) : expand_layer_case(proto.c);
    admit(cases, sec, opt, all);
  }
}

}  // namespace

Expansion expand(const std::vector<ScenarioFile>& files, const ExpandOptions& opt) {
  Collected all;
  for (const ScenarioFile& f : files) {
    for (const Section& sec : f.scenarios) expand_scenario(f, sec, opt, all);
  }
  return std::move(all.ex);
}

}  // namespace fp8moe::scenarios
