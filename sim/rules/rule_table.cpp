#include "sim/rules/rule_table.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "reference/error.hpp"

namespace fp8moe::sim {

namespace {

using Json = nlohmann::json;

const char* const kFormat = "fp8moe-rules-1";

// Every message names the file and the entry, then says what is wrong and how to fix it.
struct Where {
  const std::string& path;
  std::string entry;
  Where at(const std::string& sub) const { return {path, entry.empty() ? sub : entry + sub}; }
  Where at(std::size_t i) const { return {path, entry + "[" + std::to_string(i) + "]"}; }
  template <class... A>
  [[noreturn]] void fail(const A&... a) const {
    fp8moe::fail("rule table '", path, "': ", entry.empty() ? std::string("the top level") : entry, ": ", a...);
  }
};

const Json& member(const Json& obj, const char* key, const Where& w) {
  if (!obj.is_object()) w.fail("expected an object {...}, got ", obj.type_name());
  const auto it = obj.find(key);
  if (it == obj.end()) w.fail("has no \"", key, "\"");
  return *it;
}

std::string text(const Json& j, const Where& w) {
  if (!j.is_string()) w.fail("expected a string, got ", j.dump());
  return j.get<std::string>();
}

void refuse_unknown_keys(const Json& obj, std::initializer_list<const char*> known, const Where& w) {
  if (!obj.is_object()) w.fail("expected an object {...}, got ", obj.type_name());
  for (const auto& item : obj.items()) {
    const std::string k = item.key();
    if (std::none_of(known.begin(), known.end(), [&](const char* x) { return k == x; })) {
      std::string list;
      for (const char* x : known) list += std::string(list.empty() ? "" : ", ") + x;
      w.fail("unknown key \"", k, "\": the keys are ", list);
    }
  }
}

Pass pass_of(const std::string& s, const Where& w) {
  for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
    if (s == pass_name(p)) return p;
  }
  w.fail("unknown pass '", s, "': use fwd, dgrad or wgrad");
}

DimExpr dim_expr(const std::string& raw, const Where& w) {
  std::string s;
  for (char c : raw) {
    if (c != ' ') s += c;
  }
  DimExpr d;
  if (s.empty() || std::string("MNKE").find(s[0]) == std::string::npos) {
    w.fail("dim '", raw, "': a dim is one of the letters M (tokens), N, K, E (experts), or a letter over the block, "
           "e.g. K/", kRuleBlock);
  }
  d.letter = s[0];
  if (s.size() == 1) return d;
  if (s.substr(1) != "/" + std::to_string(kRuleBlock)) {
    w.fail("dim '", raw, "': a blocked dim is written ", s[0], "/", kRuleBlock, " (the block of the blockwise recipes)");
  }
  d.block = kRuleBlock;
  return d;
}

ShapeExpr shape_expr(const Json& j, const Where& w) {
  std::vector<std::string> dims;
  if (j.is_string()) {
    std::stringstream ss(j.get<std::string>());
    for (std::string part; std::getline(ss, part, ',');) dims.push_back(part);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) dims.push_back(text(j[i], w.at(i)));
  } else {
    w.fail("a shape is \"M,K/128\" or [\"M\", \"K/128\"], got ", j.dump());
  }
  if (dims.empty()) w.fail("a shape needs at least one dim");
  ShapeExpr out;
  std::set<char> seen;
  for (const std::string& d : dims) {
    out.push_back(dim_expr(d, w));
    if (!seen.insert(out.back().letter).second) w.fail("the letter ", out.back().letter, " appears twice in one shape");
  }
  return out;
}

// {"fwd": SHAPE, ...} or one SHAPE for every pass.
std::map<Pass, ShapeExpr> shapes(const Json& j, const std::vector<Pass>& passes, const Where& w) {
  std::map<Pass, ShapeExpr> out;
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      const Pass p = pass_of(k, w);
      if (std::find(passes.begin(), passes.end(), p) == passes.end()) {
        w.fail("a shape for ", k, ", which the op does not serve (\"passes\")");
      }
      out[p] = shape_expr(v, w.at("." + k));
    }
    for (Pass p : passes) {
      if (!out.count(p)) w.fail("no shape for ", pass_name(p), ": give one per pass the op serves");
    }
    return out;
  }
  const ShapeExpr s = shape_expr(j, w);
  for (Pass p : passes) out[p] = s;
  return out;
}

