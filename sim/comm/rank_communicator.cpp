#include "sim/comm/rank_communicator.hpp"

#include <algorithm>
#include <cstring>

#include "reference/error.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {
namespace {

using I64 = std::int64_t;
constexpr I64 kAbsent = -1;  // a payload entry of a rank that is no member of the group

enum Kind : int { kAllGather = 1, kAllToAll, kBroadcast, kReduceScatter, kAllReduce };
const char* kind_name(I64 k) {
  switch (k) {
    case kAllGather: return "all_gather";
    case kAllToAll: return "all_to_all";
    case kBroadcast: return "broadcast";
    case kReduceScatter: return "reduce_scatter";
    case kAllReduce: return "all_reduce";
    default: return "?";
  }
}

I64 group_hash(const Group& g) {  // FNV-1a over the ranks
  std::uint64_t h = 1469598103934665603ull;
  for (int r : g) {
    h ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(r));
    h *= 1099511628211ull;
  }
  return static_cast<I64>(h >> 1);
}


std::size_t sz(I64 v) { return static_cast<std::size_t>(v); }

// Views of a float buffer as bytes.
ConstBytes bytes_of(ConstFloats f) { return std::as_bytes(f); }
Bytes bytes_of(Floats f) { return std::as_writable_bytes(f); }

}  // namespace

std::string group_str(const Group& g) {
  std::string s = "[";
  for (std::size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "]";
}

std::string CommCall::describe(const Mesh& mesh) const {
  return cat(what, group ? " on group " + group_str(*group) : std::string(), " of mesh ", mesh.str());
}

RankCommunicator::RankCommunicator(Mesh mesh, int rank, std::unique_ptr<RankTransport> transport)
    : Communicator(std::move(mesh)), rank_(rank), transport_(std::move(transport)) {
  if (rank_ < 0 || rank_ >= mesh_.world()) fail("communicator: rank ", rank_, " outside mesh ", mesh_.str());
}

// all_to_all states 2n sizes, reduce_scatter n counts and 4 more values; n <= world.
std::size_t RankCommunicator::payload_len() const { return 2 * static_cast<std::size_t>(mesh_.world()) + 4; }

int RankCommunicator::position(const Group& g, const char* what) const {
  int me = -1;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] < 0 || g[i] >= mesh_.world()) fail(what, ": group ", group_str(g), " names rank ", g[i], " outside mesh ", mesh_.str());
    for (std::size_t j = 0; j < i; ++j) {
      if (g[j] == g[i]) fail(what, ": group ", group_str(g), " names rank ", g[i], " twice");
    }
    if (g[i] == rank_) me = static_cast<int>(i);
  }
  return me;
}

std::vector<I64> RankCommunicator::agree(const CommCall& call, int kind, std::vector<I64> mine) {
  const std::size_t P = payload_len(), L = 3 + P;
  if (mine.size() > P) fail(call.what, ": internal error, ", mine.size(), " header values for room ", P);
  const Group& g = *call.group;
  std::vector<I64> head(L, 0);
  head[0] = kind;
  head[1] = static_cast<I64>(g.size());
  head[2] = group_hash(g);
  std::copy(mine.begin(), mine.end(), head.begin() + 3);
  const std::size_t W = static_cast<std::size_t>(mesh_.world());
  std::vector<I64> all(W * L);
  transport_->exchange_headers(head, all, call);
  // Compare every rank's call with rank 0's, so that every process raises the same message.
  for (std::size_t r = 1; r < W; ++r) {
    const I64* a = all.data();
    const I64* b = all.data() + r * L;
    if (a[0] != b[0] || a[1] != b[1] || a[2] != b[2]) {
      fail(call.what, ": the processes of mesh ", mesh_.str(), " make different calls (rank 0: ", kind_name(a[0]),
           " on a group of ", a[1], "; rank ", r, ": ", kind_name(b[0]), " on a group of ", b[1],
           "): every process must make every collective call of the mesh, in the same order");
    }
  }
  std::vector<I64> payload(W * P);
  for (std::size_t r = 0; r < W; ++r) std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(r * L + 3), P, payload.begin() + static_cast<std::ptrdiff_t>(r * P));
  return payload;
}

void RankCommunicator::all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) {
  const CommCall call{"all_gather", &g};
  check_members("all_gather", g, send.size());
  check_members("all_gather", g, recv.size());
  const int me = position(g, "all_gather");
  const std::size_t n = g.size(), P = payload_len();
  std::vector<I64> mine{kAbsent, kAbsent};
  if (me >= 0) mine = {static_cast<I64>(send[sz(me)].size()), static_cast<I64>(recv[sz(me)].size())};
  const std::vector<I64> all = agree(call, kAllGather, mine);
  auto at = [&](std::size_t i, std::size_t k) { return all[sz(g[i]) * P + k]; };
  std::vector<I64> sizes(n);
  I64 total = 0;
  for (std::size_t i = 0; i < n; ++i) total += sizes[i] = at(i, 0);
  for (std::size_t j = 0; j < n; ++j) {
    if (at(j, 1) != total) fail("all_gather: rank ", g[j], " receives into ", at(j, 1), " bytes, needs ", total);
  }
  for (std::size_t i = 0; i < n; ++i) stats_.add(g[i], sizes[i] * static_cast<I64>(n - 1));
  ++stats_.collectives;
  transport_->prepare_group(g, call);
  if (me >= 0) transport_->all_gatherv(g, me, send[sz(me)], recv[sz(me)], sizes, call);
}

