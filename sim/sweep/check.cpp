#include "sim/sweep/check.hpp"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "reference/metrics.hpp"
#include "sim/backend/backend.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/runner/op_runner.hpp"
#include "sim/sweep/expand.hpp"
#include "sim/sweep/inputs.hpp"
#include "sim/sweep/run_case.hpp"
#include "sim/rules/sharding.hpp"

namespace fp8moe::sim {

using scenarios::Case;
using scenarios::FlagValue;
using scenarios::Key;

const std::vector<std::string>& check_models() {
  static const std::vector<std::string> m{"hp64",
                                          "bf16",
                                          "exact",
                                          "torchao-emulated",
                                          "promote-fp32:deepgemm",
                                          "promote-fp32:cublas",
                                          "hopper-tc:deepgemm",
                                          "hopper-tc:cublas"};
  return m;
}

namespace {

// check in phases: the case per model (the flags expanded with the model's mode), the models' outputs
// on the user's inputs, and each user tensor against each model's.

// The one case the flags give with `mode` (and `pass`, at op level).
Case model_case(std::vector<FlagValue> flags, const std::string& mode, const std::string& pass) {
  flags.push_back({Key::mode, "--modes", mode});
  if (!pass.empty()) flags.push_back({Key::pass, "--pass", pass});
  const scenarios::Expansion ex = scenarios::expand({scenarios::scenario_from_flags("fp8moe check", flags)});
  if (ex.cases.size() != 1) {
    fail("fp8moe check runs one case per model but the flags give ", ex.cases.size(),
         ": give one mesh and one placement per operand (or one plan)");
  }
  return ex.cases.front();
}

std::string flag_value(const std::vector<FlagValue>& flags, Key k, const std::string& dflt) {
  for (const FlagValue& f : flags) {
    if (f.key == k) return f.text;
  }
  return dflt;
}

// Units in the last place of the output dtype, as a monotone integer.
std::int64_t ordinal(float x, bool bf16) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::int64_t v = bf16 ? static_cast<std::int64_t>(u >> 16) : static_cast<std::int64_t>(u);
  const std::int64_t sign = bf16 ? 0x8000 : 0x80000000LL;
  return v & sign ? sign - v : v;
}

// The 128x128 tile of element i of a tensor of `shape`: (e, row tile, col tile); for a 2-D output
// of tokens the expert is the group of the row.
std::array<std::int64_t, 3> tile_of(const std::vector<std::int64_t>& shape, std::int64_t i,
                                   const std::vector<std::int32_t>& offs) {
  const std::int64_t C = shape.back(), R = shape[shape.size() - 2];
  const std::int64_t c = i % C, r = (i / C) % R, e3 = shape.size() == 3 ? i / (R * C) : -1;
  std::int64_t e = e3;
  if (e < 0) {
    e = 0;
    while (e < static_cast<std::int64_t>(offs.size()) && r >= offs[static_cast<std::size_t>(e)]) ++e;
  }
  return {e, r / 128, c / 128};
}

std::vector<std::int64_t> coords(const std::vector<std::int64_t>& shape, std::int64_t i) {
  std::vector<std::int64_t> c(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}

ModelMatch match(const std::string& model, const TensorD& m, const TensorF& user, bool bf16,
                 const std::vector<std::int32_t>& offs) {
  ModelMatch r;
  r.model = model;
  std::vector<double> u(user.data.begin(), user.data.end());
  r.sqnr_db = sqnr_db(m.data, u);
  std::set<std::array<std::int64_t, 3>> tiles;
  std::int64_t equal = 0;
  for (std::size_t i = 0; i < user.numel(); ++i) {
    const float a = bf16 ? round_bf16(static_cast<float>(m.data[i])) : static_cast<float>(m.data[i]);
    const float b = user.data[i];
    const bool same = f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b));
    if (same) {
      ++equal;
      continue;
    }
    if (r.mismatches++ == 0) {
      r.first = coords(user.shape, static_cast<std::int64_t>(i));
      r.model_value = m.data[i];
      r.user_value = b;
    }
    if (std::isfinite(a) && std::isfinite(b)) {
      r.max_ulp = std::max(r.max_ulp, static_cast<double>(std::llabs(ordinal(a, bf16) - ordinal(b, bf16))));
    } else {
      r.max_ulp = INFINITY;
    }
    tiles.insert(tile_of(user.shape, static_cast<std::int64_t>(i), offs));
  }
  r.bitwise_frac = user.numel() ? static_cast<double>(equal) / static_cast<double>(user.numel()) : 1.0;
  if (tiles.size() == 1) {
    const auto [e, rt, ct] = *tiles.begin();
    r.where = cat("all in block (e=", e, ", rows ", rt * 128, "-", rt * 128 + 127, ", cols ", ct * 128, "-", ct * 128 + 127, ")");
  } else if (!tiles.empty()) {
    r.where = cat("in ", tiles.size(), " blocks of 128x128");
  }
  return r;
}

