// Token placement of the layer plans: the dp split, the EP counts exchange, dispatch and combine
// (all_to_all over the ep groups), and the assembly of outputs back in single-device token order.
#include <algorithm>
#include <cstring>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "sim/plans/layer_exec.hpp"

namespace fp8moe::sim::layer_detail {

// ---- small tensor moves (data movement only, no arithmetic) ----

// Zero-pads (to > n) or crops (to < n) tensor dim d to `to` elements.
TensorF resize_dim(const TensorF& t, int d, I64 to) {
  if (t.dim(d) == to) return t;
  I64 outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= t.dim(i);
  for (int i = d + 1; i < t.rank(); ++i) inner *= t.dim(i);
  std::vector<I64> s = t.shape;
  s[static_cast<std::size_t>(d)] = to;
  TensorF out(s);
  const I64 n = std::min(t.dim(d), to);
  for (I64 o = 0; o < outer; ++o) {
    std::copy_n(t.ptr() + o * t.dim(d) * inner, n * inner, out.ptr() + o * to * inner);
  }
  return out;
}

TensorF take_rows(const TensorF& g, const std::vector<I64>& rows) {
  const I64 C = g.dim(1);
  TensorF out({static_cast<I64>(rows.size()), C});
  for (std::size_t i = 0; i < rows.size(); ++i) std::copy_n(g.ptr() + rows[i] * C, C, out.ptr() + static_cast<I64>(i) * C);
  return out;
}

// bf16-valued floats as their 16 bf16 bits (the upper half of the fp32 pattern), and back.
std::vector<std::uint16_t> to_bf16_bits(const TensorF& t) {
  std::vector<std::uint16_t> out(t.numel());
  for (std::size_t i = 0; i < t.numel(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &t.data[i], 4);
    if ((u & 0xffffu) != 0 && t.data[i] == t.data[i]) fail("bf16 payload: value ", t.data[i], " is not bf16");
    out[i] = static_cast<std::uint16_t>(u >> 16);
  }
  return out;
}

void from_bf16_bits(const std::vector<std::uint16_t>& in, TensorF& t) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(in[i]) << 16;
    std::memcpy(&t.data[i], &u, 4);
  }
}

void round_all_bf16(TensorF& t) {
  for (float& v : t.data) v = round_bf16(v);
}

Range intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

// ---- the token layout ----

// dp rank c of n: chunk c of every expert's tokens (torch.chunk within each expert).
void dp_split(const Offs& offs, int n, int c, std::vector<I64>& rows, Offs& local) {
  rows.clear();
  local.clear();
  I64 start = 0;
  for (std::int32_t end : offs) {
    const Range r = chunk(end - start, n, c);
    for (I64 i = r.begin; i < r.end; ++i) rows.push_back(start + i);
    local.push_back(static_cast<std::int32_t>(rows.size()));
    start = end;
  }
}

void Exec::place_tokens() {
  const bool quant = is_quantized(cfg.gemm.mode);
  // Every rank's layout, not only the local ones: it is index math on the global offs, and the
  // collectives below size what they exchange with other ranks from it.
  for (int r = 0; r < comm.mesh().world(); ++r) {
    RankState& s = S(r);
    dp_split(offs, n_of(plan.dp_dim), coord(r, plan.dp_dim), s.L_rows, s.L_offs);
    const I64 ML = static_cast<I64>(s.L_rows.size());
    s.experts = plan.ep_dim >= 0 ? chunk(E, n_of(plan.ep_dim), coord(r, plan.ep_dim)) : Range{0, E};
    auto lstart = [&](I64 e) -> I64 { return e == 0 ? 0 : s.L_offs[static_cast<std::size_t>(e - 1)]; };
    s.comp = {lstart(s.experts.begin), lstart(s.experts.end)};
    s.home = plan.ep_dim >= 0 ? chunk(ML, n_of(plan.ep_dim), coord(r, plan.ep_dim)) : s.comp;
    s.opt = cfg.gemm;
  }
  if (plan.ep_dim >= 0) exchange_counts();
  for (int r = 0; r < comm.mesh().world(); ++r) {
    RankState& s = S(r);
    if (plan.ep_dim < 0) {
      s.offs = s.L_offs;
    }
    bool ragged = false;
    I64 prev = 0;
    for (std::int32_t o : s.offs) {
      ragged = ragged || (o - prev) % B != 0;
      prev = o;
    }
    if (quant && ragged && !s.opt.pad) {
      s.opt.pad = true;
      add_note("rank " + std::to_string(r) + ": local token groups are not multiples of " + std::to_string(B) +
               ", so its passes pad token groups (reference/SPEC.md 5.3)");
    }
  }
}

void Exec::add_note(const std::string& n) {
  if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
}