Placement placement(const Json& j, const Where& w) {
  const std::string s = text(j, w);
  try {
    return parse_placements(s, 1).front();
  } catch (const Error& e) {
    w.fail(e.what());
  }
}

bool has(const ShapeExpr& s, char c) { return shape_letters(s).find(c) != std::string::npos; }
bool blocked(const ShapeExpr& s) {
  return std::any_of(s.begin(), s.end(), [](const DimExpr& d) { return d.block != 1; });
}

// A scale's shape: its data's letters in the same order, each over the block or not.
void check_scale(const RuleArg& scale, const RuleArg& data, Pass p, const Where& w) {
  if (shape_letters(scale.shape.at(p)) != shape_letters(data.shape.at(p))) {
    w.fail(pass_name(p), ": ", scale.name, " ", shape_expr_str(scale.shape.at(p)), " must have the dims of ", data.name, " ",
           shape_expr_str(data.shape.at(p)), " in the same order, blocked ones written over the block (e.g. K/", kRuleBlock,
           ")");
  }
}

void check_grouped_mm(const RuleOp& op, const Where& w) {
  for (const char* role : {"lhs", "rhs", "lhs_scale", "rhs_scale", "offsets"}) {
    if (op.arg_index(role) < 0) {
      w.fail("a grouped_mm has arguments with the roles lhs, rhs, lhs_scale, rhs_scale and offsets; \"", role, "\" is missing");
    }
  }
  if (op.outputs.size() != 1) w.fail("a grouped_mm has one output, not ", op.outputs.size());
  const RuleArg& lhs = op.args[static_cast<std::size_t>(op.arg_index("lhs"))];
  const RuleArg& rhs = op.args[static_cast<std::size_t>(op.arg_index("rhs"))];
  for (Pass p : op.passes) {
    const ShapeExpr& l = lhs.shape.at(p);
    const ShapeExpr& r = rhs.shape.at(p);
    const ShapeExpr& o = op.outputs[0].shape.at(p);
    const std::string pn = pass_name(p);
    const auto shapes_text = [&] {
      return cat(lhs.name, " ", shape_expr_str(l), ", ", rhs.name, " ", shape_expr_str(r), " -> ", op.outputs[0].name, " ",
                 shape_expr_str(o));
    };
    if (blocked(l) || blocked(r) || blocked(o)) w.fail(pn, ": ", shapes_text(), ": only scales have blocked dims");
    if (l.size() != 2 || !has(l, 'M')) w.fail(pn, ": ", shapes_text(), ": the lhs is 2-D with the token dim M");
    if (has(o, 'M')) {
      // Token rows out: lhs (M, c), rhs (E, ...) with c and one free letter f, out (M, f).
      if (r.size() != 3 || r[0].letter != 'E' || has(r, 'M') || has(l, 'E')) {
        w.fail(pn, ": ", shapes_text(), ": with M in the output the rhs is (E, ., .), experts first, without M");
      }
      const char c = l[0].letter == 'M' ? l[1].letter : l[0].letter;
      if (!has(r, c) || has(o, c)) w.fail(pn, ": ", shapes_text(), ": the lhs's ", c, " must be contracted with the rhs");
      const char f = r[1].letter == c ? r[2].letter : r[1].letter;
      if (o.size() != 2 || !has(o, f)) w.fail(pn, ": ", shapes_text(), ": the output is (M, ", f, ")");
    } else {
      // Token groups contracted (wgrad): lhs (x, M), rhs (M, y), out (E, x, y) in some order.
      if (r.size() != 2 || !has(r, 'M') || has(l, 'E') || has(r, 'E') || !has(o, 'E') || o.size() != 3) {
        w.fail(pn, ": ", shapes_text(), ": without M in the output, lhs and rhs are 2-D with M (contracted per group) ",
               "and the output is 3-D with E");
      }
      const char x = l[0].letter == 'M' ? l[1].letter : l[0].letter;
      const char y = r[0].letter == 'M' ? r[1].letter : r[0].letter;
      if (x == y || !has(o, x) || !has(o, y)) w.fail(pn, ": ", shapes_text(), ": the output holds E, ", x, " and ", y);
    }
    check_scale(op.args[static_cast<std::size_t>(op.arg_index("lhs_scale"))], lhs, p, w);
    check_scale(op.args[static_cast<std::size_t>(op.arg_index("rhs_scale"))], rhs, p, w);
    for (const char* role : {"lhs_scale", "rhs_scale"}) {
      const ShapeExpr& s = op.args[static_cast<std::size_t>(op.arg_index(role))].shape.at(p);
      for (const DimExpr& d : s) {
        if (d.letter == 'M' && d.block != 1 && has(o, 'M')) {
          w.fail(pn, ": ", shape_expr_str(s), ": token blocks (M/", kRuleBlock, ") are for a contracted M (wgrad) only");
        }
      }
    }
    const ShapeExpr& offs = op.args[static_cast<std::size_t>(op.arg_index("offsets"))].shape.at(p);
    if (offs.size() != 1 || offs[0] != DimExpr{'E', 1}) w.fail(pn, ": the offsets' shape is E, not ", shape_expr_str(offs));
  }
}