std::string fmt_hex(std::uint8_t b) {
  const char* d = "0123456789abcdef";
  return std::string{d[b >> 4], d[b & 15]};
}

// The user's codes and scales of one operand against fp8moe's quantization of the same input.
std::string compare_quantization(const std::string& side, const CaseTensors::Operand& want, const GivenQuantization& got) {
  const std::string head = cat(side, " ", want.name, " (", recipe_name(want.q.recipe), "): ");
  if (got.codes.shape != want.q.codes.shape || got.scales.shape != want.q.scales.shape) {
    return cat(head, "codes ", shape_str(got.codes.shape), " and scales ", shape_str(got.scales.shape), " are not fp8moe's layout ",
               shape_str(want.q.codes.shape), " and ", shape_str(want.q.scales.shape));
  }
  std::int64_t bad_codes = 0, bad_scales = 0, first_code = -1, first_scale = -1;
  for (std::size_t i = 0; i < got.codes.numel(); ++i) {
    if (got.codes.data[i] != want.q.codes.data[i] && bad_codes++ == 0) first_code = static_cast<std::int64_t>(i);
  }
  for (std::size_t i = 0; i < got.scales.numel(); ++i) {
    if (f32_bits(got.scales.data[i]) != f32_bits(want.q.scales.data[i]) && bad_scales++ == 0) first_scale = static_cast<std::int64_t>(i);
  }
  std::string s = head;
  if (bad_codes == 0) {
    s += "codes equal";
  } else {
    const auto i = static_cast<std::size_t>(first_code);
    s += cat("codes: ", bad_codes, " of ", got.codes.numel(), " differ, the first at flat index ", first_code, " (fp8moe 0x",
             fmt_hex(want.q.codes.data[i]), ", yours 0x", fmt_hex(got.codes.data[i]), ")");
  }
  if (bad_scales == 0) return s + ", scales equal";
  const auto j = static_cast<std::size_t>(first_scale);
  return s + cat(", scales: ", bad_scales, " of ", got.scales.numel(), " differ, the first at flat index ", first_scale,
                 " (fp8moe ", want.q.scales.data[j], ", yours ", got.scales.data[j], ")");
}

std::string fmt_pct(double f) { return cat(std::round(f * 10000) / 100, "%"); }

std::string join_models(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += cat(i == 0 ? "" : i + 1 == v.size() ? " and " : ", ", v[i]);
  return s;
}

