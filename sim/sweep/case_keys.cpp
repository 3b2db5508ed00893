// The meaning of every scenario key: one rule_NAME() per row of scenarios/keys.hpp, collected by
// the registry's own X-macro (key_rule): a key added to the registry without a rule does not build.
#include "sim/sweep/case_keys.hpp"

#include <algorithm>
#include <cmath>

#include "reference/checked.hpp"
#include "reference/datagen.hpp"
#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "reference/quantize.hpp"
#include "sim/backend/backend.hpp"
#include "sim/limits/limits.hpp"
#include "sim/mesh/mesh.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/sharding.hpp"
#include "sim/sweep/inputs.hpp"

namespace fp8moe::scenarios {

using namespace fp8moe::sim;
using results::CaseRow;

std::vector<std::int32_t> parse_offs(const std::string& s) {
  std::string t = s;
  if (!t.empty() && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  auto o = parse_int_list(t, "offs");
  check_offsets(o, o.back());
  return o;
}

bool plan_has(const std::string& plan, const char* part) {
  const std::string p = "+" + plan + "+";
  return p.find(std::string("+") + part + "+") != std::string::npos;
}

std::string offs_text(const std::vector<std::int32_t>& offs) {
  std::string s;
  for (std::size_t i = 0; i < offs.size(); ++i) s += (i ? "," : "") + std::to_string(offs[i]);
  return s;
}

namespace {

using Values = std::vector<std::string>;

bool parse_bool(const std::string& s) {
  if (s == "true" || s == "on" || s == "yes" || s == "1") return true;
  if (s == "false" || s == "off" || s == "no" || s == "0") return false;
  fail("use true or false (on/off, yes/no, 1/0)");
}

float parse_lr(const std::string& s) {
  std::size_t used = 0;
  float x = 0;
  try {
    x = std::stof(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !std::isfinite(x) || x < 0) {
    fail("the SGD learning rate must be a finite number >= 0 (0: no step), e.g. 0.1");
  }
  return x;
}

// "use auto, on or off" unless s is one of them.
void one_of(const std::string& s, std::initializer_list<const char*> allowed) {
  std::string all;
  std::size_t i = 0;
  for (const char* a : allowed) {
    if (s == a) return;
    all += cat(i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ", a);
    ++i;
  }
  fail("use ", all);
}

std::vector<int> parse_empty_experts(const std::string& s) {
  if (s == "none") return {};
  const auto l = parse_int_list(s, "empty_experts");
  return {l.begin(), l.end()};
}

OutDtype parse_gemm_out(const std::string& s) {
  const OutDtype d = parse_out_dtype(s);
  if (d == OutDtype::fp64) fail("fp64 is not a GEMM output dtype: use bf16 or fp32");
  return d;
}

// A value checked by `parse` (its result dropped) and kept as it is.
template <auto Parse>
Values checked(const std::string& s) {
  (void)Parse(s);
  return {s};
}

// "0..3" -> 0,1,2,3 (at most 10001 values); a single integer otherwise.
Values seed_values(const std::string& s) {
  const auto dots = s.find("..");
  if (dots == std::string::npos) return {std::to_string(parse_int(s, 0, kInt64Max))};
  const std::int64_t a = parse_int(s.substr(0, dots), 0, kInt64Max), b = parse_int(s.substr(dots + 2), 0, kInt64Max);
  if (b < a || b - a > 10000) fail("a range A..B needs A <= B, at most 10001 values");
  Values out;
  // Counted, not `x <= b; ++x`: that would overflow past b = 2^63 - 1.
  for (std::int64_t i = 0; i <= b - a; ++i) out.push_back(std::to_string(a + i));
  return out;
}

Values mode_values(const std::string& s) {
  Values out;
  for (const ModeSpec& m : parse_mode_spec(s)) out.push_back(m.label());
  return out;
}

Values pass_values(const std::string& s) {
  if (s == "all") return {"fwd", "dgrad", "wgrad"};
  return {pass_name(parse_pass(s))};
}

Values plan_values(const std::string& s) {
  if (s == "all") return {s};
  const auto& names = layer_plan_names();
  if (std::find(names.begin(), names.end(), s) == names.end()) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    fail("use all or one of ", all);
  }
  return {s};
}

Values block_values(const std::string& s) {
  QuantOptions q;
  q.block = static_cast<int>(parse_int(s, 1, kInt32Max));  // <= kInt32Max: fits an int
  check_quant_options(q);
  return {s};
}

bool is_op(const Case& c) { return c.level == "op"; }
bool is_layer(const Case& c) { return c.level == "layer"; }

void no_apply(Proto&, const std::string&) {}
std::string no_key(const Case&) { return {}; }
void no_row(const Case&, CaseRow&) {}

// description: shown by fp8moe list from the scenario text; not a case parameter
KeyRule rule_description() {
  return {[](const std::string& s) { return Values{s}; }, no_apply, no_key, no_row};
}

KeyRule rule_level() {
  return {[](const std::string& s) { return one_of(s, {"op", "layer"}), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.level = v; },
          [](const Case& c) { return cat("level=", c.level); },
          [](const Case& c, CaseRow& r) { r.level = c.level; }};
}

KeyRule rule_mesh() {
  return {checked<Mesh::parse>,
          [](Proto& p, const std::string& v) {
            const Mesh m = Mesh::parse(v);
            p.c.mesh = m.str();
            p.c.world = m.world();
          },
          [](const Case& c) { return cat("mesh=", c.mesh); },
          [](const Case& c, CaseRow& r) { r.mesh = c.mesh, r.world = c.world; }};
}

// plan: layer: the plan; op: the rules' verdict takes its column
KeyRule rule_plan() {
  return {plan_values, [](Proto& p, const std::string& v) { p.c.plan = v; },
          [](const Case& c) { return is_layer(c) ? cat("plan=", c.plan) : std::string(); },
          [](const Case& c, CaseRow& r) {
            r.plan = is_op(c) ? c.op_verdict : c.plan;
            r.placements = c.rejected.empty() ? c.placements() : "";
          }};
}

KeyRule rule_pass() {
  return {pass_values, [](Proto& p, const std::string& v) { p.c.pass = parse_pass(v); },
          [](const Case& c) { return is_op(c) ? cat("pass=", pass_name(c.pass)) : std::string(); },
          [](const Case& c, CaseRow& r) { r.pass = is_op(c) ? pass_name(c.pass) : ""; }};
}

// lhs: checked against the mesh once it is known (given_placements)
KeyRule rule_lhs() {
  return {[](const std::string& s) { return Values{s}; }, [](Proto& p, const std::string& v) { p.lhs = v; },
          [](const Case& c) { return is_op(c) ? cat(lhs_name(c.pass), "=", str(c.lhs)) : std::string(); },
          no_row};
}

KeyRule rule_rhs() {
  return {[](const std::string& s) { return Values{s}; }, [](Proto& p, const std::string& v) { p.rhs = v; },
          [](const Case& c) { return is_op(c) ? cat(rhs_name(c.pass), "=", str(c.rhs)) : std::string(); },
          no_row};
}

KeyRule rule_placements() {
  return {[](const std::string& s) { return one_of(s, {"direct", "redistribute", "all"}), Values{s}; },
          [](Proto& p, const std::string& v) { p.filter = v; }, no_key, no_row};
}

KeyRule rule_mode() {
  return {mode_values,
          [](Proto& p, const std::string& v) {
            const ModeSpec m = parse_mode_spec(v).front();
            p.c.gemm.mode = m.mode, p.c.gemm.promotion = m.promo;
          },
          [](const Case& c) { return cat("mode=", c.mode_label()); },
          [](const Case& c, CaseRow& r) { r.mode = c.mode_label(); }};
}

KeyRule rule_backend() {
  // The alias cuda-fastest becomes the backend it names in this build, so every row says which ran.
  return {[](const std::string& s) {
            const std::string b = resolve_backend(s);
            return (void)backend_unsupported(b, GemmOptions{}), Values{b};
          },
          [](Proto& p, const std::string& v) { p.c.backend = v; },
          [](const Case& c) { return cat("backend=", c.backend); },
          [](const Case& c, CaseRow& r) { r.backend = c.backend; }};
}

KeyRule rule_experts() {
  return {[](const std::string& s) { return (void)parse_int(s, 1, kMaxExperts), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.experts = static_cast<int>(parse_int(v, 1, kMaxExperts)); },
          [](const Case& c) { return cat("E=", c.experts); },
          [](const Case& c, CaseRow& r) { r.experts = c.experts; }};
}

// tokens: 64-bit here: the case's size checks bound it (check_case_size)
KeyRule rule_tokens() {
  return {[](const std::string& s) { return (void)parse_int(s, 0, kInt64Max), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.tokens = parse_int(v, 0, kInt64Max); },
          [](const Case& c) { return cat("M=", c.tokens); },
          [](const Case& c, CaseRow& r) { r.tokens = c.tokens; }};
}

// offs: explicit groups fix experts and tokens
KeyRule rule_offs() {
  return {[](const std::string& s) { return s == "none" ? Values{s} : ((void)parse_offs(s), Values{s}); },
          [](Proto& p, const std::string& v) {
            if (v == "none") return;
            p.c.offs = parse_offs(v);
            p.c.experts = static_cast<int>(p.c.offs.size());
            p.c.tokens = p.c.offs.back();
            p.offs_explicit = true;
          },
          [](const Case& c) { return cat("offs=", offs_text(c.offs)); },
          [](const Case& c, CaseRow& r) { r.offs = offs_text(c.offs); }};
}

KeyRule rule_n() {
  return {[](const std::string& s) { return (void)parse_int(s, 1, kInt64Max), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.n = parse_int(v, 1, kInt64Max); },
          [](const Case& c) { return is_op(c) ? cat("N=", c.n) : std::string(); },
          [](const Case& c, CaseRow& r) { r.n = c.n; }};
}

KeyRule rule_k() {
  return {[](const std::string& s) { return (void)parse_int(s, 1, kInt64Max), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.k = parse_int(v, 1, kInt64Max); },
          [](const Case& c) { return is_op(c) ? cat("K=", c.k) : std::string(); },
          [](const Case& c, CaseRow& r) { r.k = c.k; }};
}

KeyRule rule_dim() {
  return {[](const std::string& s) { return (void)parse_int(s, 1, kInt64Max), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.dim = parse_int(v, 1, kInt64Max); },
          [](const Case& c) { return is_layer(c) ? cat("D=", c.dim) : std::string(); },
          [](const Case& c, CaseRow& r) { r.dim = c.dim; }};
}

KeyRule rule_hidden() {
  return {[](const std::string& s) { return (void)parse_int(s, 1, kInt64Max), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.hidden = parse_int(v, 1, kInt64Max); },
          [](const Case& c) { return is_layer(c) ? cat("H=", c.hidden) : std::string(); },
          [](const Case& c, CaseRow& r) { r.hidden = c.hidden; }};
}

// inputs: the user's tensors fix the offsets and the dims (the data is loaded when the case runs)
KeyRule rule_inputs() {
  return {[](const std::string& s) { return s == "none" ? Values{s} : ((void)read_inputs_shape(s), Values{s}); },
          [](Proto& p, const std::string& v) {
            if (v == "none") return;
            const InputsShape f = read_inputs_shape(v);
            const bool op = p.c.level == "op";
            if (!op && !f.layer) {
              fail("inputs '", v, "' has no layer-level tensors (x, w1, w3 and w2): give a file of that level, or level = op");
            }
            if (op && !f.op_missing(p.c.pass).empty()) {
              fail("inputs '", v, "' cannot feed the op-level ", pass_name(p.c.pass), " pass: ", f.op_missing(p.c.pass),
                   ": give those tensors, or another pass");
            }
            p.c.inputs = v;
            p.c.offs = f.offs;
            p.c.experts = static_cast<int>(f.experts);
            p.c.tokens = f.tokens;
            if (op) p.c.n = *f.n, p.c.k = *f.k;
            if (!op) p.c.dim = *f.dim, p.c.hidden = *f.hidden;
            p.offs_explicit = true;
          },
          [](const Case& c) { return c.inputs.empty() ? std::string() : cat("inputs=", c.inputs); }, no_row};
}

// routing: resolved into offs once the seed is known (resolve_case)
KeyRule rule_routing() {
  return {checked<parse_routing>,
          [](Proto& p, const std::string& v) {
            const std::vector<int> empty = p.c.routing.empty_experts;
            p.c.routing = parse_routing(v);
            p.c.routing.empty_experts = empty;
          },
          no_key, [](const Case& c, CaseRow& r) { r.routing = c.routing_label; }};
}

KeyRule rule_empty_experts() {
  return {checked<parse_empty_experts>,
          [](Proto& p, const std::string& v) { p.c.routing.empty_experts = parse_empty_experts(v); }, no_key,
          no_row};
}

KeyRule rule_dist() {
  return {checked<parse_dist>, [](Proto& p, const std::string& v) { p.c.dist = parse_dist(v); },
          [](const Case& c) { return cat("dist=", dist_name(c.dist)); },
          [](const Case& c, CaseRow& r) { r.dist = dist_name(c.dist); }};
}

KeyRule rule_seed() {
  return {seed_values,
          [](Proto& p, const std::string& v) { p.c.seed = static_cast<std::uint64_t>(parse_int(v, 0, kInt64Max)); },
          [](const Case& c) { return cat("seed=", c.seed); },
          [](const Case& c, CaseRow& r) { r.seed = c.seed; }};
}

KeyRule rule_format() {
  return {checked<parse_format>, [](Proto& p, const std::string& v) { p.c.gemm.quant.format = parse_format(v); },
          [](const Case& c) {
            return is_quantized(c.gemm.mode) ? cat("format=", format_name(c.gemm.quant.format)) : std::string();
          },
          [](const Case& c, CaseRow& r) { r.format = format_name(c.gemm.quant.format); }};
}

KeyRule rule_block() {
  return {block_values,
          [](Proto& p, const std::string& v) { p.c.gemm.quant.block = static_cast<int>(parse_int(v, 1, kInt32Max)); },
          [](const Case& c) { return is_quantized(c.gemm.mode) ? cat("block=", c.gemm.quant.block) : std::string(); },
          [](const Case& c, CaseRow& r) { r.block = c.gemm.quant.block; }};
}

KeyRule rule_pow2_scales() {
  return {checked<parse_bool>, [](Proto& p, const std::string& v) { p.c.gemm.quant.pow2_scales = parse_bool(v); },
          [](const Case& c) {
            return is_quantized(c.gemm.mode) ? cat("pow2=", c.gemm.quant.pow2_scales ? 1 : 0) : std::string();
          },
          [](const Case& c, CaseRow& r) { r.pow2_scales = c.gemm.quant.pow2_scales ? 1 : 0; }};
}

// pad: auto: resolved from the offsets (resolve_case)
KeyRule rule_pad() {
  return {[](const std::string& s) { return one_of(s, {"auto", "on", "off"}), Values{s}; },
          [](Proto& p, const std::string& v) { p.c.gemm.pad = v == "on", p.pad_auto = v == "auto"; },
          [](const Case& c) { return is_quantized(c.gemm.mode) ? cat("pad=", c.gemm.pad ? 1 : 0) : std::string(); },
          [](const Case& c, CaseRow& r) { r.pad = c.gemm.pad ? 1 : 0; }};
}

// out_dtype: in the key only when not the default (every earlier key stays as it was) and where it applies (hp64 computes and keeps fp64)
KeyRule rule_out_dtype() {
  return {checked<parse_gemm_out>, [](Proto& p, const std::string& v) { p.c.gemm.out = parse_gemm_out(v); },
          [](const Case& c) {
            return c.gemm.out != OutDtype::bf16 && c.gemm.mode != Mode::hp64
                       ? cat("out_dtype=", out_dtype_name(c.gemm.out))
                       : std::string();
          },
          no_row};
}

KeyRule rule_fsdp_gather() {
  return {checked<parse_gather_dtype>,
          [](Proto& p, const std::string& v) { p.c.fsdp_gather = parse_gather_dtype(v); },
          [](const Case& c) {
            return is_layer(c) && plan_has(c.plan, "fsdp") ? cat("fsdp_gather=", gather_dtype_name(c.fsdp_gather))
                                                            : std::string();
          },
          [](const Case& c, CaseRow& r) { r.fsdp_gather = gather_dtype_name(c.fsdp_gather); }};
}

// reduce_dtype: the key names dtype and order together
KeyRule rule_reduce_dtype() {
  return {checked<parse_reduce_dtype>,
          [](Proto& p, const std::string& v) { p.c.reduce.dtype = parse_reduce_dtype(v); },
          [](const Case& c) {
            return c.world > 1 ? cat("reduce=", reduce_dtype_name(c.reduce.dtype), "/", reduce_order_name(c.reduce.order))
                               : std::string();
          },
          [](const Case& c, CaseRow& r) { r.reduce_dtype = reduce_dtype_name(c.reduce.dtype); }};
}

KeyRule rule_reduce_order() {
  return {checked<parse_reduce_order>,
          [](Proto& p, const std::string& v) { p.c.reduce.order = parse_reduce_order(v); }, no_key,
          [](const Case& c, CaseRow& r) { r.reduce_order = reduce_order_name(c.reduce.order); }};
}

KeyRule rule_fp8_dispatch() {
  return {checked<parse_bool>, [](Proto& p, const std::string& v) { p.c.fp8_dispatch = parse_bool(v); },
          [](const Case& c) {
            return is_layer(c) && plan_has(c.plan, "ep") ? cat("fp8_dispatch=", c.fp8_dispatch ? 1 : 0) : std::string();
          },
          [](const Case& c, CaseRow& r) { r.fp8_dispatch = c.fp8_dispatch ? 1 : 0; }};
}

KeyRule rule_lr() {
  return {checked<parse_lr>, [](Proto& p, const std::string& v) { p.c.lr = parse_lr(v); },
          [](const Case& c) { return is_layer(c) && c.lr != 0 ? cat("lr=", c.lr) : std::string(); },
          [](const Case& c, CaseRow& r) { r.lr = c.lr; }};
}

}  // namespace

const KeyRule& key_rule(Key k) {
  // One rule_NAME() per registry row: a key without its rule does not compile.
  static const std::array<KeyRule, kKeyCount> rules{
#define FP8MOE_KEY_RULE(name, split, dflt, scope) rule_##name(),
      FP8MOE_SCENARIO_KEYS(FP8MOE_KEY_RULE)
#undef FP8MOE_KEY_RULE
  };
  return rules[static_cast<std::size_t>(k)];
}

const std::array<Key, kKeyCount> kCaseKeyOrder{
    Key::level,  Key::mesh,   Key::plan,   Key::pass,  Key::lhs,         Key::rhs,          Key::experts,
    Key::tokens, Key::n,      Key::k,      Key::dim,   Key::hidden,      Key::offs,         Key::inputs,       Key::dist,
    Key::seed,   Key::mode,   Key::backend, Key::format, Key::block,     Key::pow2_scales,  Key::pad,
    Key::out_dtype, Key::reduce_dtype, Key::fsdp_gather, Key::fp8_dispatch, Key::lr, Key::description,
    Key::placements, Key::routing, Key::empty_experts, Key::reduce_order};

}  // namespace fp8moe::scenarios