void check_quantize(const RuleOp& op, const Where& w) {
  if (op.arg_index("input") < 0) w.fail("a quantize op has an argument with the role input");
  if (op.output_index("codes") < 0 || op.output_index("scales") < 0 || op.outputs.size() != 2) {
    w.fail("a quantize op has two outputs, with the roles codes and scales");
  }
  const RuleArg& in = op.args[static_cast<std::size_t>(op.arg_index("input"))];
  for (Pass p : op.passes) {
    const ShapeExpr& x = in.shape.at(p);
    const ShapeExpr& c = op.outputs[static_cast<std::size_t>(op.output_index("codes"))].shape.at(p);
    const ShapeExpr& s = op.outputs[static_cast<std::size_t>(op.output_index("scales"))].shape.at(p);
    if (blocked(x) || c != x) w.fail(pass_name(p), ": the codes have the input's shape ", shape_expr_str(x), ", unblocked");
    if (shape_letters(s) != shape_letters(x) || !blocked(s)) {
      w.fail(pass_name(p), ": the scales ", shape_expr_str(s), " have the input's dims ", shape_expr_str(x),
             " in order, some over the block");
    }
  }
}

RuleStrategy strategy(const Json& j, std::size_t i, const RuleOp& op, const Where& w) {
  RuleStrategy s;
  s.number = static_cast<int>(i) + 1;
  const Json* outs = nullptr;
  const Json* args = nullptr;
  if (j.is_array()) {
    if (j.size() != 2) w.fail("a strategy is [[output placements], [argument placements]] as torchao writes it");
    outs = &j[0];
    args = &j[1];
    s.passes = op.passes;
  } else if (j.is_object()) {
    refuse_unknown_keys(j, {"passes", "out", "args"}, w);
    outs = &member(j, "out", w);
    args = &member(j, "args", w);
    if (j.contains("passes")) {
      const Json& ps = j["passes"];
      if (!ps.is_array() || ps.empty()) w.at(".passes").fail("a non-empty list of passes");
      for (std::size_t k = 0; k < ps.size(); ++k) {
        const Pass p = pass_of(text(ps[k], w.at(".passes").at(k)), w.at(".passes").at(k));
        if (std::find(op.passes.begin(), op.passes.end(), p) == op.passes.end()) {
          w.at(".passes").at(k).fail(pass_name(p), " is not a pass the op serves");
        }
        s.passes.push_back(p);
      }
    } else {
      s.passes = op.passes;
    }
  } else {
    w.fail("a strategy is [[outs], [args]] or {\"passes\", \"out\", \"args\"}, got ", j.dump());
  }
  const Where wo = w.at(j.is_array() ? "[0]" : ".out");
  const Where wa = w.at(j.is_array() ? "[1]" : ".args");
  if (!outs->is_array() || outs->size() != op.outputs.size()) {
    wo.fail("one placement per output (", op.outputs.size(), "), got ", outs->dump());
  }
  for (std::size_t k = 0; k < outs->size(); ++k) s.out.push_back(placement((*outs)[k], wo.at(k)));
  if (!args->is_array() || args->size() != op.args.size()) {
    wa.fail("one placement per argument (", op.args.size(), ": ", [&] {
      std::string n;
      for (const RuleArg& a : op.args) n += (n.empty() ? "" : ", ") + a.name;
      return n;
    }(), "; None for a non-tensor), got ", args->dump());
  }
  for (std::size_t k = 0; k < args->size(); ++k) {
    const RuleArg& a = op.args[k];
    const Json& v = (*args)[k];
    if (!a.tensor) {
      if (!v.is_null()) wa.at(k).fail(a.name, " is not a tensor: its placement is None (null), not ", v.dump());
      s.args.emplace_back(std::nullopt);
      continue;
    }
    if (v.is_null()) wa.at(k).fail(a.name, " is a tensor: None (null) is for non-tensor arguments; give its placement");
    s.args.emplace_back(placement(v, wa.at(k)));
  }
  return s;
}

