#include "sim/comm/communicator.hpp"

#include <algorithm>

#include "reference/error.hpp"
#include "reference/formats.hpp"

namespace fp8moe::sim {

std::int64_t CommStats::max_bytes() const {
  return bytes_sent.empty() ? 0 : *std::max_element(bytes_sent.begin(), bytes_sent.end());
}

Communicator::Communicator(Mesh mesh) : mesh_(std::move(mesh)) { reset_stats(); }

void Communicator::reset_stats() {
  stats_ = {};
  stats_.bytes_sent.assign(static_cast<std::size_t>(mesh_.world()), 0);
}

void check_comm_mesh(const Communicator& comm, const Mesh& mesh) {
  if (comm.mesh().str() != mesh.str()) {
    fail("communicator ", comm.name(), " runs mesh ", comm.mesh().str(), " but the case needs mesh ", mesh.str());
  }
}

void check_members(const char* what, const Group& g, std::size_t n) {
  if (g.empty()) fail(what, ": empty group");
  if (n != g.size()) fail(what, ": ", n, " buffers for a group of ", g.size(), " ranks");
}

namespace inproc {

std::vector<int> all_ranks(const Mesh& mesh) {
  std::vector<int> r(static_cast<std::size_t>(mesh.world()));
  for (int i = 0; i < mesh.world(); ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

std::size_t check_all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) {
  check_members("all_gather", g, send.size());
  check_members("all_gather", g, recv.size());
  std::size_t total = 0;
  for (const ConstBytes& s : send) total += s.size();
  for (std::size_t j = 0; j < g.size(); ++j) {
    if (recv[j].size() != total) fail("all_gather: rank ", g[j], " receives into ", recv[j].size(), " bytes, needs ", total);
  }
  return total;
}

void check_all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                      const std::vector<std::vector<Bytes>>& recv) {
  check_members("all_to_all", g, send.size());
  check_members("all_to_all", g, recv.size());
  const std::size_t n = g.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (send[i].size() != n) fail("all_to_all: rank ", g[i], " sends to ", send[i].size(), " ranks, the group has ", n);
    if (recv[i].size() != n) fail("all_to_all: rank ", g[i], " receives from ", recv[i].size(), " ranks, the group has ", n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (send[i][j].size() != recv[j][i].size()) {
        fail("all_to_all: rank ", g[i], " sends ", send[i][j].size(), " bytes to rank ", g[j], ", which expects ",
             recv[j][i].size());
      }
    }
  }
}

std::size_t check_broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) {
  check_members("broadcast", g, bufs.size());
  const std::size_t n = g.size();
  if (root_pos < 0 || static_cast<std::size_t>(root_pos) >= n) {
    fail("broadcast: root position ", root_pos, " is outside a group of ", n, " ranks");
  }
  const std::size_t bytes = bufs[static_cast<std::size_t>(root_pos)].size();
  for (std::size_t j = 0; j < n; ++j) {
    if (bufs[j].size() != bytes) fail("broadcast: rank ", g[j], " has ", bufs[j].size(), " bytes, root ", bytes);
  }
  return bytes;
}

std::int64_t check_reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                                  std::span<const std::int64_t> counts) {
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
  for (std::size_t j = 0; j < g.size(); ++j) {
    if (static_cast<std::int64_t>(recv[j].size()) != counts[j]) {
      fail("reduce_scatter: rank ", g[j], " receives ", recv[j].size(), " values, its count is ", counts[j]);
    }
  }
  return total;
}

std::int64_t check_all_reduce(const Group& g, std::span<const Floats> inout) {
  check_members("all_reduce", g, inout.size());
  const std::int64_t count = static_cast<std::int64_t>(inout[0].size());
  for (const Floats& b : inout) {
    if (static_cast<std::int64_t>(b.size()) != count) fail("all_reduce: buffers of different sizes");
  }
  return count;
}

void book_all_gather(CommStats& st, const Group& g, std::span<const ConstBytes> send) {
  for (std::size_t i = 0; i < g.size(); ++i) st.add(g[i], static_cast<std::int64_t>(send[i].size() * (g.size() - 1)));
  ++st.collectives;
}

void book_all_to_all(CommStats& st, const Group& g, const std::vector<std::vector<ConstBytes>>& send) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    for (std::size_t j = 0; j < g.size(); ++j) {
      if (i != j) st.add(g[i], static_cast<std::int64_t>(send[i][j].size()));
    }
  }
  ++st.collectives;
}

void book_broadcast(CommStats& st, const Group& g, int root_pos, std::size_t bytes) {
  st.add(g[static_cast<std::size_t>(root_pos)], static_cast<std::int64_t>(bytes * (g.size() - 1)));
  ++st.collectives;
}

void book_reduce_scatter(CommStats& st, const Group& g, std::span<const std::int64_t> counts, const ReduceOptions& opt) {
  std::int64_t total = 0;
  for (std::int64_t c : counts) total += c;
  const std::int64_t bytes_per_value = 4;  // fp32 buffers; a bf16 reduce moves half as many bytes
  for (std::size_t i = 0; i < g.size(); ++i) {
    const std::int64_t sent = (total - counts[i]) * bytes_per_value;
    st.add(g[i], opt.dtype == ReduceDtype::bf16 ? sent / 2 : sent);
  }
  ++st.collectives;
}

void book_all_reduce(CommStats& st, const Group& g, std::int64_t count, const ReduceOptions& opt) {
  // A ring all-reduce: each member sends (n-1)/n of the buffer twice (reduce-scatter, all-gather).
  const std::int64_t n = static_cast<std::int64_t>(g.size());
  const std::int64_t bytes = 2 * count * (opt.dtype == ReduceDtype::bf16 ? 2 : 4) * (n - 1) / n;
  for (std::size_t i = 0; i < g.size(); ++i) st.add(g[i], bytes);
  ++st.collectives;
}

}  // namespace inproc

void reduce_chunk(const float* const* in, int n, int owner, std::int64_t count, const ReduceOptions& opt, float* out) {
  const bool bf = opt.dtype == ReduceDtype::bf16;
  for (std::int64_t k = 0; k < count; ++k) {
    float acc = reduce_first(in[reduce_member(opt.order, owner, n, 0)][k], bf);
    for (int s = 1; s < n; ++s) acc = reduce_step(acc, in[reduce_member(opt.order, owner, n, s)][k], bf);
    out[k] = acc;
  }
}

}  // namespace fp8moe::sim
