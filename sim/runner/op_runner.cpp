#include "sim/runner/op_runner.hpp"

#include <algorithm>
#include <memory>
#include <tuple>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/dtensor/dtensor.hpp"

namespace fp8moe::sim {
namespace {

// (..., n, ...) -> (..., to, ...) along dim d: zero-filled past n (to >= n) or cut (to < n).
template <class T>
Tensor<T> resize_dim(const Tensor<T>& x, int d, std::int64_t to) {
  std::vector<std::int64_t> shape = x.shape;
  const std::int64_t n = shape[static_cast<std::size_t>(d)];
  shape[static_cast<std::size_t>(d)] = to;
  Tensor<T> y(shape);
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.dim(i);
  for (int i = d + 1; i < x.rank(); ++i) inner *= x.dim(i);
  const std::int64_t keep = std::min(n, to) * inner;
  for (std::int64_t o = 0; o < outer; ++o) {
    std::copy_n(x.ptr() + o * n * inner, keep, y.ptr() + o * to * inner);
  }
  return y;
}

std::int64_t round_up(std::int64_t n, std::int64_t b) { return (n + b - 1) / b * b; }

std::vector<std::int64_t> box_shape(const std::vector<Range>& box) {
  std::vector<std::int64_t> s;
  for (const Range& r : box) s.push_back(r.size());
  return s;
}

// The dtype a pass's output values carry.
OutDtype value_dtype(const GemmOptions& opt) { return opt.mode == Mode::hp64 ? OutDtype::fp64 : opt.out; }

}  // namespace

TensorD run_local_pass(Backend& backend, Pass p, const TensorF& lhs, const TensorF& rhs,
                       std::span<const std::int32_t> offs, const GemmOptions& opt, std::vector<std::string>* notes) {
  // Output shape and contracted length from the operands (see sim/rules/sharding.hpp).
  std::vector<std::int64_t> out;
  std::int64_t contracted = 0;
  switch (p) {
    case Pass::fwd: out = {lhs.dim(0), rhs.dim(1)}, contracted = lhs.dim(1); break;
    case Pass::dgrad: out = {lhs.dim(0), rhs.dim(2)}, contracted = lhs.dim(1); break;
    case Pass::wgrad:
      out = {static_cast<std::int64_t>(offs.size()), lhs.dim(1), rhs.dim(1)}, contracted = lhs.dim(0);
      break;
  }
  if (Tensor<double>::count(out) == 0 || contracted == 0) return TensorD(out, 0.0);
  if (!is_quantized(opt.mode) || p == Pass::wgrad) {
    // wgrad's quantizers block along tokens only; its feature dims are free.
    switch (p) {
      case Pass::fwd: return backend.fwd(lhs, rhs, offs, opt);
      case Pass::dgrad: return backend.dgrad(lhs, rhs, offs, opt);
      case Pass::wgrad: return backend.wgrad(lhs, rhs, offs, opt);
    }
  }
  // fwd: A (M,K), W (E,N,K); dgrad: dOut (M,N), W (E,N,K). The lhs's dim 1 is W's dim 1 (dgrad)
  // or dim 2 (fwd); the output's dim 1 is W's other feature dim.
  const std::int64_t B = opt.quant.block;
  const int lhs_w = p == Pass::fwd ? 2 : 1, out_w = p == Pass::fwd ? 1 : 2;
  const std::int64_t nc = lhs.dim(1), no = rhs.dim(out_w);
  const std::int64_t pc = round_up(nc, B), po = round_up(no, B);
  if (pc == nc && po == no) {
    return p == Pass::fwd ? backend.fwd(lhs, rhs, offs, opt) : backend.dgrad(lhs, rhs, offs, opt);
  }
  if (notes) {
    std::string what;
    if (pc != nc) what += cat("contracted dim ", nc, " -> ", pc);
    if (po != no) what += cat(what.empty() ? "" : ", ", "output feature dim ", no, " -> ", po);
    notes->push_back(cat("zero-padded the local shard to whole ", B, "-blocks (", what,
                         "): a ragged block's amax is over its real elements"));
  }
  const TensorF l = resize_dim(lhs, 1, pc);
  const TensorF r = resize_dim(resize_dim(rhs, lhs_w, pc), out_w, po);
  const TensorD o = p == Pass::fwd ? backend.fwd(l, r, offs, opt) : backend.dgrad(l, r, offs, opt);
  return resize_dim(o, 1, no);
}

namespace {

// run_op in phases: decide, the single-device references, distribute and redistribute the
// inputs, each rank's local pass, the Partial reductions, the report of the output tensor.

// The inputs moved into the chosen strategy (a redistribution is reported with its plan).
void redistribute_inputs(const CaseSpec& sc, const ShardingDecision& d, Communicator& comm, DTensor& l, DTensor& r,
                         ScenarioReport& rep) {
  if (d.verdict != Verdict::redistribute) return;
  const Pass p = sc.pass;
  std::string moves;
  if (!d.lhs_plan.empty()) moves += cat(lhs_name(p), " ", str(sc.lhs), "->", str(d.lhs), " [", str(d.lhs_plan), "]");
  if (!d.rhs_plan.empty()) {
    moves += cat(moves.empty() ? "" : ", ", rhs_name(p), " ", str(sc.rhs), "->", str(d.rhs), " [", str(d.rhs_plan), "]");
  }
  rep.strategy += " after redistributing " + moves;
  rep.notes.push_back(cat("redistributed because ", d.reason, "; planned ", d.redist_bytes, " bytes per rank"));
  l = redistribute(l, d.lhs, comm, sc.reduce);
  r = redistribute(r, d.rhs, comm, sc.reduce);
}

// Each local rank's pass on its shards, offsets replicated: the output DTensor (fp32 in transit)
// and each rank's own result and box in `run`.
DTensor local_passes(const CaseSpec& sc, Backend& backend, const ShardingDecision& d, const Mesh& mesh,
                     Communicator& comm, const DTensor& l, const DTensor& r, OpRun& run) {
  const Pass p = sc.pass;
  const std::vector<std::int64_t> oshape = out_shape(p, sc.op_shape());
  DTensor o;
  o.shape = oshape;
  o.placements = d.out;
  o.local.resize(static_cast<std::size_t>(mesh.world()));
  run.local.resize(static_cast<std::size_t>(mesh.world()));
  run.local_box.resize(static_cast<std::size_t>(mesh.world()));
  for (int rank : comm.local_ranks()) {
    std::vector<std::string> pad_notes;
    TensorD y = run_local_pass(backend, p, l.at(rank), r.at(rank), sc.offs, sc.gemm, &pad_notes);
    for (const std::string& n : pad_notes) run.report.notes.push_back(cat("rank ", rank, ": ", n));
    const std::vector<Range> box = local_box(oshape, d.out, mesh, rank);
    if (y.shape != box_shape(box)) {
      fail("op runner: rank ", rank, " computed ", shape_str(y.shape), " but its box of ", out_name(p), " ",
           str(d.out), " is ", shape_str(box_shape(box)));
    }
    o.at(rank) = to_float(y);
    run.local[static_cast<std::size_t>(rank)] = std::move(y);
    run.local_box[static_cast<std::size_t>(rank)] = box;
  }
  if (value_dtype(sc.gemm) == OutDtype::fp64) {
    run.report.notes.push_back("the distributed output carries fp32: the fp64 local results are rounded to fp32 in transit");
  }
  return o;
}

// Partial outputs: each local partial already carries the output dtype (a kernel writes its result
// rounded); the reduction sums them per ReduceOptions and the sum is cast back to it.
DTensor reduce_partials(const CaseSpec& sc, const ShardingDecision& d, const Mesh& mesh, Communicator& comm, DTensor o,
                        ScenarioReport& rep) {
  if (partial_dims(d.out).empty()) return o;
  Placements reduced = d.out;
  for (Placement& x : reduced) {
    if (x.is_partial()) x = Placement::R();
  }
  const char* dtype = out_dtype_name(value_dtype(sc.gemm));
  for (int md : partial_dims(d.out)) {
    rep.partial_sums.push_back(cat(out_name(sc.pass), " Partial over mesh dim '", mesh.dim(md).name, "' (", mesh.size(md),
                                   " ranks): each rank's partial rounded to ", dtype, " by its local pass, summed in ",
                                   reduce_dtype_name(sc.reduce.dtype), ", ", reduce_order_name(sc.reduce.order),
                                   " order, the sum rounded to ", dtype));
  }
  o = redistribute(o, reduced, comm, sc.reduce);
  if (value_dtype(sc.gemm) == OutDtype::bf16) {
    for (TensorF& t : o.local) {
      for (float& v : t.data) v = round_bf16(v);
    }
  }
  return o;
}

// The output tensor's metrics, and whether the operands' quantization blocks are the single
// device's.
TensorReport output_report(const CaseSpec& sc, const ShardingDecision& d, const Mesh& mesh, const OpRun& run,
                           ScenarioReport& rep) {
  const Pass p = sc.pass;
  TensorReport t;
  t.pass = pass_name(p);
  t.tensor = out_name(p);
  t.vs_hp64 = compare(run.hp64.data, run.out.data);
  t.vs_single = compare(run.single.data, run.out.data);
  if (!is_quantized(sc.gemm.mode)) {
    rep.notes.push_back(cat("mode ", mode_name(sc.gemm.mode), " quantizes nothing: no blocks to move"));
    return t;
  }
  const PassRecipes rc = pass_recipes(p);
  const struct {
    const char* name;
    Recipe recipe;
    std::vector<std::int64_t> shape;
    const Placements& placements;
  } ops[] = {{lhs_name(p), rc.lhs, lhs_shape(p, sc.op_shape()), d.lhs}, {rhs_name(p), rc.rhs, rhs_shape(p, sc.op_shape()), d.rhs}};
  for (const auto& op : ops) {
    const QuantizerRule q = quantizer_rule(op.recipe, op.shape, op.placements, mesh, sc.gemm.quant.block);
    if (!q.block_aligned) {
      t.block_aligned = false;
      rep.misaligned.push_back(cat(op.name, " ", str(op.placements), " (", recipe_name(op.recipe), "): ", q.misaligned));
    }
  }
  return t;
}

// A global input of the pass: the user's tensor (sc.given, the scenario key `inputs`) when there
// is one, else generated from the seed under the tensor's id (of the user's tensors only grad_out
// may be missing).
TensorF op_input(const CaseSpec& sc, const TensorF* given, const std::vector<std::int64_t>& shape, std::uint32_t id,
                 const char* name) {
  if (!given || given->rank() == 0) {
    if (sc.given && id != kTensorGradOut) fail("op scenario: the given inputs have no ", name, ", which ", pass_name(sc.pass), " reads");
    return generate(shape, sc.dist, sc.seed, id);
  }
  if (given->shape != shape) {
    fail("op scenario: the given ", name, " is ", shape_str(given->shape), " but the case needs ", shape_str(shape));
  }
  return *given;
}

}  // namespace

std::pair<TensorF, TensorF> op_inputs(const CaseSpec& sc) {
  const Pass p = sc.pass;
  const OpShape s = sc.op_shape();
  const GivenTensors* g = sc.given.get();
  TensorF lhs = p == Pass::fwd ? op_input(sc, g ? &g->A : nullptr, lhs_shape(p, s), kTensorA, "A")
                               : op_input(sc, g ? &g->grad_out : nullptr, lhs_shape(p, s), kTensorGradOut, "grad_out");
  TensorF rhs = p == Pass::wgrad ? op_input(sc, g ? &g->A : nullptr, rhs_shape(p, s), kTensorA, "A")
                                 : op_input(sc, g ? &g->W : nullptr, rhs_shape(p, s), kTensorW, "W");
  return {std::move(lhs), std::move(rhs)};
}

OpRun run_op(const CaseSpec& sc, Backend& backend, Communicator* external, const OpRunOptions& opt) {
  const Mesh mesh = Mesh::parse(sc.mesh);
  std::unique_ptr<Communicator> owned;
  if (!external) owned = std::make_unique<FakeCommunicator>(mesh);
  Communicator& comm = external ? *external : *owned;
  check_comm_mesh(comm, mesh);
  const Pass p = sc.pass;
  const OpShape s = sc.op_shape();
  OpRun run;
  run.decision = decide(p, s, sc.lhs, sc.rhs, mesh, sc.reduce);
  const ShardingDecision& d = run.decision;
  const std::string plan = cat(lhs_name(p), "=", str(sc.lhs), " ", rhs_name(p), "=", str(sc.rhs));
  if (d.verdict == Verdict::reject) fail("op scenario ", pass_name(p), " ", plan, " on ", mesh.str(), ": ", d.reason);
  if (static_cast<std::int64_t>(sc.offs.size()) != s.E) fail("op scenario: offs has ", sc.offs.size(), " entries but E = ", s.E);

  // Global inputs (the user's, or the same numbers any rank would generate for its slice), and the
  // single-device results of the same mode and of hp64.
  std::tie(run.lhs, run.rhs) = op_inputs(sc);
  if (opt.references) {
    run.single = run_local_pass(backend, p, run.lhs, run.rhs, sc.offs, sc.gemm);
    GemmOptions hp = sc.gemm;
    hp.mode = Mode::hp64;
    hp.out = OutDtype::fp64;
    run.hp64 = run_local_pass(backend, p, run.lhs, run.rhs, sc.offs, hp);
  }

  ScenarioReport& rep = run.report;
  rep.level = "op";
  rep.mesh = mesh.str();
  rep.plan = plan;
  rep.mode = mode_label(sc.gemm.mode, sc.gemm.promotion);
  rep.strategy = strategy_str(d.strategy, mesh);
  rep.reduce_order = reduce_order_name(sc.reduce.order);
  rep.reduce_dtype = reduce_dtype_name(sc.reduce.dtype);

  DTensor l = distribute(run.lhs, sc.lhs, comm), r = distribute(run.rhs, sc.rhs, comm);
  comm.reset_stats();
  redistribute_inputs(sc, d, comm, l, r, rep);
  DTensor o = reduce_partials(sc, d, mesh, comm, local_passes(sc, backend, d, mesh, comm, l, r, run), rep);
  rep.comm_bytes_max_rank = comm.stats().max_bytes();  // the op's own traffic; the gather below is the harness's
  run.out = to_double(full_tensor(o, comm, sc.reduce));
  if (!opt.references) return run;

  const TensorReport t = output_report(sc, d, mesh, run, rep);
  rep.block_aligned = t.block_aligned;
  rep.tensors.push_back(t);
  return run;
}

}  // namespace fp8moe::sim