// The verdict in words, for the cases people hit.
std::string reading(const TensorCheck& t) {
  const bool fp8 = std::any_of(t.equal.begin(), t.equal.end(), [](const std::string& m) { return m != "hp64" && m != "bf16"; });
  if (!t.equal.empty() && !fp8) {
    if (t.equal.front() == "bf16" || (t.equal.size() > 1)) return "bitwise equal to the bf16 model: the FP8 path did not run";
    return "bitwise equal to the fp64 truth rounded to the output: no reduced precision ran";
  }
  if (!t.equal.empty()) return cat("bitwise equal to ", join_models(t.equal));
  const ModelMatch* best = nullptr;
  for (const ModelMatch& m : t.models) {
    if (!best || m.bitwise_frac > best->bitwise_frac) best = &m;
  }
  if (!best) return "no model could run";
  std::string at;
  for (std::size_t i = 0; i < best->first.size(); ++i) at += cat(i ? "," : "", best->first[i]);
  const std::string first = cat("; first at (", at, "): ", best->model, " ", best->model_value, ", yours ", best->user_value);
  if (best->bitwise_frac >= 0.5) {
    return cat("equal to ", best->model, " except ", best->mismatches, " element(s), ", best->where, first);
  }
  return cat("bitwise equal to no model; closest ", best->model, " (", fmt_pct(best->bitwise_frac), " bitwise, SQNR ",
             best->sqnr_db, " dB)", first);
}

// run_check's state, in phases: the user's tensors (read), each model's outputs (run_models), the
// user's quantization (check_quantization), the verdicts (report).
struct Checker {
  std::string level, outputs;
  std::vector<FlagValue> base;  // the flags less pass and mode, which each model case sets
  std::vector<std::pair<std::string, TensorF>> user;
  std::vector<std::pair<std::string, std::string>> wanted;  // (tensor, op pass) to check
  std::map<std::string, TensorCheck> checks;
  std::map<std::string, bool> bf16_of;
  std::shared_ptr<const GivenTensors> given;
  CheckReport rep;

  // The user's outputs of the level, those of --pass (op level) wanted.
  void read(const std::vector<FlagValue>& flags) {
    level = flag_value(flags, Key::level, "op");
    const bool op = level == "op";
    user = read_named(outputs, op ? std::vector<std::string>{"out", "grad_A", "grad_W"}
                                  : std::vector<std::string>{"y", "dx", "dw1", "dw2", "dw3"});
    const std::string pass_flag = flag_value(flags, Key::pass, "all");
    for (const auto& [name, t] : user) {
      const std::string pass = !op ? "" : name == "out" ? "fwd" : name == "grad_A" ? "dgrad" : "wgrad";
      if (op && pass_flag != "all" && pass_flag != pass) continue;
      wanted.emplace_back(name, pass);
      TensorCheck& tc = checks[name];
      tc.tensor = name;
      tc.shape = t.shape;
      bool bf16 = true;
      for (float v : t.data) bf16 = bf16 && (std::isnan(v) || round_bf16(v) == v);
      tc.dtype = bf16 ? "bf16" : "fp32";
      bf16_of[name] = bf16;
    }
    if (wanted.empty()) fail("'", outputs, "' holds no output of --pass ", pass_flag, ": give out, grad_A or grad_W");
    for (const FlagValue& f : flags) {
      if (f.key != Key::pass && f.key != Key::mode) base.push_back(f);
    }
  }

  // The case of a model on the user's tensors (a mode the case cannot compute, e.g.
  // hopper-tc:cublas outside cuBLASLt's options, is left out).
  std::optional<Case> prepare(const std::string& model, const std::string& pass, bool bf16) {
    Case c = model_case(base, model, pass);
    if (!c.rejected.empty()) return std::nullopt;
    if (!given) given = load_inputs(c.inputs, c.level, /*allow_nonfinite=*/true);
    c.given = given;
    if (!bf16 && c.gemm.mode != Mode::hp64) c.gemm.out = OutDtype::fp32;  // the user's outputs are fp32
    rep.case_key = c.key();
    return c;
  }

  // One model's output of `name`, compared with the user's.
  void record(const std::string& model, const std::string& name, const TensorD& out, const Case& c) {
    const TensorF& u = std::find_if(user.begin(), user.end(), [&](const auto& x) { return x.first == name; })->second;
    if (out.shape != u.shape) {
      fail("'", outputs, "': ", name, " is ", shape_str(u.shape), " but the case (", c.key(), ") gives ", shape_str(out.shape));
    }
    TensorCheck& tc = checks[name];
    tc.models.push_back(match(model, out, u, bf16_of[name], c.offs));
    if (tc.models.back().mismatches == 0) tc.equal.push_back(model);
  }

