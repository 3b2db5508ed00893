// The SPMD executor of the layer plans (sim/plans/layer_plan.hpp): every step is written per rank
// over comm.local_ranks(), with the collectives on the mesh dims' groups, so a communicator that
// holds one rank per process runs the same code. Global tensors are generated from (seed, tensor
// id) on every rank (the data-loader model of STYLE.md: any rank can make its own slice).
#include <algorithm>
#include <cmath>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "sim/plans/layer_exec.hpp"

namespace fp8moe::sim {
namespace layer_detail {

void Exec::make_data() {
  E = cfg.experts;
  D = cfg.dim;
  H = cfg.hidden;
  M = cfg.tokens;
  B = cfg.gemm.quant.block;
  LayerInputs in = layer_inputs(cfg);
  offs = std::move(in.offs);
  x = std::move(in.x);
  dy = std::move(in.dy);
  W1 = std::move(in.W1);
  W3 = std::move(in.W3);
  W2 = std::move(in.W2);
}

}  // namespace layer_detail

LayerInputs layer_inputs(const CaseSpec& cfg) {
  using I64 = std::int64_t;
  const I64 E = cfg.experts, D = cfg.dim, H = cfg.hidden, M = cfg.tokens;
  LayerInputs in;
  in.offs = cfg.offs.empty() ? make_offsets(M, static_cast<int>(E), cfg.routing, cfg.seed) : cfg.offs;
  if (static_cast<I64>(in.offs.size()) != E) fail("offs has ", in.offs.size(), " entries for ", E, " experts");
  if (in.offs.back() != M) fail("offs end at ", in.offs.back(), " but the layer has ", M, " tokens");
  if (const GivenTensors* g = cfg.given.get()) {
    // The user's tensors (the scenario key `inputs`), as given: weights are not rescaled.
    const auto need = [&](const TensorF& t, std::vector<I64> shape, const char* name) {
      if (t.shape != shape) fail("layer: the given ", name, " is ", shape_str(t.shape), " but the case needs ", shape_str(shape));
      return t;
    };
    in.x = need(g->x, {M, D}, "x");
    in.dy = g->grad_y.rank() != 0 ? need(g->grad_y, {M, D}, "grad_y") : generate({M, D}, cfg.dist, cfg.seed, kTensorGradOut);
    in.W1 = need(g->w1, {E, H, D}, "w1");
    in.W3 = need(g->w3, {E, H, D}, "w3");
    in.W2 = need(g->w2, {E, D, H}, "w2");
    return in;
  }
  in.x = generate({M, D}, cfg.dist, cfg.seed, kTensorA);
  in.dy = generate({M, D}, cfg.dist, cfg.seed, kTensorGradOut);
  auto weight = [&](std::vector<I64> shape, std::uint32_t id, I64 fan_in) {
    TensorF w = generate(shape, cfg.dist, cfg.seed, id);
    const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    for (float& v : w.data) v = round_bf16(v * s);
    return w;
  };
  in.W1 = weight({E, H, D}, kTensorW, D);
  in.W3 = weight({E, H, D}, kTensorW3, D);
  in.W2 = weight({E, D, H}, kTensorW2, H);
  return in;
}

namespace layer_detail {

std::vector<TensorF> Exec::gather_bf16(const DTensor& w) {
  std::vector<TensorF> out(st.size());
  for (const Group& g : comm.mesh().groups(plan.dp_dim)) {
    std::vector<std::vector<std::uint16_t>> mine, all(g.size());
    std::vector<ConstBytes> send;
    std::vector<Bytes> recv;
    // The gathered weight holds every expert: E times a local member's expert (the members of a
    // dp group share their tp coordinate). Sized from the shapes, since on a real mesh the other
    // members' shards are not here.
    std::size_t total = 0;
    for (int r : g) {
      if (comm.is_local(r)) total = static_cast<std::size_t>(E * w.at(r).dim(1) * w.at(r).dim(2));  // (E_r, N, K)
    }
    for (int r : g) mine.push_back(to_bf16_bits(w.at(r)));
    for (const auto& m : mine) send.push_back(std::as_bytes(std::span(m)));
    for (std::size_t j = 0; j < g.size(); ++j) {
      if (comm.is_local(g[j])) all[j].resize(total);
      recv.push_back(std::as_writable_bytes(std::span(all[j])));
    }
    comm.all_gather(g, send, recv);
    for (std::size_t j = 0; j < g.size(); ++j) {
      if (!comm.is_local(g[j])) continue;
      std::vector<I64> shape = w.at(g[j]).shape;
      shape[0] = E;
      TensorF t(shape);
      from_bf16_bits(all[j], t);
      out[static_cast<std::size_t>(g[j])] = std::move(t);
    }
  }
  return out;
}

I64 Exec::h_pad(int r) const {
  const I64 n = h_range(r).size();
  return (n + B - 1) / B * B;
}

void Exec::gather_weights(bool bwd) {
  const bool fp8 = plan.fsdp && cfg.fsdp_gather == GatherDtype::fp8;
  use_q = fp8;
  if (!fp8) {
    const std::vector<TensorF> a = plan.fsdp ? gather_bf16(W1d) : W1d.local;
    const std::vector<TensorF> b = plan.fsdp ? gather_bf16(W3d) : W3d.local;
    const std::vector<TensorF> c = plan.fsdp ? gather_bf16(W2d) : W2d.local;
    for (int r : comm.local_ranks()) {
      const std::size_t i = static_cast<std::size_t>(r);
      S(r).w1 = resize_dim(a[i], 1, h_pad(r));
      S(r).w3 = resize_dim(b[i], 1, h_pad(r));
      S(r).w2 = resize_dim(c[i], 2, h_pad(r));
    }
    return;
  }
  // fp8: every rank quantizes its own expert shard, then codes and scales are all-gathered.
  const Recipe rec = bwd ? Recipe::weight_dgrad : Recipe::weight_fwd;
  auto one = [&](const DTensor& w, int hdim, Quantized RankState::*field) {
    std::vector<Quantized> mine(st.size());
    for (int r : comm.local_ranks()) {
      const TensorF local = resize_dim(w.at(r), hdim, h_pad(r));
      if (local.dim(0) > 0) {
        mine[static_cast<std::size_t>(r)] = be->quantize(rec, local, {}, cfg.gemm.quant);
      } else {  // a dp rank with no expert (E < dp): an empty shard with the recipe's metadata
        TensorF one = local;
        one.shape[0] = 1;
        one.data.assign(TensorF::count(one.shape), 0.0f);
        Quantized q = be->quantize(rec, one, {}, cfg.gemm.quant);
        q.layout.batch = 0;
        q.codes = TensorU8(q.layout.code_shape());
        q.scales = TensorF(q.layout.scale_shape());
        mine[static_cast<std::size_t>(r)] = std::move(q);
      }
    }
    for (const Group& g : comm.mesh().groups(plan.dp_dim)) {
      auto gather = [&](auto member_tensor, auto out_of) {
        std::vector<ConstBytes> send;
        std::size_t total = 0;
        for (int r : g) {
          const auto& t = member_tensor(mine[static_cast<std::size_t>(r)]);
          send.push_back(std::as_bytes(std::span(t.data)));
          total += send.back().size();
        }
        (void)total;  // the communicator checks the receive sizes against every member's send
        std::vector<Bytes> recv;
        for (int r : g) {
          auto& t = out_of(S(r).*field);
          recv.push_back(comm.is_local(r) ? std::as_writable_bytes(std::span(t.data)) : Bytes());
        }
        comm.all_gather(g, send, recv);
      };
      for (int r : g) {
        if (!comm.is_local(r)) continue;
        Quantized& q = S(r).*field;
        q = mine[static_cast<std::size_t>(r)];
        q.layout.batch = E;  // the gathered experts: every index below reads through the layout
        q.codes.shape = q.layout.code_shape();
        q.scales.shape = q.layout.scale_shape();
        q.codes.data.resize(Tensor<std::uint8_t>::count(q.codes.shape));
        q.scales.data.resize(TensorF::count(q.scales.shape));
      }
      gather([](const Quantized& q) -> const TensorU8& { return q.codes; }, [](Quantized& q) -> TensorU8& { return q.codes; });
      gather([](const Quantized& q) -> const TensorF& { return q.scales; }, [](Quantized& q) -> TensorF& { return q.scales; });
    }
  };
  one(W1d, 1, &RankState::q1);
  one(W3d, 1, &RankState::q3);
  one(W2d, 2, &RankState::q2);
}

TensorF Exec::fwd(RankState& s, const TensorF& A, const TensorF& W, const Quantized& Wq, I64 N) {
  if (A.dim(0) == 0 || s.offs.empty()) return TensorF({A.dim(0), N});
  return to_float(use_q ? be->fwd_qweight(A, Wq, s.offs, s.opt) : be->fwd(A, W, s.offs, s.opt));
}

TensorF Exec::dgrad(RankState& s, const TensorF& G, const TensorF& W, const Quantized& Wq, I64 K) {
  if (G.dim(0) == 0 || s.offs.empty()) return TensorF({G.dim(0), K});
  return to_float(use_q ? be->dgrad_qweight(G, Wq, s.offs, s.opt) : be->dgrad(G, W, s.offs, s.opt));
}

TensorF Exec::wgrad(RankState& s, const TensorF& G, const TensorF& A) {
  const I64 El = static_cast<I64>(s.offs.size());
  if (El == 0 || G.dim(0) == 0) return TensorF({El, G.dim(1), A.dim(1)});
  return to_float(be->wgrad(G, A, s.offs, s.opt));
}

void Exec::reduce_tp(TensorF RankState::*field) {
  if (plan.tp_dim < 0) return;
  for (const Group& g : comm.mesh().groups(plan.tp_dim)) {
    std::vector<Floats> io;
    for (int r : g) io.emplace_back((S(r).*field).data);
    comm.all_reduce(g, io, cfg.reduce);
    if (outputs_bf16()) for (int r : g) round_all_bf16(S(r).*field);
  }
}

void Exec::reduce_dp(TensorF RankState::*field) {
  if (plan.dp_dim < 0) return;
  for (const Group& g : comm.mesh().groups(plan.dp_dim)) {
    if (!plan.fsdp) {
      std::vector<Floats> io;
      for (int r : g) io.emplace_back((S(r).*field).data);
      comm.all_reduce(g, io, cfg.reduce);
      if (outputs_bf16()) for (int r : g) round_all_bf16(S(r).*field);
      continue;
    }
    // (E, N, K), every member the same shape; a process holding no member only takes part.
    const TensorF* t0 = nullptr;
    for (int r : g) {
      if (comm.is_local(r) && !t0) t0 = &(S(r).*field);
    }
    const I64 n1 = t0 ? t0->dim(1) : 0, n2 = t0 ? t0->dim(2) : 0;
    std::vector<I64> counts;
    std::vector<TensorF> mine;
    for (std::size_t j = 0; j < g.size(); ++j) {
      const Range er = chunk(E, static_cast<int>(g.size()), static_cast<int>(j));
      counts.push_back(er.size() * n1 * n2);
      mine.emplace_back(std::vector<I64>{comm.is_local(g[j]) ? er.size() : 0, n1, n2});
    }
    std::vector<ConstFloats> send;
    std::vector<Floats> recv;
    for (std::size_t j = 0; j < g.size(); ++j) {
      send.emplace_back((S(g[j]).*field).data);
      recv.emplace_back(mine[j].data);
    }
    comm.reduce_scatter(g, send, recv, counts, cfg.reduce);
    for (std::size_t j = 0; j < g.size(); ++j) {
      if (!comm.is_local(g[j])) continue;
      if (outputs_bf16()) round_all_bf16(mine[j]);
      S(g[j]).*field = std::move(mine[j]);
    }
  }
}

void Exec::run() {
  make_data();
  st.assign(static_cast<std::size_t>(comm.mesh().world()), RankState{});
  if (plan.fsdp && cfg.fsdp_gather == GatherDtype::fp8 && cfg.gemm.mode != Mode::exact &&
      !is_promoted(cfg.gemm.mode)) {
    fail("fsdp fp8 all-gather runs the passes on gathered fp8 weights, which needs mode exact, promote-fp32 or "
         "hopper-tc, not ", mode_name(cfg.gemm.mode));
  }
  place_tokens();
  W1d = distribute(W1, plan.w13, comm);
  W3d = distribute(W3, plan.w13, comm);
  W2d = distribute(W2, plan.w2, comm);
  load_inputs(x, &RankState::x, cfg.fp8_dispatch && plan.ep_dim >= 0);

  // forward
  gather_weights(false);
  for (int r : comm.local_ranks()) {
    RankState& s = S(r);
    const I64 Hp = h_pad(r);
    s.h1 = fwd(s, s.x, s.w1, s.q1, Hp);
    s.h3 = fwd(s, s.x, s.w3, s.q3, Hp);
    s.h = be->swiglu(s.h1, s.h3);
    s.y_home = fwd(s, s.h, s.w2, s.q2, D);  // the compute rows until the combine
  }
  reduce_tp(&RankState::y_home);
  combine(&RankState::y_home);

  // backward
  load_inputs(dy, &RankState::dy, false);  // the gradient travels in bf16
  gather_weights(true);
  for (int r : comm.local_ranks()) {
    RankState& s = S(r);
    const TensorF& g = s.dy;
    const TensorF dh = dgrad(s, g, s.w2, s.q2, h_pad(r));
    s.dw2 = wgrad(s, g, s.h);
    TensorF dh1, dh3;
    be->swiglu_backward(s.h1, s.h3, dh, dh1, dh3);
    const TensorF a = dgrad(s, dh1, s.w1, s.q1, D), b = dgrad(s, dh3, s.w3, s.q3, D);
    s.dx_home = TensorF(a.shape);
    // the two dgrads summed in fp32, then the bf16 activation gradient (hp64 keeps the fp32 sum)
    for (std::size_t i = 0; i < a.numel(); ++i) {
      const float v = a.data[i] + b.data[i];
      s.dx_home.data[i] = outputs_bf16() ? round_bf16(v) : v;
    }
    s.dw1 = resize_dim(wgrad(s, dh1, s.x), 1, h_range(r).size());
    s.dw3 = resize_dim(wgrad(s, dh3, s.x), 1, h_range(r).size());
    s.dw2 = resize_dim(s.dw2, 2, h_range(r).size());
  }
  reduce_tp(&RankState::dx_home);
  combine(&RankState::dx_home);
  reduce_dp(&RankState::dw1);
  reduce_dp(&RankState::dw2);
  reduce_dp(&RankState::dw3);

  if (cfg.lr > 0) {
    auto sgd = [&](const DTensor& w, TensorF RankState::*grad, TensorF RankState::*out) {
      for (int r : comm.local_ranks()) {
        const TensorF& p = w.at(r);
        const TensorF& d = S(r).*grad;
        if (p.shape != d.shape) fail("sgd: rank ", r, " parameter ", shape_str(p.shape), " vs grad ", shape_str(d.shape));
        TensorF n(p.shape);
        for (std::size_t i = 0; i < p.numel(); ++i) n.data[i] = round_bf16(p.data[i] - cfg.lr * d.data[i]);
        S(r).*out = std::move(n);
      }
    };
    sgd(W1d, &RankState::dw1, &RankState::w1_new);
    sgd(W3d, &RankState::dw3, &RankState::w3_new);
    sgd(W2d, &RankState::dw2, &RankState::w2_new);
  }
}

void Exec::keep_local(std::vector<LayerLocal>& out) {
  const Mesh& mesh = comm.mesh();
  for (int r : comm.local_ranks()) {
    RankState& s = S(r);
    LayerLocal l;
    l.rank = r;
    const Range rows = plan.ep_dim >= 0 ? s.home : s.comp;  // the rows assemble_rows takes from r
    for (I64 p = rows.begin; p < rows.end; ++p) l.rows.push_back(s.L_rows[static_cast<std::size_t>(p)]);
    l.y = s.y_home;
    l.dx = s.dx_home;
    l.dw1 = s.dw1, l.dw3 = s.dw3, l.dw2 = s.dw2;
    l.w1_new = s.w1_new, l.w3_new = s.w3_new, l.w2_new = s.w2_new;
    l.w13_box = local_box(W1d.shape, W1d.placements, mesh, r);
    l.w2_box = local_box(W2d.shape, W2d.placements, mesh, r);
    out.push_back(std::move(l));
  }
}

TensorF Exec::assemble_param(const DTensor& like, TensorF RankState::*field) {
  DTensor t;
  t.shape = like.shape;
  t.placements = like.placements;
  t.local.resize(st.size());
  for (int r : comm.local_ranks()) t.at(r) = S(r).*field;
  return full_tensor(t, comm);
}

}  // namespace layer_detail

LayerRun run_layer_plan(const CaseSpec& cfg, Communicator* comm) {
  using namespace layer_detail;
  Exec ex(cfg, Mesh::parse(cfg.mesh), comm);
  ex.run();
  LayerRun out;
  ScenarioReport& rep = out.report;
  rep.level = "layer";
  rep.mesh = ex.comm.mesh().str();
  rep.plan = cfg.plan;
  rep.mode = mode_label(cfg.gemm.mode, cfg.gemm.promotion);
  rep.strategy = ex.plan.describe();
  if (ex.plan.fsdp) rep.strategy += std::string("; fsdp all-gather in ") + gather_dtype_name(cfg.fsdp_gather);
  if (ex.plan.ep_dim >= 0 && cfg.fp8_dispatch) rep.strategy += "; fp8 dispatch (x as 1x128 codes + scales)";
  rep.reduce_order = reduce_order_name(cfg.reduce.order);
  rep.reduce_dtype = reduce_dtype_name(cfg.reduce.dtype);
  rep.comm_bytes_max_rank = ex.comm.stats().max_bytes();
  rep.notes = ex.notes;

  out.tensor_aligned = describe_layer_numerics(cfg, ex.plan, ex.comm.mesh(), ex.offs, rep);

  out.out.y = ex.assemble_rows(&RankState::y_home);
  out.out.dx = ex.assemble_rows(&RankState::dx_home);
  out.out.dw1 = ex.assemble_param(ex.W1d, &RankState::dw1);
  out.out.dw3 = ex.assemble_param(ex.W3d, &RankState::dw3);
  out.out.dw2 = ex.assemble_param(ex.W2d, &RankState::dw2);
  if (cfg.lr > 0) {
    out.out.w1_new = ex.assemble_param(ex.W1d, &RankState::w1_new);
    out.out.w3_new = ex.assemble_param(ex.W3d, &RankState::w3_new);
    out.out.w2_new = ex.assemble_param(ex.W2d, &RankState::w2_new);
  }
  ex.keep_local(out.local);
  return out;
}

}  // namespace fp8moe::sim
