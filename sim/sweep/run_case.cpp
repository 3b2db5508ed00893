#include "sim/sweep/run_case.hpp"

#include <chrono>
#include <cmath>
#include <functional>
#include <tuple>

#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "sim/backend/backend.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/sharding.hpp"
#include "sim/runner/op_runner.hpp"
#include "sim/sweep/case_keys.hpp"
#include "sim/sweep/inputs.hpp"

namespace fp8moe::sim {

using results::CaseRow;
using scenarios::Case;

namespace {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    s += (s.empty() ? "" : sep) + p;
  }
  return s;
}

// x laid out like the codes of recipe r: transposed where the recipe transposes.
TensorF to_code_layout(Recipe r, const TensorF& x) {
  if (r == Recipe::act_lhs_t || r == Recipe::kgrouped_lhs) {
    TensorF t({x.dim(1), x.dim(0)});
    for (std::int64_t i = 0; i < x.dim(0); ++i) {
      for (std::int64_t j = 0; j < x.dim(1); ++j) t(j, i) = x(i, j);
    }
    return t;
  }
  if (r == Recipe::weight_dgrad) {
    TensorF t({x.dim(0), x.dim(2), x.dim(1)});
    for (std::int64_t e = 0; e < x.dim(0); ++e) {
      for (std::int64_t i = 0; i < x.dim(1); ++i) {
        for (std::int64_t j = 0; j < x.dim(2); ++j) t(e, j, i) = x(e, i, j);
      }
    }
    return t;
  }
  return x;
}

TensorF to_f(const TensorD& t) { return to_float(t); }

void fill_metrics(CaseRow& row, const TensorReport& t) {
  row.pass = t.pass;
  row.tensor = t.tensor;
  row.sqnr_db = t.vs_hp64.sqnr_db;
  row.sqnr_vs_single_db = t.vs_single.sqnr_db;
  row.rel_err = t.vs_hp64.rel_err;
  row.max_abs_err = t.vs_hp64.max_abs_err;
  row.max_ulp = t.vs_hp64.max_ulp;
  row.bitwise_equal_frac = t.vs_single.bitwise_equal_frac;
  row.block_aligned = t.block_aligned ? 1 : 0;
  row.nonfinite = t.vs_hp64.nonfinite;
  const bool finite = !std::isnan(row.sqnr_db) && !std::isnan(row.sqnr_vs_single_db) && row.nonfinite == 0;
  row.status = finite ? "ok" : "fail";
}

std::string report_message(const ScenarioReport& r) {
  std::vector<std::string> parts;
  for (const std::string& m : r.misaligned) parts.push_back("moved blocks: " + m);
  for (const std::string& p : r.partial_sums) parts.push_back("partial sums: " + p);
  for (const std::string& n : r.notes) parts.push_back(n);
  return join(parts, "; ");
}

}  // namespace

CaseTensors::Operand quantize_operand(Backend& be, const std::string& name, Recipe r, const TensorF& x,
                                      const std::vector<std::int32_t>& offs, const GemmOptions& g) {
  const bool kgrouped = r == Recipe::kgrouped_lhs || r == Recipe::kgrouped_rhs;
  if (kgrouped && g.pad) {
    const PaddedGroups p = pad_groups(offs, g.quant.block);
    TensorF xp = pad_rows(x, offs, p);
    // The quantizers see the padded groups only, not the buffer's spare rows past their end.
    const std::int64_t rows = p.padded_ends.empty() ? 0 : p.padded_ends.back();
    xp.shape[0] = rows;
    xp.data.resize(static_cast<std::size_t>(rows * x.dim(1)));
    return {name, to_code_layout(r, xp), be.quantize(r, xp, p.padded_ends, g.quant)};
  }
  return {name, to_code_layout(r, x), be.quantize(r, x, offs, g.quant)};
}


CaseRow case_row_template(const Case& c) {
  CaseRow r;
  r.case_id = c.id;
  r.case_key = c.key();
  r.scenario = c.scenario;
  for (const scenarios::KeySyntax& k : scenarios::kKeys) scenarios::key_rule(k.key).row(c, r);
  return r;
}