void Exec::exchange_counts() {
  for (const Group& g : comm.mesh().groups(plan.ep_dim)) {
    const std::size_t n = g.size();
    std::vector<std::vector<std::vector<std::int32_t>>> sb(n, std::vector<std::vector<std::int32_t>>(n)), rb = sb;
    std::vector<std::vector<ConstBytes>> send(n);
    std::vector<std::vector<Bytes>> recv(n);
    for (std::size_t i = 0; i < n; ++i) {
      const RankState& si = S(g[i]);
      for (std::size_t j = 0; j < n; ++j) {
        const RankState& sj = S(g[j]);
        for (I64 e = sj.experts.begin; e < sj.experts.end; ++e) {
          const Range er{e == 0 ? 0 : si.L_offs[static_cast<std::size_t>(e - 1)], si.L_offs[static_cast<std::size_t>(e)]};
          sb[i][j].push_back(static_cast<std::int32_t>(intersect(er, si.home).size()));
        }
        rb[j][i].resize(static_cast<std::size_t>(sj.experts.size()));
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const bool local = comm.is_local(g[i]);
      for (std::size_t j = 0; j < n; ++j) {
        send[i].push_back(local ? std::as_bytes(std::span<const std::int32_t>(sb[i][j])) : ConstBytes());
        recv[i].push_back(local ? std::as_writable_bytes(std::span<std::int32_t>(rb[i][j])) : Bytes());
      }
    }
    comm.all_to_all(g, send, recv);
    for (std::size_t j = 0; j < n; ++j) {
      RankState& sj = S(g[j]);
      // A local owner builds its offs from the counts it received; the others' (held by other
      // processes of a real mesh) follow from the same index math.
      const bool local = comm.is_local(g[j]);
      sj.offs.assign(static_cast<std::size_t>(sj.experts.size()), 0);
      std::int32_t acc = 0;
      for (std::size_t k = 0; k < sj.offs.size(); ++k) {
        for (std::size_t i = 0; i < n; ++i) acc += local ? rb[j][i][k] : sb[i][j][k];
        sj.offs[k] = acc;
      }
      if (acc != sj.comp.size()) fail("ep dispatch: rank ", g[j], " expects ", sj.comp.size(), " tokens, counts say ", acc);
    }
  }
}

void Exec::move_rows(std::vector<const std::byte*>& src, std::vector<std::byte*>& dst, I64 row_bytes, bool forward) {
  for (const Group& g : comm.mesh().groups(plan.ep_dim)) {
    const std::size_t n = g.size();
    std::vector<std::vector<ConstBytes>> send(n);
    std::vector<std::vector<Bytes>> recv(n);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const RankState& a = S(g[i]);  // sender
        const RankState& b = S(g[j]);  // receiver
        const Range sr = forward ? a.home : a.comp, rr = forward ? b.comp : b.home;
        const Range m = intersect(sr, rr);
        send[i].push_back(comm.is_local(g[i]) ? ConstBytes(src[static_cast<std::size_t>(g[i])] + (m.begin - sr.begin) * row_bytes,
                                                           static_cast<std::size_t>(m.size() * row_bytes))
                                              : ConstBytes());
        recv[j].push_back(comm.is_local(g[j]) ? Bytes(dst[static_cast<std::size_t>(g[j])] + (m.begin - rr.begin) * row_bytes,
                                                      static_cast<std::size_t>(m.size() * row_bytes))
                                              : Bytes());
      }
    }
    // recv[j] was appended in sender order, so recv[j][i] is what j receives from i.
    comm.all_to_all(g, send, recv);
  }
}

std::vector<TensorF> Exec::move_float(const std::vector<TensorF>& in, I64 C, bool forward, bool bf16) {
  std::vector<TensorF> out(st.size());
  std::vector<std::vector<std::uint16_t>> pin(st.size()), pout(st.size());
  std::vector<const std::byte*> src(st.size(), nullptr);
  std::vector<std::byte*> dst(st.size(), nullptr);
  for (int r : comm.local_ranks()) {
    const std::size_t i = static_cast<std::size_t>(r);
    const RankState& s = S(r);
    out[i] = TensorF({forward ? s.comp.size() : s.home.size(), C});
    if (bf16) {
      pin[i] = to_bf16_bits(in[i]);
      pout[i].resize(out[i].numel());
      src[i] = reinterpret_cast<const std::byte*>(pin[i].data());
      dst[i] = reinterpret_cast<std::byte*>(pout[i].data());
    } else {
      src[i] = reinterpret_cast<const std::byte*>(in[i].ptr());
      dst[i] = reinterpret_cast<std::byte*>(out[i].ptr());
    }
  }
  move_rows(src, dst, C * (bf16 ? 2 : 4), forward);
  if (bf16) {
    for (int r : comm.local_ranks()) from_bf16_bits(pout[static_cast<std::size_t>(r)], out[static_cast<std::size_t>(r)]);
  }
  return out;
}