RuleOp op_entry(const Json& j, const Where& w) {
  refuse_unknown_keys(j, {"name", "kind", "passes", "arguments", "outputs", "strategies", "note"}, w);
  RuleOp op;
  op.where = w.entry;
  op.name = text(member(j, "name", w), w.at(".name"));
  const std::string kind = text(member(j, "kind", w), w.at(".kind"));
  if (kind == "grouped_mm") {
    op.kind = RuleOpKind::grouped_mm;
  } else if (kind == "quantize") {
    op.kind = RuleOpKind::quantize;
  } else {
    w.at(".kind").fail("unknown kind '", kind, "': use grouped_mm or quantize");
  }
  const Json& ps = member(j, "passes", w);
  if (!ps.is_array() || ps.empty()) w.at(".passes").fail("a non-empty list of passes, e.g. [\"fwd\", \"dgrad\", \"wgrad\"]");
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const Pass p = pass_of(text(ps[i], w.at(".passes").at(i)), w.at(".passes").at(i));
    if (std::find(op.passes.begin(), op.passes.end(), p) != op.passes.end()) w.at(".passes").at(i).fail("listed twice");
    op.passes.push_back(p);
  }
  const Json& as = member(j, "arguments", w);
  if (!as.is_array() || as.empty()) w.at(".arguments").fail("a non-empty list of arguments");
  const std::set<std::string> roles = op.kind == RuleOpKind::grouped_mm
                                          ? std::set<std::string>{"lhs", "rhs", "lhs_scale", "rhs_scale", "offsets"}
                                          : std::set<std::string>{"input"};
  for (std::size_t i = 0; i < as.size(); ++i) {
    const Where wa = w.at(".arguments").at(i);
    refuse_unknown_keys(as[i], {"name", "role", "shape", "tensor"}, wa);
    RuleArg a;
    a.name = text(member(as[i], "name", wa), wa.at(".name"));
    if (a.name.empty()) wa.fail("an empty name");
    for (const RuleArg& b : op.args) {
      if (b.name == a.name) wa.fail("the name '", a.name, "' is used twice");
    }
    a.tensor = !as[i].contains("tensor") || as[i]["tensor"] != false;
    if (!a.tensor) {
      if (as[i].contains("shape") || as[i].contains("role")) wa.fail(a.name, " is not a tensor: give it no shape and no role");
    } else {
      a.role = text(member(as[i], "role", wa), wa.at(".role"));
      if (!roles.count(a.role)) {
        std::string list;
        for (const std::string& r : roles) list += (list.empty() ? "" : ", ") + r;
        wa.at(".role").fail("role '", a.role, "' is not one of a ", kind, "'s: ", list);
      }
      if (op.arg_index(a.role) >= 0) wa.at(".role").fail("role '", a.role, "' is taken by another argument");
      a.shape = shapes(member(as[i], "shape", wa), op.passes, wa.at(".shape"));
    }
    op.args.push_back(std::move(a));
  }
  const Json& os = member(j, "outputs", w);
  if (!os.is_array() || os.empty()) w.at(".outputs").fail("a non-empty list of outputs");
  for (std::size_t i = 0; i < os.size(); ++i) {
    const Where wo = w.at(".outputs").at(i);
    refuse_unknown_keys(os[i], {"name", "role", "shape"}, wo);
    RuleOutput o;
    o.name = text(member(os[i], "name", wo), wo.at(".name"));
    o.role = os[i].contains("role") ? text(os[i]["role"], wo.at(".role")) : std::string("out");
    o.shape = shapes(member(os[i], "shape", wo), op.passes, wo.at(".shape"));
    op.outputs.push_back(std::move(o));
  }
  if (op.kind == RuleOpKind::grouped_mm) {
    check_grouped_mm(op, w);
  } else {
    check_quantize(op, w);
  }
  const Json& ss = member(j, "strategies", w);
  if (!ss.is_array() || ss.empty()) w.at(".strategies").fail("a non-empty list of strategies");
  for (std::size_t i = 0; i < ss.size(); ++i) op.strategies.push_back(strategy(ss[i], i, op, w.at(".strategies").at(i)));
  return op;
}

}  // namespace

