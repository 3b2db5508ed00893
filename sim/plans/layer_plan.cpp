// Plan names, their mesh requirements, and the comparison of a plan's run with the single device.
#include "sim/plans/layer_plan.hpp"

#include <algorithm>

#include "reference/error.hpp"
#include "reference/metrics.hpp"
#include "sim/dtensor/dtensor.hpp"

namespace fp8moe::sim {

const std::vector<std::string>& layer_plan_names() {
  static const std::vector<std::string> names{"single", "dp", "fsdp", "tp", "ep", "fsdp+tp", "dp+ep"};
  return names;
}

namespace {

// The mesh dims a plan uses, by name.
std::vector<std::string> plan_dims(const std::string& name) {
  if (name == "single") return {};
  if (name == "dp" || name == "fsdp") return {"dp"};
  if (name == "tp") return {"tp"};
  if (name == "ep") return {"ep"};
  if (name == "fsdp+tp") return {"dp", "tp"};
  if (name == "dp+ep") return {"dp", "ep"};
  std::string all;
  for (const std::string& n : layer_plan_names()) all += (all.empty() ? "" : ", ") + n;
  fail("unknown layer plan '", name, "': use one of ", all);
}

}  // namespace

std::string LayerPlan::describe() const {
  std::string s = name + ": W1/W3 " + str(w13) + ", W2 " + str(w2);
  if (dp_dim >= 0) s += fsdp ? "; fsdp on dp (gather before fwd and bwd, dW reduce_scatter)" : "; dp (dW all_reduce)";
  if (tp_dim >= 0) s += "; tp (y and dx Partial, all_reduce)";
  if (ep_dim >= 0) s += "; ep (all_to_all dispatch and combine)";
  return s;
}

LayerPlan make_layer_plan(const std::string& name, const Mesh& mesh) {
  const std::vector<std::string> dims = plan_dims(name);
  for (const std::string& d : dims) {
    if (mesh.find(d) < 0) fail("plan '", name, "' needs a mesh dim named '", d, "'; mesh '", mesh.str(), "' has none");
  }
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (mesh.size(i) > 1 && std::find(dims.begin(), dims.end(), mesh.dim(i).name) == dims.end()) {
      fail("plan '", name, "' does not use mesh dim '", mesh.dim(i).name, "' (size ", mesh.size(i),
           "): its ranks would duplicate work; use a plan over that dim or size 1");
    }
  }
  LayerPlan p;
  p.name = name;
  p.w13 = replicated(mesh);
  p.w2 = replicated(mesh);
  if (name == "dp" || name == "fsdp" || name == "fsdp+tp" || name == "dp+ep") p.dp_dim = mesh.index_of("dp");
  p.fsdp = name == "fsdp" || name == "fsdp+tp";
  if (name == "tp" || name == "fsdp+tp") p.tp_dim = mesh.index_of("tp");
  if (name == "ep" || name == "dp+ep") p.ep_dim = mesh.index_of("ep");
  auto set = [](Placements& pl, int md, Placement v) {
    if (md >= 0) pl[static_cast<std::size_t>(md)] = v;
  };
  if (p.fsdp) {
    set(p.w13, p.dp_dim, Placement::S(0));
    set(p.w2, p.dp_dim, Placement::S(0));
  }
  set(p.w13, p.tp_dim, Placement::S(1));  // colwise: hidden is W1/W3's output dim
  set(p.w2, p.tp_dim, Placement::S(2));   // rowwise: hidden is W2's contraction dim
  set(p.w13, p.ep_dim, Placement::S(0));
  set(p.w2, p.ep_dim, Placement::S(0));
  return p;
}

std::vector<PlanChoice> enumerate_layer_plans(const Mesh& mesh) {
  std::vector<PlanChoice> out;
  for (const std::string& n : layer_plan_names()) {
    PlanChoice c;
    c.name = n;
    try {
      make_layer_plan(n, mesh);
      c.valid = true;
    } catch (const Error& e) {
      c.reason = e.what();
    }
    out.push_back(c);
  }
  return out;
}

