#include "sim/sweep/expand.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <set>

#include "reference/checked.hpp"
#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "sim/backend/backend.hpp"
#include "sim/limits/limits.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/enumerate.hpp"
#include "sim/sweep/case_keys.hpp"
#include "sim/sweep/inputs.hpp"

namespace fp8moe::scenarios {

using namespace fp8moe::sim;

namespace {

// expand() in phases, per scenario: resolve its values (resolve_axes, check_plans), cross them
// (cross_product), resolve each element into cases (resolve_case, then expand_op_case or
// expand_layer_case) and filter those into the expansion (admit).

bool from_flag(const Value& v) { return v.line == 0 && v.file.rfind("--", 0) == 0; }

// A value as a message starts with it: "ci.ini:12: experts = 0", or "--experts 0" from a flag.
std::string lead(const Value& v, Key key) {
  return from_flag(v) ? cat(v.file, " ", v.text) : cat(v.where(), ": ", key_name(key), " = ", v.text);
}
// A value named inside a message: "offs = 128,256 (ci.ini:13)", or "--offs 128,256".
std::string named(const Value& v, Key key) {
  return from_flag(v) ? cat(v.file, " ", v.text) : cat(key_name(key), " = ", clip(v.text), " (", v.where(), ")");
}
// What messages about a whole scenario start with: "ci.ini:12: scenario tp_fwd: ", nothing for
// the one scenario of a command's flags.
std::string origin(const Section& sec) { return sec.line > 0 ? cat(sec.where(), ": scenario ", sec.name, ": ") : ""; }
// The same at one of its values: "ci.ini:14: scenario tp_fwd: ", "--n: ", or origin(sec) for a
// built-in value.
std::string origin(const Section& sec, const Value& v) {
  if (from_flag(v)) return cat(v.file, ": ");
  return v.line > 0 ? cat(v.where(), ": scenario ", sec.name, ": ") : origin(sec);
}

// Rethrows a value's parse error with its file and line (or flag).
template <class F>
auto at(const Value& v, Key key, F&& f) -> decltype(f(v.text)) {
  try {
    return f(v.text);
  } catch (const Error& e) {
    fail(lead(v, key), ": ", e.what());
  }
}

std::int64_t round_up(std::int64_t n, std::int64_t b) { return (n + b - 1) / b * b; }

// ---- Resolve: a scenario's values per key, each checked once, with its line.

// One scenario's values per key (raw, with their lines) and what they stand for (each value
// through its rule: ranges and `all` expanded): the lists the product walks over.
struct Axes {
  std::array<std::vector<Value>, kKeyCount> raw;
  std::array<std::vector<std::string>, kKeyCount> values;
  const std::vector<Value>& operator[](Key k) const { return raw[static_cast<std::size_t>(k)]; }
  const std::vector<std::string>& values_of(Key k) const { return values[static_cast<std::size_t>(k)]; }
};

// offs fixes experts and tokens: the scenario may restate them (`fp8moe run --tokens 512 --offs
// 258,512`) but not contradict them; values from [defaults] give way to it.
void check_offs_agree(const Section& sec, Axes& ax) {
  for (const Value& o : ax[Key::offs]) {
    std::vector<std::int32_t> offs;
    try {
      offs = parse_offs(o.text);
    } catch (const Error&) {
      continue;  // reported with its line by the offs rule
    }
    for (const Key k : {Key::experts, Key::tokens}) {
      const Entry* e = sec.find(k);
      if (!e) continue;
      const std::int64_t implied = k == Key::experts ? static_cast<std::int64_t>(offs.size()) : offs.back();
      for (const Value& v : e->values) {
        if (v.text != std::to_string(implied)) {
          fail(lead(v, k), " contradicts ", named(o, Key::offs), ", which gives ", key_name(k), " ", implied,
               ": give offs alone, or experts/tokens with a routing");
        }
      }
    }
  }
  // A routing given next to explicit groups would be silently ignored.
  for (const Key k : {Key::routing, Key::empty_experts}) {
    if (const Entry* e = sec.find(k)) {
      const Value& v = e->values.front();
      const Value& o = ax[Key::offs].front();
      fail(lead(v, k), " does not apply with ", named(o, Key::offs), ", which fixes the token groups: give either ",
           from_flag(o) ? o.file : "offs", " or ", from_flag(v) ? v.file : key_name(k));
    }
  }
  for (const Key k : {Key::experts, Key::tokens, Key::routing, Key::empty_experts}) {
    ax.raw[static_cast<std::size_t>(k)] = {Value{std::string(syntax(k).builtin), sec.file, sec.line}};
  }
}

// inputs fixes the offsets and the dims of its level: the scenario may restate them but not
// contradict them, and a routing does not apply. Values from [defaults] give way to it.
void check_inputs_agree(const Section& sec, Axes& ax) {
  for (const Value& in : ax[Key::inputs]) {
    if (in.text == "none") continue;
    InputsShape f;
    try {
      f = read_inputs_shape(in.text);
    } catch (const Error&) {
      continue;  // reported with its line by the inputs rule
    }
    const std::pair<Key, std::optional<std::int64_t>> fixed[] = {
        {Key::experts, f.experts}, {Key::tokens, f.tokens}, {Key::n, f.n}, {Key::k, f.k}, {Key::dim, f.dim}, {Key::hidden, f.hidden}};
    for (const auto& [k, implied] : fixed) {
      const Entry* e = sec.find(k);
      if (!e || !implied) continue;
      for (const Value& v : e->values) {
        if (v.text != std::to_string(*implied)) {
          fail(lead(v, k), " contradicts ", named(in, Key::inputs), ", whose tensors give ", key_name(k), " ", *implied,
               ": drop it, or give inputs of that shape");
        }
      }
    }
    if (const Entry* e = sec.find(Key::offs)) {
      for (const Value& v : e->values) {
        if (v.text != "none" && parse_offs(v.text) != f.offs) {
          fail(lead(v, Key::offs), " contradicts ", named(in, Key::inputs), ", whose offs are ", offs_text(f.offs),
               ": drop it, or give inputs with those groups");
        }
      }
    }
    for (const Key k : {Key::routing, Key::empty_experts}) {
      if (const Entry* e = sec.find(k)) {
        fail(lead(e->values.front(), k), " does not apply with ", named(in, Key::inputs),
             ", whose offs fix the token groups: drop it");
      }
    }
  }
  for (const Key k : {Key::experts, Key::tokens, Key::offs, Key::n, Key::k, Key::dim, Key::hidden, Key::routing,
                      Key::empty_experts}) {
    ax.raw[static_cast<std::size_t>(k)] = {Value{std::string(syntax(k).builtin), sec.file, sec.line}};
  }
}

// Key values: the scenario's own, else [defaults], else built in (located at the header).
Axes resolve_axes(const ScenarioFile& f, const Section& sec, const ExpandOptions& opt) {
  Axes ax;
  for (const KeySyntax& k : kKeys) {
    auto& raw = ax.raw[static_cast<std::size_t>(k.key)];
    if (const Entry* e = sec.find(k.key)) {
      raw = e->values;
    } else if (const Entry* d = f.defaults.find(k.key)) {
      raw = d->values;
    } else {
      raw = {Value{std::string(k.builtin), sec.file, sec.line}};
    }
  }
  if (ax[Key::inputs].front().text != "none") {
    check_inputs_agree(sec, ax);
  } else if (ax[Key::offs].front().text != "none") {
    check_offs_agree(sec, ax);
  }
  for (const KeySyntax& k : kKeys) {
    auto& out = ax.values[static_cast<std::size_t>(k.key)];
    for (const Value& v : ax[k.key]) {
      for (std::string& x : at(v, k.key, key_rule(k.key).values)) out.push_back(std::move(x));
    }
  }
  if (!opt.backend_override.empty()) {  // --backend replaces every scenario's backend
    ax.values[static_cast<std::size_t>(Key::backend)] =
        at(Value{opt.backend_override, "--backend", 0}, Key::backend, key_rule(Key::backend).values);
  }
  return ax;
}

// Each plan named must hold on some mesh of the scenario when a level is layer.
void check_plans(const Axes& ax) {
  const bool layer_used = std::any_of(ax[Key::level].begin(), ax[Key::level].end(), [](const Value& l) { return l.text == "layer"; });
  if (!layer_used) return;
  for (const Value& v : ax[Key::plan]) {
    if (v.text == "all") continue;
    bool some_mesh = false;
    std::string why;
    for (const std::string& m : ax.values_of(Key::mesh)) {
      try {
        (void)make_layer_plan(v.text, Mesh::parse(m));
        some_mesh = true;
      } catch (const Error& e) {
        why = e.what();
      }
    }
    if (!some_mesh) fail(lead(v, Key::plan), ": no mesh of this scenario can hold it (", why, ")");
  }
}

// The number of cases a scenario's axes multiply to, refused past max_cases before the product is
// built (seed = 0..10000 with four modes and 30 shapes is 1.2 million cases).
void check_product_size(const Section& sec, const Axes& ax, std::int64_t max_cases) {
  std::int64_t n = 1;
  std::string named;
  for (const KeySyntax& k : kKeys) {
    const std::size_t size = ax.values_of(k.key).size();
    if (size > 1) named += cat(named.empty() ? "" : " x ", k.name, " ", size);
    n = checked_mul(n, static_cast<std::int64_t>(size), "cases");  // each factor is a list in memory: no overflow
    if (n > max_cases) {
      fail(sec.line > 0 ? cat(sec.where(), ": scenario ", sec.name, " expands") : std::string("the flags expand"), " to more than the limit of ", max_cases, " cases (",
           named, " ...): use fewer values per axis or split it into several scenarios");
    }
  }
}

// Machine-independent limits of one case (int32 offsets, 64-bit memory estimate) and, with
// opt.host_memory, the machine's memory for the CPU reference: checked before the routing, which
// loops over the tokens, so that `fp8moe list` refuses a huge case at once.
void check_case_size(const Case& c, const Section& sec, const ExpandOptions& opt) {
  const std::string where = origin(sec);
  // The fix in the words the user wrote the sizes in: keys, or a command's flags.
  const bool flags = sec.line == 0;
  const std::string dims = c.level == "op" ? (flags ? "--tokens, --n, --k or --experts" : "tokens, n, k or experts")
                                           : (flags ? "--tokens, --dim, --hidden or --experts" : "tokens, dim, hidden or experts");
  std::int64_t need = 0;
  try {
    need = c.memory_estimate();
  } catch (const Error& e) {
    fail(where, c.level, " case E=", c.experts, " M=", c.tokens, c.level == "op" ? cat(" N=", c.n, " K=", c.k) : cat(" D=", c.dim, " H=", c.hidden),
         " on mesh ", c.mesh, ": ", e.what(), ": use smaller ", dims);
  }
  try {
    check_token_offsets(c.tokens, c.experts, c.gemm.quant.block, is_quantized(c.gemm.mode));
  } catch (const Error& e) {
    fail(where, e.what(), " (the case would need about ", format_bytes(need), "): use fewer ", flags ? "--tokens or --experts" : "tokens or experts");
  }
  if (opt.host_memory > 0 && c.backend == "reference" && need > opt.host_memory) {
    fail(where, "case (", c.key(), ") needs about ", format_bytes(need), " (estimate) but this machine has ",
         format_bytes(opt.host_memory), " available: use smaller ", dims, ", fewer ranks, or a GPU backend");
  }
}

// ---- The product, outermost key first: every element with every value of each key, in
// registry order, each value landed by its rule.

std::vector<Proto> cross_product(const Section& sec, const Axes& ax) {
  std::vector<Proto> protos(1);
  protos[0].c.scenario = sec.name;
  protos[0].c.where = sec.where();
  for (const KeySyntax& k : kKeys) {
    const KeyRule& rule = key_rule(k.key);
    const std::vector<std::string>& values = ax.values_of(k.key);
    std::vector<Proto> next;
    next.reserve(protos.size() * values.size());
    for (const Proto& p : protos) {
      for (const std::string& v : values) {
        Proto d = p;
        rule.apply(d, v);
        next.push_back(std::move(d));
      }
    }
    protos = std::move(next);
  }
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
      fail(e ? origin(sec, e->values.front()) : origin(sec), name, " = ", val, " is not a multiple of the quantization block ", B,
           ": use a multiple of ", B, " (e.g. ", round_up(val, B), ") or an unquantized mode");
    }
  }
  const bool runs_wgrad = c.level == "layer" || c.pass == Pass::wgrad;
  if (runs_wgrad && !c.gemm.pad && groups_need_padding(c.offs, B)) {
    std::string o;
    for (std::size_t i = 0; i < c.offs.size(); ++i) o += (i ? "," : "") + std::to_string(c.offs[i]);
    fail(origin(sec, pad_value), "pad = off but the token groups (offs ", o,
         ") are not multiples of the block ", B, ", which the wgrad quantizers need: set pad = on or auto");
  }
}

