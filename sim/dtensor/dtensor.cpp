#include "sim/dtensor/dtensor.hpp"

#include <algorithm>
#include <cstring>

#include "reference/error.hpp"

namespace fp8moe::sim {
namespace {

std::vector<std::int64_t> box_shape(const std::vector<Range>& box) {
  std::vector<std::int64_t> s;
  for (const Range& r : box) s.push_back(r.size());
  return s;
}

// Copies the sub-box `src_box` (global coordinates) of tensor `src` (covering `src_origin`) into
// `dst` (covering `dst_origin`). Tensors are row-major of any rank.
void copy_box(const TensorF& src, const std::vector<Range>& src_cover, TensorF& dst, const std::vector<Range>& dst_cover,
              const std::vector<Range>& box) {
  const int nd = static_cast<int>(box.size());
  if (nd == 0) {
    if (!src.data.empty() && !dst.data.empty()) dst.data[0] = src.data[0];
    return;
  }
  for (const Range& r : box) {
    if (r.size() <= 0) return;
  }
  std::vector<std::int64_t> idx(static_cast<std::size_t>(nd), 0);
  const std::int64_t inner = box.back().size();
  while (true) {
    std::int64_t so = 0, dof = 0;
    for (int d = 0; d < nd; ++d) {
      const std::int64_t g = box[static_cast<std::size_t>(d)].begin + (d == nd - 1 ? 0 : idx[static_cast<std::size_t>(d)]);
      so = so * src_cover[static_cast<std::size_t>(d)].size() + (g - src_cover[static_cast<std::size_t>(d)].begin);
      dof = dof * dst_cover[static_cast<std::size_t>(d)].size() + (g - dst_cover[static_cast<std::size_t>(d)].begin);
    }
    std::copy_n(src.data.data() + so, inner, dst.data.data() + dof);
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < box[static_cast<std::size_t>(d)].size()) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
    if (d < 0) break;
  }
}

std::vector<Range> intersect(const std::vector<Range>& a, const std::vector<Range>& b) {
  std::vector<Range> r(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) r[i] = {std::max(a[i].begin, b[i].begin), std::min(a[i].end, b[i].end)};
  for (Range& x : r) x.end = std::max(x.end, x.begin);
  return r;
}

std::int64_t volume(const std::vector<Range>& box) {
  std::int64_t v = 1;
  for (const Range& r : box) v *= r.size();
  return v;
}

// step()'s cases on one group of mesh-dim members: `in` and `out` are the members' boxes before
// and after. A member another process holds (a real mesh) takes part in the collectives only.
struct GroupStep {
  const DTensor& t;
  DTensor& out;
  const Group& g;
  int md;
  const Placement& to;
  Communicator& comm;
  const ReduceOptions& opt;
  std::vector<std::vector<Range>> in, out_box;
};

// Partial -> Shard: a reduce-scatter along tensor dim to.dim. Each partial is laid out chunk by
// chunk so member j's chunk is contiguous; segment j is reduced onto member j.
void reduce_scatter_group(GroupStep& s, const std::vector<TensorF>& summed) {
  const std::size_t n = s.g.size();
  std::vector<TensorF> laid(n), mine(n);
  std::vector<std::int64_t> counts(n);
  for (std::size_t j = 0; j < n; ++j) counts[j] = volume(s.out_box[j]);
  std::vector<ConstFloats> send;
  std::vector<Floats> recv;
  for (std::size_t i = 0; i < n; ++i) {
    if (!s.comm.is_local(s.g[i])) {
      send.emplace_back();
      recv.emplace_back();
      continue;
    }
    laid[i] = TensorF({volume(s.in[i])});
    std::int64_t off = 0;
    for (std::size_t j = 0; j < n; ++j) {
      TensorF piece(box_shape(s.out_box[j]));
      copy_box(summed[i], s.in[i], piece, s.out_box[j], s.out_box[j]);
      std::copy(piece.data.begin(), piece.data.end(), laid[i].data.begin() + off);
      off += counts[j];
    }
    send.emplace_back(laid[i].data);
    mine[i] = TensorF(box_shape(s.out_box[i]));
    recv.emplace_back(mine[i].data);
  }
  s.comm.reduce_scatter(s.g, send, recv, counts, s.opt);
  for (std::size_t i = 0; i < n; ++i) {
    if (s.comm.is_local(s.g[i])) s.out.at(s.g[i]) = std::move(mine[i]);
  }
}

// Partial -> Replicate or Shard: reduce the members' (equal-box) partials; each keeps the part of
// the sum in its new box.
void reduce_group(GroupStep& s) {
  const std::size_t n = s.g.size();
  std::vector<TensorF> summed(n);
  std::vector<Floats> io;
  for (std::size_t i = 0; i < n; ++i) {
    summed[i] = s.t.at(s.g[i]);
    io.emplace_back(summed[i].data);
  }
  if (s.to.is_shard()) return reduce_scatter_group(s, summed);
  s.comm.all_reduce(s.g, io, s.opt);
  for (std::size_t i = 0; i < n; ++i) {
    if (s.comm.is_local(s.g[i])) s.out.at(s.g[i]) = std::move(summed[i]);
  }
}

// Shard -> anything else: all_gather the members' shards, then each keeps its new box (a local
// chunk for Shard; coordinate 0 the values for Partial).
void gather_group(GroupStep& s) {
  const std::size_t n = s.g.size();
  std::vector<ConstBytes> send;
  std::vector<std::vector<std::byte>> recv_store(n);
  std::vector<Bytes> recv;
  // Sizes from the boxes: on a real mesh the other members' shards are not here.
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    send.push_back(std::as_bytes(std::span<const float>(s.t.at(s.g[i]).data)));
    total += static_cast<std::size_t>(volume(s.in[i])) * sizeof(float);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (s.comm.is_local(s.g[i])) recv_store[i].resize(total);
    recv.emplace_back(recv_store[i]);
  }
  s.comm.all_gather(s.g, send, recv);
  for (std::size_t j = 0; j < n; ++j) {
    if (!s.comm.is_local(s.g[j])) continue;
    TensorF mine(box_shape(s.out_box[j]));
    std::size_t off = 0;
    for (std::size_t i = 0; i < n; ++i) {
      TensorF piece(box_shape(s.in[i]));
      // Guarded: an empty piece's vector has a null data(), which memcpy may not take (UBSan).
      if (piece.numel() > 0) std::memcpy(piece.data.data(), recv_store[j].data() + off, piece.numel() * sizeof(float));
      off += piece.numel() * sizeof(float);
      copy_box(piece, s.in[i], mine, s.out_box[j], intersect(s.in[i], s.out_box[j]));
    }
    if (s.to.is_partial() && s.comm.mesh().coord(s.g[j], s.md) != 0) std::fill(mine.data.begin(), mine.data.end(), 0.0f);
    s.out.at(s.g[j]) = std::move(mine);
  }
}