namespace {

using OnMesh = std::function<void(const std::function<void(Communicator&)>&)>;

// What one level's run leaves for the rows: the report of the process holding global rank 0 (empty
// elsewhere) and the single-device quantization of the operands, for their statistics.
struct LevelRun {
  ScenarioReport report;
  std::vector<CaseTensors::Operand> ops;
};

// The operand statistics (underflow, saturation, per-block amax/scale/SQNR) are those of the
// single-device quantization, from the CPU quantizers: every GPU quantizer equals them bit for bit
// (tests/kernels), and only the CPU ones count underflow and saturation.
LevelRun run_op_level(const Case& c, const OnMesh& on_mesh, bool keep_tensors, CaseTensors& tensors) {
  OpRun run;
  on_mesh([&](Communicator& comm) {
    auto be = make_backend(c.backend);
    OpRun mine = run_op(c, *be, &comm);
    if (comm.is_local(0)) run = std::move(mine);
  });
  LevelRun out;
  out.report = std::move(run.report);
  if (out.report.tensors.empty()) return out;  // not the root process
  if (is_quantized(c.gemm.mode)) {
    auto cpu = make_backend("reference");
    const PassRecipes rc = pass_recipes(c.pass);
    out.ops.push_back(quantize_operand(*cpu, lhs_name(c.pass), rc.lhs, run.lhs, c.offs, c.gemm));
    out.ops.push_back(quantize_operand(*cpu, rhs_name(c.pass), rc.rhs, run.rhs, c.offs, c.gemm));
  }
  if (keep_tensors) {
    tensors.outputs.push_back({out_name(c.pass), to_f(run.out), to_f(run.single), to_f(run.hp64)});
    tensors.inputs = {{"lhs", std::move(run.lhs)}, {"rhs", std::move(run.rhs)}};
  }
  return out;
}

LevelRun run_layer_level(const Case& c, const OnMesh& on_mesh, bool keep_tensors, CaseTensors& tensors) {
  LevelRun out;
  LayerRun run;
  LayerOutputs truth, same;
  on_mesh([&](Communicator& comm) {
    LayerRun r;
    LayerOutputs t, s;
    ScenarioReport rep = run_layer(c, &r, &t, &s, &comm);
    if (comm.is_local(0)) {
      out.report = std::move(rep);
      run = std::move(r);
      truth = std::move(t);
      same = std::move(s);
    }
  });
  const bool quantized = is_quantized(c.gemm.mode);
  if (out.report.tensors.empty() || (!quantized && !keep_tensors)) return out;
  LayerInputs in = layer_inputs(c);
  if (quantized) {
    auto cpu = make_backend("reference");
    for (const auto& [name, r, x] : {std::tuple{"x", Recipe::act_lhs, &in.x}, std::tuple{"dy", Recipe::act_lhs, &in.dy},
                                     std::tuple{"w1", Recipe::weight_fwd, &in.W1}, std::tuple{"w2", Recipe::weight_fwd, &in.W2},
                                     std::tuple{"w3", Recipe::weight_fwd, &in.W3}}) {
      out.ops.push_back(quantize_operand(*cpu, name, r, *x, c.offs, c.gemm));
    }
  }
  if (keep_tensors) {
    const auto mine = named_outputs(run.out), t = named_outputs(truth), s = named_outputs(same);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      tensors.outputs.push_back({mine[i].first, *mine[i].second, *s[i].second, *t[i].second});
    }
    tensors.inputs = {{"x", std::move(in.x)}, {"dy", std::move(in.dy)}, {"w1", std::move(in.W1)},
                      {"w2", std::move(in.W2)}, {"w3", std::move(in.W3)}};
  }
  return out;
}

// The operand statistics of a role (SPEC.md 8.4) in the row's lhs_* or rhs_* columns; NaN scale
// figures where no operand was quantized.
void fill_operand_columns(CaseRow& row, const OperandStats& l, const OperandStats& r) {
  auto put = [](const OperandStats& s, double& smin, double& smax, double& sstd, double& range, std::int64_t& under,
                std::int64_t& over, std::int64_t& nonfinite, std::int64_t& empty) {
    smin = s.scale_min, smax = s.scale_max, sstd = s.scale_std(), range = s.dynamic_range();
    under = s.underflow, over = s.overflow, nonfinite = s.nonfinite, empty = s.empty_blocks;
  };
  put(l, row.lhs_scale_min, row.lhs_scale_max, row.lhs_scale_std, row.lhs_dynamic_range, row.lhs_underflow,
      row.lhs_overflow, row.lhs_nonfinite, row.lhs_empty_blocks);
  put(r, row.rhs_scale_min, row.rhs_scale_max, row.rhs_scale_std, row.rhs_dynamic_range, row.rhs_underflow,
      row.rhs_overflow, row.rhs_nonfinite, row.rhs_empty_blocks);
}