void Exec::load_inputs(const TensorF& g, TensorF RankState::*field, bool fp8) {
  std::vector<TensorF> home(st.size());
  for (int r : comm.local_ranks()) {
    RankState& s = S(r);
    std::vector<I64> rows;
    const Range pr = plan.ep_dim >= 0 ? s.home : s.comp;
    for (I64 p = pr.begin; p < pr.end; ++p) rows.push_back(s.L_rows[static_cast<std::size_t>(p)]);
    home[static_cast<std::size_t>(r)] = take_rows(g, rows);
  }
  if (plan.ep_dim < 0) {
    for (int r : comm.local_ranks()) S(r).*field = std::move(home[static_cast<std::size_t>(r)]);
    return;
  }
  if (!fp8) {
    std::vector<TensorF> c = move_float(home, D, true, true);  // x and dy are bf16
    for (int r : comm.local_ranks()) S(r).*field = std::move(c[static_cast<std::size_t>(r)]);
    return;
  }
  // fp8 dispatch: codes (rows, D) bytes and scales (rows, D/B) floats travel separately.
  std::vector<Quantized> q(st.size()), rq(st.size());
  std::vector<const std::byte*> cs(st.size()), ss(st.size());
  std::vector<std::byte*> cd(st.size()), sd(st.size());
  for (int r : comm.local_ranks()) {
    RankState& s = S(r);
    const std::size_t i = static_cast<std::size_t>(r);
    QuantOptions qo = cfg.gemm.quant;
    if (home[i].dim(0) > 0) {
      q[i] = be->quantize(Recipe::act_lhs, home[i], {}, qo);
    } else {
      q[i].codes = TensorU8({0, D});
      q[i].scales = TensorF({0, D / B});
      q[i].layout = QuantLayout{false, 1, 0, D, 1, static_cast<int>(B)};
    }
    rq[i] = q[i];
    rq[i].recipe = Recipe::act_lhs;
    rq[i].layout = QuantLayout{false, 1, static_cast<std::int64_t>(s.comp.size()), D, 1, static_cast<int>(B)};
    rq[i].format = qo.format;
    rq[i].codes = TensorU8({s.comp.size(), D});
    rq[i].scales = TensorF({s.comp.size(), D / B});
    cs[i] = reinterpret_cast<const std::byte*>(q[i].codes.ptr());
    ss[i] = reinterpret_cast<const std::byte*>(q[i].scales.ptr());
    cd[i] = reinterpret_cast<std::byte*>(rq[i].codes.ptr());
    sd[i] = reinterpret_cast<std::byte*>(rq[i].scales.ptr());
  }
  move_rows(cs, cd, D, true);
  move_rows(ss, sd, (D / B) * static_cast<I64>(sizeof(float)), true);
  for (int r : comm.local_ranks()) {
    TensorF v = S(r).comp.size() > 0 ? be->dequantize(rq[static_cast<std::size_t>(r)]) : TensorF({0, D});
    round_all_bf16(v);  // the receiver's bf16 activation (torchao's a2a-dequant output dtype)
    S(r).*field = std::move(v);
  }
}

void Exec::combine(TensorF RankState::*field) {
  if (plan.ep_dim < 0) return;
  std::vector<TensorF> in(st.size());
  for (int r : comm.local_ranks()) in[static_cast<std::size_t>(r)] = std::move(S(r).*field);
  std::vector<TensorF> out = move_float(in, D, false, outputs_bf16());
  for (int r : comm.local_ranks()) S(r).*field = std::move(out[static_cast<std::size_t>(r)]);
}

TensorF Exec::assemble_rows(TensorF RankState::*field) {
  // Every rank's rows, all-gathered over the whole mesh (a real mesh's process holds only its
  // own), then written in rank order. Ranks that hold the same rows (the members of a tp group)
  // hold equal values, so only tp coordinate 0 sends them: the gathered buffer is the tensor once,
  // not once per tp rank (on fake meshes every member receives it).
  const int W = comm.mesh().world();
  auto rows_of = [&](int r) { return plan.ep_dim >= 0 ? S(r).home : S(r).comp; };
  auto sends = [&](int r) { return plan.tp_dim < 0 || comm.mesh().coord(r, plan.tp_dim) == 0; };
  Group all(static_cast<std::size_t>(W));
  std::size_t total = 0;
  for (int r = 0; r < W; ++r) {
    all[static_cast<std::size_t>(r)] = r;
    if (sends(r)) total += static_cast<std::size_t>(rows_of(r).size() * D);
  }
  std::vector<std::vector<float>> got(static_cast<std::size_t>(W));
  std::vector<ConstBytes> send;
  std::vector<Bytes> recv;
  for (int r = 0; r < W; ++r) {
    const bool local = comm.is_local(r);
    if (local) got[static_cast<std::size_t>(r)].resize(total);
    send.push_back(local && sends(r) ? std::as_bytes(std::span<const float>((S(r).*field).data)) : ConstBytes());
    recv.push_back(std::as_writable_bytes(std::span<float>(got[static_cast<std::size_t>(r)])));
  }
  comm.all_gather(all, send, recv);
  const std::vector<float>& buf = got[static_cast<std::size_t>(comm.local_ranks().front())];
  TensorF g({M, D});
  std::size_t off = 0;
  for (int r = 0; r < W; ++r) {
    if (!sends(r)) continue;
    const Range pr = rows_of(r);
    for (I64 p = pr.begin; p < pr.end; ++p, off += static_cast<std::size_t>(D)) {
      std::copy_n(buf.data() + off, D, g.ptr() + S(r).L_rows[static_cast<std::size_t>(p)] * D);
    }
  }
  return g;
}

}  // namespace fp8moe::sim::layer_detail