// Replicate -> Shard: the local chunk; Replicate -> Partial: coordinate 0 keeps the values.
void local_group(GroupStep& s) {
  for (std::size_t j = 0; j < s.g.size(); ++j) {
    if (!s.comm.is_local(s.g[j])) continue;
    TensorF mine(box_shape(s.out_box[j]));
    copy_box(s.t.at(s.g[j]), s.in[j], mine, s.out_box[j], s.out_box[j]);
    if (s.to.is_partial() && s.comm.mesh().coord(s.g[j], s.md) != 0) std::fill(mine.data.begin(), mine.data.end(), 0.0f);
    s.out.at(s.g[j]) = std::move(mine);
  }
}

// One mesh dim changes placement; every other dim keeps its own.
DTensor step(const DTensor& t, int md, const Placement& to, Communicator& comm, const ReduceOptions& opt) {
  const Mesh& mesh = comm.mesh();
  DTensor out;
  out.shape = t.shape;
  out.placements = t.placements;
  out.placements[static_cast<std::size_t>(md)] = to;
  out.local.resize(static_cast<std::size_t>(mesh.world()));
  const Placement from = t.placements[static_cast<std::size_t>(md)];
  for (const Group& g : mesh.groups(md)) {
    GroupStep s{t, out, g, md, to, comm, opt, {}, {}};
    for (int r : g) {
      s.in.push_back(local_box(t.shape, t.placements, mesh, r));
      s.out_box.push_back(local_box(out.shape, out.placements, mesh, r));
    }
    if (from.is_partial()) {
      reduce_group(s);
    } else if (from.is_shard() && !(to == from)) {
      gather_group(s);
    } else {
      local_group(s);
    }
  }
  return out;
}