// The roles of a case's quantized operands: op level the pass's lhs and rhs (quantized in that
// order); layer level the activations and gradients (x, dy) and the weights (w1, w2, w3), merged.
std::pair<OperandStats, OperandStats> role_stats(const LevelRun& run) {
  OperandStats lhs, rhs;
  for (std::size_t i = 0; i < run.ops.size(); ++i) {
    const CaseTensors::Operand& op = run.ops[i];
    const bool is_lhs = run.ops.size() == 2 ? i == 0 : (op.name == "x" || op.name == "dy");
    (is_lhs ? lhs : rhs).merge(operand_stats(op.x, op.q));
  }
  return {lhs, rhs};
}

// One row per reported tensor: the case's fields, the metrics, the operands' statistics.
std::vector<CaseRow> report_rows(const CaseRow& base, const LevelRun& run) {
  const auto [lhs_stats, rhs_stats] = role_stats(run);
  std::int64_t elements = 0, underflow = 0, saturated = 0;
  for (const auto& op : run.ops) {
    elements += op.q.stats.elements;
    underflow += op.q.stats.underflow;
    saturated += op.q.stats.saturated;
  }
  const std::string message = report_message(run.report);
  std::string split_k;
  for (const std::int32_t k : take_cublaslt_splits_seen()) split_k += (split_k.empty() ? "" : ",") + std::to_string(k);
  std::vector<CaseRow> rows;
  for (const TensorReport& t : run.report.tensors) {
    CaseRow row = base;
    row.split_k = split_k;
    row.strategy = run.report.strategy;
    row.comm_bytes = run.report.comm_bytes_max_rank;
    row.underflow_frac = elements ? static_cast<double>(underflow) / static_cast<double>(elements) : 0.0;
    row.saturated_frac = elements ? static_cast<double>(saturated) / static_cast<double>(elements) : 0.0;
    fill_operand_columns(row, lhs_stats, rhs_stats);
    fill_metrics(row, t);
    row.message = row.status == "fail" ? join({"non-finite result", message}, "; ") : message;
    rows.push_back(std::move(row));
  }
  return rows;
}

// One error row: the case is recorded (and not rerun by --resume) with why it failed.
CaseResult error_result(const CaseRow& base, const std::string& what) {
  CaseResult res;
  CaseRow row = base;
  row.tensor = "-";
  row.status = "error";
  row.sqnr_db = row.sqnr_vs_single_db = std::nan("");
  fill_operand_columns(row, {}, {});
  row.message = what;
  res.rows.push_back(std::move(row));
  res.error = true;
  return res;
}

}  // namespace

CaseResult run_case(const Case& c, bool keep_tensors, MeshRuntime* rt) {
  if (!c.rejected.empty()) fail("case ", c.id, " is rejected (", c.rejected, "): it cannot run");
  const auto t0 = std::chrono::steady_clock::now();
  CaseResult res;
  const CaseRow base = case_row_template(c);
  (void)take_cublaslt_splits_seen();  // this case's calls only
  try {
    // The case's SPMD body on the mesh runtime (one call per rank-set this process drives, maybe
    // on several threads); the results of the call holding global rank 0 are kept. A process
    // that holds no rank of the case ends with no rows (only the root process writes).
    const Mesh mesh = Mesh::parse(c.mesh);
    const OnMesh on_mesh = [&](const std::function<void(Communicator&)>& body) {
      if (rt) {
        rt->run(mesh, body);
      } else {
        FakeCommunicator comm(mesh);
        body(comm);
      }
    };
    // The user's tensors (the key `inputs`), loaded for this case; non-finite ones are refused
    // (an error row naming the dataset).
    Case with_data = c;
    if (!c.inputs.empty() && !c.given) with_data.given = load_inputs(c.inputs, c.level, /*allow_nonfinite=*/false);
    LevelRun run = c.level == "op" ? run_op_level(with_data, on_mesh, keep_tensors, res.tensors)
                                   : run_layer_level(with_data, on_mesh, keep_tensors, res.tensors);
    res.rows = report_rows(base, run);
    if (!run.report.tensors.empty() && keep_tensors) {
      res.tensors.quantized = std::move(run.ops);
      res.tensors.offs = c.offs;
      res.tensors.block = c.gemm.quant.block;
    }
  } catch (const std::exception& e) {
    res = error_result(base, e.what());
  }
  res.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (CaseRow& r : res.rows) r.time_ms = res.time_ms;
  return res;
}

}  // namespace fp8moe::sim