  void run_models(const std::vector<std::string>& models) {
    for (const std::string& model : models) {
      if (level == "op") {
        for (const auto& [name, pass] : wanted) {
          const std::optional<Case> c = prepare(model, pass, bf16_of[name]);
          if (!c) continue;
          auto be = make_backend(c->backend);
          record(model, name, run_op(*c, *be, nullptr, {.references = false}).out, *c);
        }
        continue;
      }
      const bool bf16 = std::all_of(wanted.begin(), wanted.end(), [&](const auto& w) { return bf16_of[w.first]; });
      const std::optional<Case> c = prepare(model, "", bf16);
      if (!c) continue;
      LayerRun run;
      (void)run_layer(*c, &run);
      for (const auto& [n, t] : named_outputs(run.out)) {
        if (checks.count(n)) record(model, n, to_double(*t), *c);  // checks holds the wanted tensors only
      }
    }
  }

  // The user's quantization, where the outputs hold it (op level), against fp8moe's on the same
  // inputs and options.
  void check_quantization() {
    if (level != "op") return;
    auto cpu = make_backend("reference");
    for (const auto& [name, pass] : wanted) {
      const std::optional<Case> c = prepare("exact", pass, true);
      if (!c) continue;
      const auto [lhs, rhs] = op_inputs(*c);
      const PassRecipes rc = pass_recipes(c->pass);
      for (const auto& [side, recipe, x, what] : {std::tuple{"lhs", rc.lhs, &lhs, lhs_name(c->pass)},
                                                  std::tuple{"rhs", rc.rhs, &rhs, rhs_name(c->pass)}}) {
        const auto got = read_quantization(outputs, cat("q/", pass, "/", side));
        if (!got) continue;
        const CaseTensors::Operand want = quantize_operand(*cpu, what, recipe, *x, c->offs, c->gemm);
        checks[name].quantization.push_back(compare_quantization(side, want, *got));
      }
    }
  }

  CheckReport report() {
    for (const auto& [name, pass] : wanted) {
      TensorCheck& tc = checks[name];
      tc.reading = reading(tc);
      rep.tensors.push_back(std::move(tc));
    }
    return std::move(rep);
  }
};

}  // namespace

CheckReport run_check(const std::vector<FlagValue>& flags, const std::vector<std::string>& models,
                      const std::string& outputs) {
  Checker k;
  k.outputs = outputs;
  k.read(flags);
  k.run_models(models);
  k.check_quantization();
  return k.report();
}

std::string check_expectation(const CheckReport& r, const std::string& expect) {
  const auto colon = expect.rfind(':');
  std::string model = expect;
  double floor = NAN;
  // "MODE:DB" when the part after the last ':' is a number (mode labels hold ':' too).
  if (colon != std::string::npos) {
    std::size_t used = 0;
    try {
      floor = std::stod(expect.substr(colon + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == expect.size() - colon - 1 && used > 0) {
      model = expect.substr(0, colon);
    } else {
      floor = NAN;
    }
  }
  for (const TensorCheck& t : r.tensors) {
    const auto m = std::find_if(t.models.begin(), t.models.end(), [&](const ModelMatch& x) { return x.model == model; });
    if (m == t.models.end()) return cat(t.tensor, ": the model ", model, " was not computed (see --modes)");
    if (std::isnan(floor) && m->mismatches > 0) {
      return cat(t.tensor, " is not bitwise ", model, ": ", m->mismatches, " element(s) differ, ", m->where);
    }
    if (!std::isnan(floor) && !(m->sqnr_db >= floor)) {
      return cat(t.tensor, ": SQNR against ", model, " is ", m->sqnr_db, " dB, below ", floor, " dB");
    }
  }
  return "";
}

}  // namespace fp8moe::sim
