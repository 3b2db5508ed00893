#include "sim/comm/fake_communicator.hpp"

#include <algorithm>
#include <cstring>

#include "reference/error.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {
namespace {

void check_members(const char* what, const Group& g, std::size_t n) {
  if (g.empty()) fail(what, ": empty group");
  if (n != g.size()) fail(what, ": ", n, " buffers for a group of ", g.size(), " ranks");
}

}  // namespace

std::vector<int> FakeCommunicator::local_ranks() const {
  std::vector<int> r(static_cast<std::size_t>(mesh_.world()));
  for (int i = 0; i < mesh_.world(); ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

void FakeCommunicator::all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) {
  check_members("all_gather", g, send.size());
  check_members("all_gather", g, recv.size());
  std::size_t total = 0;
  for (const ConstBytes& s : send) total += s.size();
  for (std::size_t j = 0; j < g.size(); ++j) {
    if (recv[j].size() != total) fail("all_gather: rank ", g[j], " receives into ", recv[j].size(), " bytes, needs ", total);
    std::size_t off = 0;
    for (const ConstBytes& s : send) {
      std::memcpy(recv[j].data() + off, s.data(), s.size());
      off += s.size();
    }
  }
  for (std::size_t i = 0; i < g.size(); ++i) stats_.add(g[i], static_cast<std::int64_t>(send[i].size() * (g.size() - 1)));
  ++stats_.collectives;
}

void FakeCommunicator::all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                                  const std::vector<std::vector<Bytes>>& recv) {
  check_members("all_to_all", g, send.size());
  check_members("all_to_all", g, recv.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    for (std::size_t j = 0; j < g.size(); ++j) {
      const ConstBytes& s = send[i][j];
      const Bytes& r = recv[j][i];
      if (s.size() != r.size()) {
        fail("all_to_all: rank ", g[i], " sends ", s.size(), " bytes to rank ", g[j], ", which expects ", r.size());
      }
      std::memcpy(r.data(), s.data(), s.size());
      if (i != j) stats_.add(g[i], static_cast<std::int64_t>(s.size()));
    }
  }
  ++stats_.collectives;
}

void FakeCommunicator::broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) {
  check_members("broadcast", g, bufs.size());
  const Bytes& root = bufs[static_cast<std::size_t>(root_pos)];
  for (std::size_t j = 0; j < g.size(); ++j) {
    if (bufs[j].size() != root.size()) fail("broadcast: rank ", g[j], " has ", bufs[j].size(), " bytes, root ", root.size());
    if (static_cast<int>(j) != root_pos) std::memcpy(bufs[j].data(), root.data(), root.size());
  }
  stats_.add(g[static_cast<std::size_t>(root_pos)], static_cast<std::int64_t>(root.size() * (g.size() - 1)));
  ++stats_.collectives;
}

void FakeCommunicator::reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                                      std::span<const std::int64_t> counts, const ReduceOptions& opt) {
  check_members("reduce_scatter", g, send.size());
  check_members("reduce_scatter", g, recv.size());
  check_members("reduce_scatter", g, counts.size());
  std::int64_t total = 0;
  for (std::int64_t c : counts) total += c;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (static_cast<std::int64_t>(send[i].size()) != total) {
      fail("reduce_scatter: rank ", g[i], " sends ", send[i].size(), " values, the counts add up to ", total);
    }
  }
  const int n = static_cast<int>(g.size());
  std::vector<const float*> in(g.size());
  std::int64_t off = 0;
  for (int j = 0; j < n; ++j) {
    const std::int64_t c = counts[static_cast<std::size_t>(j)];
    if (static_cast<std::int64_t>(recv[static_cast<std::size_t>(j)].size()) != c) {
      fail("reduce_scatter: rank ", g[static_cast<std::size_t>(j)], " receives ", recv[static_cast<std::size_t>(j)].size(),
           " values, its count is ", c);
    }
    for (int i = 0; i < n; ++i) in[static_cast<std::size_t>(i)] = send[static_cast<std::size_t>(i)].data() + off;
    reduce_chunk(in.data(), n, j, c, opt, recv[static_cast<std::size_t>(j)].data());
    off += c;
  }
  const std::int64_t bytes_per_value = 4;  // fp32 buffers; a bf16 reduce moves half as many bytes
  for (int i = 0; i < n; ++i) {
    const std::int64_t sent = (total - counts[static_cast<std::size_t>(i)]) * bytes_per_value;
    stats_.add(g[static_cast<std::size_t>(i)], opt.dtype == ReduceDtype::bf16 ? sent / 2 : sent);
  }
  ++stats_.collectives;
}

void FakeCommunicator::all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) {
  check_members("all_reduce", g, inout.size());
  const int n = static_cast<int>(g.size());
  const std::int64_t count = static_cast<std::int64_t>(inout[0].size());
  for (const Floats& b : inout) {
    if (static_cast<std::int64_t>(b.size()) != count) fail("all_reduce: buffers of different sizes");
  }
  // A ring all-reduce is a reduce-scatter of n chunks then an all-gather; chunk c is owned by c.
  std::vector<float> result(static_cast<std::size_t>(count));
  std::vector<const float*> in(g.size());
  for (int c = 0; c < n; ++c) {
    const Range r = opt.order == ReduceOrder::ring ? chunk(count, n, c) : Range{c == 0 ? 0 : count, count};
    if (r.size() == 0) continue;
    for (int i = 0; i < n; ++i) in[static_cast<std::size_t>(i)] = inout[static_cast<std::size_t>(i)].data() + r.begin;
    reduce_chunk(in.data(), n, c, r.size(), opt, result.data() + r.begin);
  }
  for (const Floats& b : inout) std::copy(result.begin(), result.end(), b.begin());
  const std::int64_t bytes = 2 * count * (opt.dtype == ReduceDtype::bf16 ? 2 : 4) * (n - 1) / n;
  for (int i = 0; i < n; ++i) stats_.add(g[static_cast<std::size_t>(i)], bytes);
  ++stats_.collectives;
}

}  // namespace fp8moe::sim