const char* rule_op_kind_name(RuleOpKind k) { return k == RuleOpKind::grouped_mm ? "grouped_mm" : "quantize"; }

std::string DimExpr::str() const { return block == 1 ? std::string(1, letter) : cat(letter, "/", block); }

std::string shape_letters(const ShapeExpr& s) {
  std::string out;
  for (const DimExpr& d : s) out += d.letter;
  return out;
}

std::string shape_expr_str(const ShapeExpr& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + s[i].str();
  return out + ")";
}

std::string RuleStrategy::str(const std::vector<RuleArg>& names) const {
  std::string o;
  for (const Placement& p : out) o += (o.empty() ? "" : ",") + p.str();
  std::string a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    a += (i ? ", " : "") + names[i].name + " " + (args[i] ? args[i]->str() : std::string("None"));
  }
  return cat("#", number, " [", o, "] <- ", a);
}

int RuleOp::arg_index(const std::string& role) const {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].tensor && args[i].role == role) return static_cast<int>(i);
  }
  return -1;
}

int RuleOp::output_index(const std::string& role) const {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].role == role) return static_cast<int>(i);
  }
  return -1;
}

namespace {
RuleTable rule_table(const Json& j, const std::string& path);
}  // namespace

RuleTable parse_rule_table(const std::string& text_, const std::string& path) {
  Json j;
  try {
    j = Json::parse(text_);
  } catch (const Json::exception& e) {  // a syntax error, or a number past a double (out_of_range.406)
    fail("rule table '", path, "' is not JSON fp8moe can read: ", e.what());
  }
  try {
    return rule_table(j, path);
  } catch (const Json::exception& e) {  // a safety net: every entry is type-checked before it is read
    fail("rule table '", path, "': ", e.what());
  }
}

namespace {
RuleTable rule_table(const Json& j, const std::string& path) {
  const Where top{path, ""};
  refuse_unknown_keys(j, {"format", "source", "note", "ops"}, top);
  const std::string format = text(member(j, "format", top), top.at("format"));
  if (format != kFormat) top.at("format").fail("'", format, "': this fp8moe reads \"", kFormat, "\"");
  RuleTable t;
  t.path = path;
  if (j.contains("source")) t.source = text(j["source"], top.at("source"));
  const Json& ops = member(j, "ops", top);
  if (!ops.is_array() || ops.empty()) top.at("ops").fail("a non-empty list of ops");
  for (std::size_t i = 0; i < ops.size(); ++i) t.ops.push_back(op_entry(ops[i], top.at("ops").at(i)));
  return t;
}
}  // namespace

RuleTable load_rule_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read rule table '", path, "': give the path of a JSON table (scenarios/rules/ has examples)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_rule_table(ss.str(), path);
}

}  // namespace fp8moe::sim