// The order of single-dim steps: reductions first (Partial needs equal boxes), then un-sharding
// from the innermost mesh dim out, then sharding from the outermost in (nested shards of one
// tensor dim split in mesh-dim order).
std::vector<std::pair<int, Placement>> order_steps(const Placements& src, const Placements& dst) {
  std::vector<std::pair<int, Placement>> steps;
  const int nd = static_cast<int>(src.size());
  Placements cur = src;
  for (int md = 0; md < nd; ++md) {
    if (cur[static_cast<std::size_t>(md)].is_partial() && !dst[static_cast<std::size_t>(md)].is_partial()) {
      // a reduce-scatter straight into the target shard only when nothing inner is sharded on it
      bool inner_shard = false;
      for (int k = md + 1; k < nd; ++k) inner_shard = inner_shard || cur[static_cast<std::size_t>(k)].is_shard();
      const Placement to = dst[static_cast<std::size_t>(md)].is_shard() && !inner_shard ? dst[static_cast<std::size_t>(md)] : Placement::R();
      steps.emplace_back(md, to);
      cur[static_cast<std::size_t>(md)] = to;
    }
  }
  // A shard is undone when it changes, or when an outer mesh dim changes how the same tensor dim
  // is split (inner shards are chunks of the outer ones).
  for (int md = nd - 1; md >= 0; --md) {
    const Placement c = cur[static_cast<std::size_t>(md)];
    if (!c.is_shard()) continue;
    bool undo = !(c == dst[static_cast<std::size_t>(md)]);
    for (int k = 0; k < md && !undo; ++k) {
      const Placement ck = cur[static_cast<std::size_t>(k)], dk = dst[static_cast<std::size_t>(k)];
      undo = !(ck == dk) && (ck.is_shard(c.dim) || dk.is_shard(c.dim));
    }
    if (undo) {
      steps.emplace_back(md, Placement::R());
      cur[static_cast<std::size_t>(md)] = Placement::R();
    }
  }
  for (int md = 0; md < nd; ++md) {
    if (!(cur[static_cast<std::size_t>(md)] == dst[static_cast<std::size_t>(md)])) {
      if (cur[static_cast<std::size_t>(md)].is_partial()) fail("cannot change ", src[static_cast<std::size_t>(md)].str(), " on mesh dim ", md);
      steps.emplace_back(md, dst[static_cast<std::size_t>(md)]);
      cur[static_cast<std::size_t>(md)] = dst[static_cast<std::size_t>(md)];
    }
  }
  return steps;
}

}  // namespace

Placements replicated(const Mesh& mesh) { return Placements(static_cast<std::size_t>(mesh.ndim()), Placement::R()); }

DTensor distribute(const TensorF& global, const Placements& placements, const Communicator& comm) {
  const Mesh& mesh = comm.mesh();
  DTensor t;
  t.shape = global.shape;
  t.placements = placements;
  t.local.resize(static_cast<std::size_t>(mesh.world()));
  std::vector<Range> full;
  for (std::int64_t n : global.shape) full.push_back({0, n});
  for (int r : comm.local_ranks()) {
    const std::vector<Range> box = local_box(global.shape, placements, mesh, r);
    TensorF mine(box_shape(box));
    copy_box(global, full, mine, box, box);
    for (int md : partial_dims(placements)) {
      if (mesh.coord(r, md) != 0) std::fill(mine.data.begin(), mine.data.end(), 0.0f);
    }
    t.at(r) = std::move(mine);
  }
  return t;
}

std::vector<RedistStep> plan_redistribute(const std::vector<std::int64_t>& shape, const Placements& src,
                                          const Placements& dst, const Mesh& mesh, const ReduceOptions& opt) {
  std::vector<RedistStep> plan;
  Placements cur = src;
  for (const auto& [md, to] : order_steps(src, dst)) {
    RedistStep s;
    s.mesh_dim = md;
    s.from = cur[static_cast<std::size_t>(md)];
    s.to = to;
    const int n = mesh.size(md);
    std::int64_t biggest = 0;  // the largest local box before the step
    for (int r = 0; r < mesh.world(); ++r) biggest = std::max(biggest, volume(local_box(shape, cur, mesh, r)));
    const std::int64_t esize = s.from.is_partial() && opt.dtype == ReduceDtype::bf16 ? 2 : 4;
    if (s.from.is_partial()) {
      s.collective = to.is_shard() ? "reduce_scatter" : "all_reduce";
      s.bytes_per_rank = (to.is_shard() ? 1 : 2) * biggest * esize * (n - 1) / n;
    } else if (s.from.is_shard()) {
      s.collective = "all_gather";
      s.bytes_per_rank = biggest * esize * (n - 1);
    } else {
      s.collective = to.is_partial() ? "local_zero" : "local_chunk";
    }
    plan.push_back(s);
    cur[static_cast<std::size_t>(md)] = to;
  }
  return plan;
}

std::int64_t plan_bytes(const std::vector<RedistStep>& plan) {
  std::int64_t b = 0;
  for (const RedistStep& s : plan) b += s.bytes_per_rank;
  return b;
}

std::string str(const std::vector<RedistStep>& plan) {
  if (plan.empty()) return "(none)";
  std::string s;
  for (const RedistStep& st : plan) {
    if (!s.empty()) s += "; ";
    s += st.collective + "@" + std::to_string(st.mesh_dim) + " " + st.from.str() + "->" + st.to.str();
  }
  return s;
}

DTensor redistribute(const DTensor& t, const Placements& dst, Communicator& comm, const ReduceOptions& opt) {
  if (dst.size() != t.placements.size()) fail("redistribute: ", str(dst), " does not match ", str(t.placements));
  DTensor cur = t;
  for (const auto& [md, to] : order_steps(t.placements, dst)) cur = step(cur, md, to, comm, opt);
  return cur;
}

TensorF full_tensor(const DTensor& t, Communicator& comm, const ReduceOptions& opt) {
  const DTensor r = redistribute(t, replicated(comm.mesh()), comm, opt);
  return r.at(comm.local_ranks().front());
}

}  // namespace fp8moe::sim
