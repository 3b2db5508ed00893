#include "sim/sweep/run_case.hpp"

#include <chrono>
#include <cmath>
#include <functional>

#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "sim/backend/backend.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/sharding.hpp"
#include "sim/runner/op_runner.hpp"

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

std::string offs_text(const std::vector<std::int32_t>& offs) {
  std::string s;
  for (std::size_t i = 0; i < offs.size(); ++i) s += (i ? "," : "") + std::to_string(offs[i]);
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

// One operand quantized on a single device, as the pass does it (wgrad on padded token groups).
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

CaseRow case_row_template(const Case& c) {
  CaseRow r;
  r.case_id = c.id;
  r.case_key = c.key();
  r.scenario = c.scenario;
  r.level = c.level;
  r.mesh = c.mesh;
  r.world = c.world;
  r.plan = c.level == "op" ? c.op_verdict : c.plan;
  r.placements = c.rejected.empty() ? c.placements() : "";
  r.pass = c.level == "op" ? pass_name(c.pass) : "";
  r.backend = c.backend;
  r.mode = c.mode_label();
  r.format = format_name(c.gemm.quant.format);
  r.block = c.gemm.quant.block;
  r.pow2_scales = c.gemm.quant.pow2_scales ? 1 : 0;
  r.pad = c.gemm.pad ? 1 : 0;
  r.experts = c.experts;
  r.tokens = c.tokens;
  r.n = c.n;
  r.k = c.k;
  r.dim = c.dim;
  r.hidden = c.hidden;
  r.routing = c.routing;
  r.offs = offs_text(c.offs);
  r.dist = dist_name(c.dist);
  r.seed = c.seed;
  r.fsdp_gather = gather_dtype_name(c.fsdp_gather);
  r.reduce_dtype = reduce_dtype_name(c.reduce.dtype);
  r.reduce_order = reduce_order_name(c.reduce.order);
  r.fp8_dispatch = c.fp8_dispatch ? 1 : 0;
  r.lr = c.lr;
  return r;
}

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
    auto on_mesh = [&](const std::function<void(Communicator&)>& body) {
      if (rt) {
        rt->run(mesh, body);
      } else {
        FakeCommunicator comm(mesh);
        body(comm);
      }
    };
    // The operand statistics (underflow, saturation, per-block amax/scale/SQNR) are those of the
    // single-device quantization, from the CPU quantizers: every GPU quantizer equals them bit
    // for bit (tests/kernels), and only the CPU ones count underflow and saturation.
    auto backend = make_backend("reference");
    std::vector<CaseTensors::Operand> ops;
    ScenarioReport report;
    bool holds_root = false;
    if (c.level == "op") {
      OpScenario sc;
      sc.mesh = c.mesh;
      sc.pass = c.pass;
      sc.lhs = c.lhs;
      sc.rhs = c.rhs;
      sc.shape = OpShape{c.experts, c.tokens, c.n, c.k};
      sc.offs = c.offs;
      sc.dist = c.dist;
      sc.seed = c.seed;
      sc.gemm = c.gemm;
      sc.reduce = c.reduce;
      OpRun run;
      on_mesh([&](Communicator& comm) {
        auto be = make_backend(c.backend);
        OpRun mine = run_op(sc, *be, &comm);
        if (comm.is_local(0)) run = std::move(mine);
      });
      holds_root = !run.report.tensors.empty();
      report = std::move(run.report);
      if (holds_root && is_quantized(c.gemm.mode)) {
        const PassRecipes rc = pass_recipes(c.pass);
        ops.push_back(quantize_operand(*backend, lhs_name(c.pass), rc.lhs, run.lhs, c.offs, c.gemm));
        ops.push_back(quantize_operand(*backend, rhs_name(c.pass), rc.rhs, run.rhs, c.offs, c.gemm));
      }
      if (holds_root && keep_tensors) {
        res.tensors.outputs.push_back({out_name(c.pass), to_f(run.out), to_f(run.single), to_f(run.hp64)});
        res.tensors.inputs = {{"lhs", std::move(run.lhs)}, {"rhs", std::move(run.rhs)}};
      }
    } else {
      LayerConfig cfg;
      cfg.mesh = c.mesh;
      cfg.plan = c.plan;
      cfg.experts = c.experts;
      cfg.dim = c.dim;
      cfg.hidden = c.hidden;
      cfg.tokens = c.tokens;
      cfg.offs = c.offs;
      cfg.dist = c.dist;
      cfg.seed = c.seed;
      cfg.gemm = c.gemm;
      cfg.reduce = c.reduce;
      cfg.fsdp_gather = c.fsdp_gather;
      cfg.fp8_dispatch = c.fp8_dispatch;
      cfg.lr = c.lr;
      cfg.backend = c.backend;
      LayerRun run;
      LayerOutputs truth, same;
      on_mesh([&](Communicator& comm) {
        LayerRun r;
        LayerOutputs t, s;
        ScenarioReport rep = run_layer(cfg, &r, &t, &s, &comm);
        if (comm.is_local(0)) {
          report = std::move(rep);
          run = std::move(r);
          truth = std::move(t);
          same = std::move(s);
        }
      });
      holds_root = !report.tensors.empty();
      if (holds_root && (is_quantized(c.gemm.mode) || keep_tensors)) {
        LayerInputs in = layer_inputs(cfg);
        if (is_quantized(c.gemm.mode)) {
          ops.push_back(quantize_operand(*backend, "x", Recipe::act_lhs, in.x, c.offs, c.gemm));
          ops.push_back(quantize_operand(*backend, "dy", Recipe::act_lhs, in.dy, c.offs, c.gemm));
          ops.push_back(quantize_operand(*backend, "w1", Recipe::weight_fwd, in.W1, c.offs, c.gemm));
          ops.push_back(quantize_operand(*backend, "w2", Recipe::weight_fwd, in.W2, c.offs, c.gemm));
          ops.push_back(quantize_operand(*backend, "w3", Recipe::weight_fwd, in.W3, c.offs, c.gemm));
        }
        if (keep_tensors) {
          const auto mine = named_outputs(run.out), t = named_outputs(truth), s = named_outputs(same);
          for (std::size_t i = 0; i < mine.size(); ++i) {
            res.tensors.outputs.push_back({mine[i].first, *mine[i].second, *s[i].second, *t[i].second});
          }
          res.tensors.inputs = {{"x", std::move(in.x)}, {"dy", std::move(in.dy)}, {"w1", std::move(in.W1)},
                                {"w2", std::move(in.W2)}, {"w3", std::move(in.W3)}};
        }
      }
    }
    std::int64_t elements = 0, underflow = 0, saturated = 0;
    for (const auto& op : ops) {
      elements += op.q.stats.elements;
      underflow += op.q.stats.underflow;
      saturated += op.q.stats.saturated;
    }
    const std::string message = report_message(report);
    std::string split_k;
    for (const std::int32_t k : take_cublaslt_splits_seen()) split_k += (split_k.empty() ? "" : ",") + std::to_string(k);
    for (const TensorReport& t : report.tensors) {
      CaseRow row = base;
      row.split_k = split_k;
      row.strategy = report.strategy;
      row.comm_bytes = report.comm_bytes_max_rank;
      row.underflow_frac = elements ? static_cast<double>(underflow) / static_cast<double>(elements) : 0.0;
      row.saturated_frac = elements ? static_cast<double>(saturated) / static_cast<double>(elements) : 0.0;
      fill_metrics(row, t);
      row.message = row.status == "fail" ? join({"non-finite result", message}, "; ") : message;
      res.rows.push_back(std::move(row));
    }
    if (holds_root && keep_tensors) {
      res.tensors.quantized = std::move(ops);
      res.tensors.offs = c.offs;
      res.tensors.block = c.gemm.quant.block;
    }
  } catch (const std::exception& e) {
    // One error row: the case is recorded (and not rerun by --resume) with why it failed.
    res = CaseResult{};
    CaseRow row = base;
    row.tensor = "-";
    row.status = "error";
    row.sqnr_db = row.sqnr_vs_single_db = std::nan("");
    row.message = e.what();
    res.rows.push_back(std::move(row));
    res.error = true;
  }
  res.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (CaseRow& r : res.rows) r.time_ms = res.time_ms;
  return res;
}

}  // namespace fp8moe::sim
