#include "sim/mesh/dtensor.hpp"

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
    std::vector<std::vector<Range>> in_box, out_box;
    for (int r : g) {
      in_box.push_back(local_box(t.shape, t.placements, mesh, r));
      out_box.push_back(local_box(out.shape, out.placements, mesh, r));
    }
    const std::size_t n = g.size();
    if (from.is_partial()) {
      // Reduce the members' (equal-box) partials; each keeps the part of the sum in its new box.
      std::vector<TensorF> summed(n);
      std::vector<Floats> io;
      for (std::size_t i = 0; i < n; ++i) {
        summed[i] = t.at(g[i]);
        io.emplace_back(summed[i].data);
      }
      if (!to.is_shard()) {
        comm.all_reduce(g, io, opt);
      } else {
        // reduce-scatter along tensor dim to.dim: lay each partial out chunk by chunk so member j's
        // chunk is contiguous, then reduce segment j onto member j.
        std::vector<TensorF> laid(n), mine(n);
        std::vector<std::int64_t> counts(n);
        for (std::size_t j = 0; j < n; ++j) counts[j] = volume(out_box[j]);
        std::vector<ConstFloats> send;
        std::vector<Floats> recv;
        for (std::size_t i = 0; i < n; ++i) {
          if (!comm.is_local(g[i])) {  // a real mesh: another process holds this member
            send.emplace_back();
            recv.emplace_back();
            continue;
          }
          laid[i] = TensorF({volume(in_box[i])});
          std::int64_t off = 0;
          for (std::size_t j = 0; j < n; ++j) {
            TensorF piece(box_shape(out_box[j]));
            copy_box(summed[i], in_box[i], piece, out_box[j], out_box[j]);
            std::copy(piece.data.begin(), piece.data.end(), laid[i].data.begin() + off);
            off += counts[j];
          }
          send.emplace_back(laid[i].data);
          mine[i] = TensorF(box_shape(out_box[i]));
          recv.emplace_back(mine[i].data);
        }
        comm.reduce_scatter(g, send, recv, counts, opt);
        for (std::size_t i = 0; i < n; ++i) {
          if (comm.is_local(g[i])) out.at(g[i]) = std::move(mine[i]);
        }
        continue;
      }
      for (std::size_t i = 0; i < n; ++i) {
        if (comm.is_local(g[i])) out.at(g[i]) = std::move(summed[i]);
      }
      continue;
    }
    if (from.is_shard() && !(to == from)) {
      // all_gather the members' shards, then each keeps its new box (a local chunk for Shard).
      std::vector<ConstBytes> send;
      std::vector<std::vector<std::byte>> recv_store(n);
      std::vector<Bytes> recv;
      // Sizes from the boxes: on a real mesh the other members' shards are not here.
      std::size_t total = 0;
      for (std::size_t i = 0; i < n; ++i) {
        send.push_back(std::as_bytes(std::span<const float>(t.at(g[i]).data)));
        total += static_cast<std::size_t>(volume(in_box[i])) * sizeof(float);
      }
      for (std::size_t i = 0; i < n; ++i) {
        if (comm.is_local(g[i])) recv_store[i].resize(total);
        recv.emplace_back(recv_store[i]);
      }
      comm.all_gather(g, send, recv);
      for (std::size_t j = 0; j < n; ++j) {
        if (!comm.is_local(g[j])) continue;
        TensorF mine(box_shape(out_box[j]));
        std::size_t off = 0;
        for (std::size_t i = 0; i < n; ++i) {
          TensorF piece(box_shape(in_box[i]));
          // Guarded: an empty piece's vector has a null data(), which memcpy may not take (UBSan).
          if (piece.numel() > 0) std::memcpy(piece.data.data(), recv_store[j].data() + off, piece.numel() * sizeof(float));
          off += piece.numel() * sizeof(float);
          copy_box(piece, in_box[i], mine, out_box[j], intersect(in_box[i], out_box[j]));
        }
        if (to.is_partial() && mesh.coord(g[j], md) != 0) std::fill(mine.data.begin(), mine.data.end(), 0.0f);
        out.at(g[j]) = std::move(mine);
      }
      continue;
    }
    // Replicate -> Shard: local chunk; Replicate -> Partial: coordinate 0 keeps the values.
    for (std::size_t j = 0; j < n; ++j) {
      if (!comm.is_local(g[j])) continue;
      TensorF mine(box_shape(out_box[j]));
      copy_box(t.at(g[j]), in_box[j], mine, out_box[j], out_box[j]);
      if (to.is_partial() && mesh.coord(g[j], md) != 0) std::fill(mine.data.begin(), mine.data.end(), 0.0f);
      out.at(g[j]) = std::move(mine);
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
