#include "sim/comm/fake_communicator.hpp"

#include <algorithm>

#include "reference/error.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {
using namespace inproc;

std::vector<int> FakeCommunicator::local_ranks() const { return all_ranks(mesh_); }

void FakeCommunicator::all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) {
  check_all_gather(g, send, recv);
  for (std::size_t j = 0; j < g.size(); ++j) {
    std::size_t off = 0;
    for (const ConstBytes& s : send) {
      // std::copy, not memcpy: an empty shard's span may hold a null pointer, which memcpy may
      // not be given even for zero bytes (UBSan, issue 16 defect 8).
      std::copy(s.begin(), s.end(), recv[j].begin() + static_cast<std::ptrdiff_t>(off));
      off += s.size();
    }
  }
  book_all_gather(stats_, g, send);
}

void FakeCommunicator::all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                                  const std::vector<std::vector<Bytes>>& recv) {
  check_all_to_all(g, send, recv);
  for (std::size_t i = 0; i < g.size(); ++i) {
    for (std::size_t j = 0; j < g.size(); ++j) std::copy(send[i][j].begin(), send[i][j].end(), recv[j][i].begin());
  }
  book_all_to_all(stats_, g, send);
}

void FakeCommunicator::broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) {
  const std::size_t bytes = check_broadcast(g, root_pos, bufs);
  const Bytes& root = bufs[static_cast<std::size_t>(root_pos)];
  for (std::size_t j = 0; j < g.size(); ++j) {
    if (static_cast<int>(j) != root_pos) std::copy(root.begin(), root.begin() + static_cast<std::ptrdiff_t>(bytes), bufs[j].begin());
  }
  book_broadcast(stats_, g, root_pos, bytes);
}

void FakeCommunicator::reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                                      std::span<const std::int64_t> counts, const ReduceOptions& opt) {
  check_reduce_scatter(g, send, recv, counts);
  const int n = static_cast<int>(g.size());
  std::vector<const float*> in(g.size());
  std::int64_t off = 0;
  for (int j = 0; j < n; ++j) {
    const std::int64_t c = counts[static_cast<std::size_t>(j)];
    for (int i = 0; i < n; ++i) in[static_cast<std::size_t>(i)] = send[static_cast<std::size_t>(i)].data() + off;
    reduce_chunk(in.data(), n, j, c, opt, recv[static_cast<std::size_t>(j)].data());
    off += c;
  }
  book_reduce_scatter(stats_, g, counts, opt);
}

void FakeCommunicator::all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) {
  const std::int64_t count = check_all_reduce(g, inout);
  const int n = static_cast<int>(g.size());
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
  book_all_reduce(stats_, g, count, opt);
}

}  // namespace fp8moe::sim