void RankCommunicator::all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                                  const std::vector<std::vector<Bytes>>& recv) {
  const CommCall call{"all_to_all", &g};
  check_members("all_to_all", g, send.size());
  check_members("all_to_all", g, recv.size());
  const int me = position(g, "all_to_all");
  const std::size_t n = g.size(), P = payload_len();
  std::vector<I64> mine(2 * n, kAbsent);
  if (me >= 0) {
    check_members("all_to_all (what this rank sends)", g, send[sz(me)].size());
    check_members("all_to_all (what this rank receives)", g, recv[sz(me)].size());
    for (std::size_t j = 0; j < n; ++j) {
      mine[j] = static_cast<I64>(send[sz(me)][j].size());
      mine[n + j] = static_cast<I64>(recv[sz(me)][j].size());
    }
  }
  const std::vector<I64> all = agree(call, kAllToAll, mine);
  auto at = [&](std::size_t i, std::size_t k) { return all[sz(g[i]) * P + k]; };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const I64 s = at(i, j), r = at(j, n + i);  // i -> j as i sends it and as j expects it
      if (s != r) fail("all_to_all: rank ", g[i], " sends ", s, " bytes to rank ", g[j], ", which expects ", r);
      if (i != j) stats_.add(g[i], s);
    }
  }
  ++stats_.collectives;
  transport_->prepare_group(g, call);
  if (me >= 0) transport_->all_to_allv(g, me, send[sz(me)], recv[sz(me)], call);
}

void RankCommunicator::broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) {
  const CommCall call{"broadcast", &g};
  check_members("broadcast", g, bufs.size());
  if (root_pos < 0 || root_pos >= static_cast<int>(g.size())) {
    fail("broadcast: root position ", root_pos, " outside group ", group_str(g));
  }
  const int me = position(g, "broadcast");
  const std::size_t n = g.size(), P = payload_len();
  std::vector<I64> mine{me >= 0 ? static_cast<I64>(bufs[sz(me)].size()) : kAbsent};
  const std::vector<I64> all = agree(call, kBroadcast, mine);
  auto at = [&](std::size_t i) { return all[sz(g[i]) * P]; };
  const I64 root = at(sz(root_pos));
  for (std::size_t j = 0; j < n; ++j) {
    if (at(j) != root) fail("broadcast: rank ", g[j], " has ", at(j), " bytes, root ", root);
  }
  stats_.add(g[sz(root_pos)], root * static_cast<I64>(n - 1));
  ++stats_.collectives;
  transport_->prepare_group(g, call);
  if (me >= 0) transport_->broadcast(g, me, root_pos, bufs[sz(me)], call);
}