std::vector<std::string> plans_for_mesh(const Mesh& mesh) {
  std::vector<std::string> out;
  for (const PlanChoice& c : enumerate_layer_plans(mesh)) {
    if (c.valid) out.push_back(c.name);
  }
  return out;
}

namespace {

// describe_layer_numerics in parts: the tp shards of H on the block grid, the dp token chunks of
// each expert on it, and the Partial sums and notes.

bool tp_shards_aligned(const LayerPlan& plan, const Mesh& mesh, std::int64_t H, int B, ScenarioReport& rep) {
  if (plan.tp_dim < 0) return true;
  bool ok = true;
  const int n = mesh.size(plan.tp_dim);
  for (int c = 0; c < n; ++c) {
    const Range hr = chunk(H, n, c);
    if (hr.size() > 0 && (hr.begin % B != 0 || (hr.end % B != 0 && hr.end != H))) {
      ok = false;
      rep.misaligned.push_back("tp shard " + std::to_string(c) + " of H = [" + std::to_string(hr.begin) + "," +
                               std::to_string(hr.end) + ") is not on the " + std::to_string(B) +
                               "-block grid: W1/W3 128x128 blocks (fwd rows, dgrad cols), W2 128x128 blocks and the "
                               "1x128 blocks of h and dh1/dh3 along H move (local H zero-padded to the block)");
    }
  }
  return ok;
}

bool dp_chunks_aligned(const LayerPlan& plan, const Mesh& mesh, std::span<const std::int32_t> offs, int B,
                       ScenarioReport& rep) {
  if (plan.dp_dim < 0) return true;
  bool ok = true;
  const int n = mesh.size(plan.dp_dim);
  std::int64_t start = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    const std::int64_t size = offs[e] - start;
    for (int c = 0; c < n; ++c) {
      const Range tr = chunk(size, n, c);
      if (tr.size() > 0 && (tr.begin % B != 0 || (tr.end % B != 0 && tr.end != size))) {
        ok = false;
        rep.misaligned.push_back("dp rank " + std::to_string(c) + " holds tokens [" + std::to_string(tr.begin) + "," +
                                 std::to_string(tr.end) + ") of expert " + std::to_string(e) +
                                 ": the wgrad blocks along tokens (dOut^T 1x128, A 128x1) move");
      }
    }
    start = offs[e];
  }
  return ok;
}

void describe_partial_sums(const CaseSpec& cfg, const LayerPlan& plan, ScenarioReport& rep) {
  const std::string red = std::string(reduce_dtype_name(cfg.reduce.dtype)) + ", " + reduce_order_name(cfg.reduce.order) +
                          (cfg.gemm.mode == Mode::hp64 || cfg.gemm.out != OutDtype::bf16 ? " (not rounded after: hp64/wide outputs)" : "");
  if (plan.tp_dim >= 0) {
    rep.partial_sums.push_back("y: Partial over tp (W2 sharded on its contraction dim H): each rank's bf16 output "
                               "all_reduced in " + red + ", rounded to bf16");
    rep.partial_sums.push_back("dx: Partial over tp (W1/W3 sharded on H): each rank's bf16(dgrad(dh1,W1)+dgrad(dh3,W3)) "
                               "all_reduced in " + red + ", rounded to bf16");
  }
  if (plan.dp_dim >= 0) {
    rep.partial_sums.push_back(std::string("dw1, dw2, dw3: Partial over dp (per-rank token chunks): each rank's bf16 "
                                           "wgrad ") + (plan.fsdp ? "reduce_scattered on E" : "all_reduced") +
                               " in " + red + ", rounded to bf16");
  }
  if (plan.ep_dim >= 0 && cfg.fp8_dispatch) {
    rep.notes.push_back("fp8 dispatch: x travels as e4m3 codes with 1x128 scales; the owner dequantizes to bf16 and "
                        "uses those values as its input (fwd and the saved input of wgrad)");
  }
}

}  // namespace