// The choices of one element that need every key: its size checked, its routing (deferred until
// the seed is known), its padding and block rules; then what it does not use is normalised.
void resolve_case(Proto& proto, const Section& sec, const ExpandOptions& opt, const Value& pad_value) {
  Case& c = proto.c;
  check_case_size(c, sec, opt);
  if (proto.offs_explicit) {
    c.routing = Routing{};
    c.routing_label = "explicit";
  } else {
    c.routing_label = routing_name(c.routing);
    try {
      c.offs = make_offsets(c.tokens, c.experts, c.routing, c.seed);
    } catch (const Error& e) {
      fail(origin(sec), "routing ", c.routing_label, " of ", c.tokens,
           " tokens over ", c.experts, " experts: ", e.what());
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
      fail(origin(sec), "the files expand to more than the limit of ", opt.max_cases,
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
  const Axes ax = resolve_axes(f, sec, opt);
  check_plans(ax);
  // The product's size first, in 64 bits against the limit: the product is built in memory.
  check_product_size(sec, ax, opt.max_cases);
  std::vector<Proto> protos = cross_product(sec, ax);
  const Value& pad_value = ax[Key::pad].front();
  for (Proto& proto : protos) {
    resolve_case(proto, sec, opt, pad_value);
    std::vector<Case> cases = proto.c.level == "op" ? expand_op_case(proto, sec) : expand_layer_case(proto.c);
    admit(cases, sec, opt, all);
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


Expansion expand(const std::vector<ScenarioFile>& files, const ExpandOptions& opt) {
  Collected all;
  for (const ScenarioFile& f : files) {
    for (const Section& sec : f.scenarios) expand_scenario(f, sec, opt, all);
  }
  return std::move(all.ex);
}

}  // namespace fp8moe::scenarios