void RankCommunicator::reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                                      std::span<const I64> counts, const ReduceOptions& opt) {
  const CommCall call{"reduce_scatter", &g};
  check_members("reduce_scatter", g, send.size());
  check_members("reduce_scatter", g, recv.size());
  check_members("reduce_scatter", g, counts.size());
  const int me = position(g, "reduce_scatter");
  const std::size_t n = g.size(), P = payload_len();
  std::vector<I64> mine(4 + n, kAbsent);
  if (me >= 0) {
    mine[0] = static_cast<I64>(send[sz(me)].size());
    mine[1] = static_cast<I64>(recv[sz(me)].size());
    mine[2] = static_cast<I64>(opt.order);
    mine[3] = static_cast<I64>(opt.dtype);
    for (std::size_t j = 0; j < n; ++j) mine[4 + j] = counts[j];
  }
  const std::vector<I64> all = agree(call, kReduceScatter, mine);
  auto at = [&](std::size_t i, std::size_t k) { return all[sz(g[i]) * P + k]; };
  for (std::size_t i = 1; i < n; ++i) {
    for (std::size_t k = 2; k < 4 + n; ++k) {
      if (at(i, k) != at(0, k)) {
        fail("reduce_scatter: rank ", g[i], " and rank ", g[0], " disagree on the ", k < 4 ? "reduce options" : "counts",
             " of the call");
      }
    }
  }
  std::vector<I64> cnt(n);
  I64 total = 0;
  for (std::size_t j = 0; j < n; ++j) total += cnt[j] = at(0, 4 + j);
  for (std::size_t i = 0; i < n; ++i) {
    if (at(i, 0) != total) fail("reduce_scatter: rank ", g[i], " sends ", at(i, 0), " values, the counts add up to ", total);
  }
  for (std::size_t j = 0; j < n; ++j) {
    if (at(j, 1) != cnt[j]) fail("reduce_scatter: rank ", g[j], " receives ", at(j, 1), " values, its count is ", cnt[j]);
  }
  for (std::size_t i = 0; i < n; ++i) {  // the fake's accounting: a bf16 reduce moves half as many bytes
    const I64 sent = (total - cnt[i]) * 4;
    stats_.add(g[i], opt.dtype == ReduceDtype::bf16 ? sent / 2 : sent);
  }
  ++stats_.collectives;
  transport_->prepare_group(g, call);
  if (me < 0) return;

  // Segment j of every member's contribution goes to member j, which reduces it in the fake's order.
  const I64 c = cnt[sz(me)];
  std::vector<float> contrib(sz(c) * n);  // (n, c) host
  std::vector<ConstBytes> to(n);
  std::vector<Bytes> from(n);
  I64 off = 0;
  for (std::size_t j = 0; j < n; ++j) {
    to[j] = bytes_of(send[sz(me)].subspan(sz(off), sz(cnt[j])));
    from[j] = bytes_of(Floats(contrib.data() + j * sz(c), sz(c)));
    off += cnt[j];
  }
  transport_->all_to_allv(g, me, to, from, call);
  std::vector<const float*> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = contrib.data() + i * sz(c);
  std::vector<float> out(sz(c));
  reduce_chunk(in.data(), static_cast<int>(n), me, c, opt, out.data());
  transport_->copy(bytes_of(recv[sz(me)]), bytes_of(ConstFloats(out)));
}

void RankCommunicator::all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) {
  const CommCall call{"all_reduce", &g};
  check_members("all_reduce", g, inout.size());
  const int me = position(g, "all_reduce");
  const std::size_t n = g.size(), P = payload_len();
  std::vector<I64> mine{kAbsent, kAbsent, kAbsent};
  if (me >= 0) mine = {static_cast<I64>(inout[sz(me)].size()), static_cast<I64>(opt.order), static_cast<I64>(opt.dtype)};
  const std::vector<I64> all = agree(call, kAllReduce, mine);
  auto at = [&](std::size_t i, std::size_t k) { return all[sz(g[i]) * P + k]; };
  const I64 count = at(0, 0);
  for (std::size_t i = 1; i < n; ++i) {
    if (at(i, 0) != count) {
      fail("all_reduce: buffers of different sizes (rank ", g[0], ": ", count, " values, rank ", g[i], ": ", at(i, 0), ")");
    }
    if (at(i, 1) != at(0, 1) || at(i, 2) != at(0, 2)) {
      fail("all_reduce: rank ", g[i], " and rank ", g[0], " disagree on the reduce options of the call");
    }
  }
  const I64 bytes = 2 * count * (opt.dtype == ReduceDtype::bf16 ? 2 : 4) * static_cast<I64>(n - 1) / static_cast<I64>(n);
  for (std::size_t i = 0; i < n; ++i) stats_.add(g[i], bytes);
  ++stats_.collectives;
  transport_->prepare_group(g, call);
  if (me < 0) return;

  // As the fake: a ring all-reduce reduces chunk c (torch.chunk) on member c; the ascending order
  // reduces everything on member 0. The chunks lie in member order, so the reduced chunks
  // all-gathered in place are the result.
  std::vector<Range> r(n);
  for (std::size_t c = 0; c < n; ++c) {
    r[c] = opt.order == ReduceOrder::ring ? chunk(count, static_cast<int>(n), static_cast<int>(c))
                                          : Range{c == 0 ? 0 : count, count};
  }
  const Floats buf = inout[sz(me)];
  const I64 mc = r[sz(me)].size();
  std::vector<float> contrib(sz(mc) * n);  // (n, mc) host
  std::vector<ConstBytes> to(n);
  std::vector<Bytes> from(n);
  for (std::size_t j = 0; j < n; ++j) {
    to[j] = bytes_of(ConstFloats(buf.subspan(sz(r[j].begin), sz(r[j].size()))));
    from[j] = bytes_of(Floats(contrib.data() + j * sz(mc), sz(mc)));
  }
  transport_->all_to_allv(g, me, to, from, call);
  std::vector<const float*> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = contrib.data() + i * sz(mc);
  std::vector<float> reduced(sz(mc));
  reduce_chunk(in.data(), static_cast<int>(n), me, mc, opt, reduced.data());
  std::vector<I64> sizes(n);
  for (std::size_t c = 0; c < n; ++c) sizes[c] = r[c].size() * static_cast<I64>(sizeof(float));
  transport_->all_gatherv(g, me, bytes_of(ConstFloats(reduced)), bytes_of(buf), sizes, call);
}

}  // namespace fp8moe::sim