std::vector<bool> describe_layer_numerics(const CaseSpec& cfg, const LayerPlan& plan, const Mesh& mesh,
                                          std::span<const std::int32_t> offs, ScenarioReport& rep) {
  // Block alignment (quantized modes only: hp64 and bf16 have no blocks).
  const bool quant = is_quantized(cfg.gemm.mode);
  const int B = cfg.gemm.quant.block;
  const bool h_ok = !quant || tp_shards_aligned(plan, mesh, cfg.hidden, B, rep);
  const bool tok_ok = !quant || dp_chunks_aligned(plan, mesh, offs, B, rep);
  rep.block_aligned = h_ok && tok_ok;
  describe_partial_sums(cfg, plan, rep);
  return {h_ok, h_ok, h_ok && tok_ok, h_ok && tok_ok, h_ok && tok_ok};
}

std::vector<std::pair<std::string, const TensorF*>> named_outputs(const LayerOutputs& o) {
  std::vector<std::pair<std::string, const TensorF*>> v{
      {"y", &o.y}, {"dx", &o.dx}, {"dw1", &o.dw1}, {"dw2", &o.dw2}, {"dw3", &o.dw3}};
  if (!o.w1_new.data.empty()) {
    v.emplace_back("w1_new", &o.w1_new);
    v.emplace_back("w2_new", &o.w2_new);
    v.emplace_back("w3_new", &o.w3_new);
  }
  return v;
}

LayerOutputs single_device_layer(const CaseSpec& cfg, Mode mode) {
  CaseSpec c = cfg;
  c.mesh = "1";
  c.plan = "single";
  c.gemm.mode = mode;
  c.fp8_dispatch = false;
  c.fsdp_gather = GatherDtype::bf16;
  return run_layer_plan(c).out;
}

namespace {

Metrics compare_f(const TensorF& ref, const TensorF& x) {
  if (ref.shape != x.shape) fail("layer output shapes differ: ", shape_str(ref.shape), " vs ", shape_str(x.shape));
  std::vector<double> a(ref.data.begin(), ref.data.end()), b(x.data.begin(), x.data.end());
  return compare(a, b);
}

const char* pass_of(const std::string& t) {
  if (t == "y") return "fwd";
  if (t == "dx") return "dgrad";
  if (t.rfind("dw", 0) == 0) return "wgrad";
  return "sgd";
}

}  // namespace

ScenarioReport run_layer(const CaseSpec& cfg, LayerRun* keep, LayerOutputs* truth_out, LayerOutputs* single_out,
                         Communicator* comm) {
  LayerRun run = run_layer_plan(cfg, comm);
  const LayerOutputs truth = single_device_layer(cfg, Mode::hp64);
  const LayerOutputs same = single_device_layer(cfg, cfg.gemm.mode);
  ScenarioReport r = std::move(run.report);
  const auto mine = named_outputs(run.out), t = named_outputs(truth), s = named_outputs(same);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    TensorReport tr;
    tr.tensor = mine[i].first;
    tr.pass = pass_of(tr.tensor);
    tr.vs_hp64 = compare_f(*t[i].second, *mine[i].second);
    tr.vs_single = compare_f(*s[i].second, *mine[i].second);
    // w*_new inherit the alignment of their gradient (dw1, dw2, dw3 at 2, 3, 4).
    const std::size_t a = i < 5 ? i : (i == 5 ? 2 : i == 6 ? 3 : 4);
    tr.block_aligned = run.tensor_aligned.at(a);
    r.tensors.push_back(tr);
  }
  if (keep) *keep = std::move(run);
  if (truth_out) *truth_out = truth;
  if (single_out) *single_out = same;
  return r;
}

}  // namespace fp8moe::sim
