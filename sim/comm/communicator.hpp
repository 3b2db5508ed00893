#pragma once
// The one communicator interface of fp8moe (reference/SPEC.md 10.7). Collectives run on a group of
// global ranks (usually one mesh dim's group, Mesh::group) and take one buffer per group member,
// in group order. A process holds the buffers of its local ranks only: the fake communicator holds
// every rank (all entries are used), a real one (MPI, NCCL) holds its own and ignores the rest.
// So the callers are written once, over `local_ranks()`, for fake and real meshes alike.
//
// Reductions are deterministic: `ascending` sums members in group order; `ring` sums the chunk
// owned by member c in ring order c+1, c+2, ..., c (as a ring reduce-scatter does). With the bf16
// reduce dtype every contribution and every running sum is rounded to bf16 (a bf16 reduce-scatter).
// The formula is reference/reduce.hpp's, which the GPU fake communicator's kernel uses too.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/reduce.hpp"
#include "sim/mesh/mesh.hpp"

namespace fp8moe::sim {

// The reduction's vocabulary and formula (reference/reduce.hpp), shared with the GPU kernel.
using fp8moe::parse_reduce_dtype;
using fp8moe::parse_reduce_order;
using fp8moe::reduce_dtype_name;
using fp8moe::reduce_order_name;
using fp8moe::ReduceDtype;
using fp8moe::ReduceOptions;
using fp8moe::ReduceOrder;

using Group = std::vector<int>;  // global ranks, in group order
using Bytes = std::span<std::byte>;
using ConstBytes = std::span<const std::byte>;
using Floats = std::span<float>;
using ConstFloats = std::span<const float>;

// Bytes each rank sent, per collective kind, for the diagnostics.
struct CommStats {
  std::vector<std::int64_t> bytes_sent;  // (world)
  std::int64_t collectives = 0;
  void add(int rank, std::int64_t bytes) { bytes_sent[static_cast<std::size_t>(rank)] += bytes; }
  std::int64_t max_bytes() const;
};

class Communicator {
 public:
  explicit Communicator(Mesh mesh);
  virtual ~Communicator() = default;
  const Mesh& mesh() const { return mesh_; }
  virtual std::vector<int> local_ranks() const = 0;
  virtual bool is_local(int rank) const = 0;
  virtual std::string name() const = 0;

  // recv[i] (every member) = send[0] ++ send[1] ++ ... (sends may differ in size: uneven shards)
  virtual void all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) = 0;
  // send[i][j]: what member i sends to member j; recv[j][i]: what member j receives from i.
  virtual void all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                          const std::vector<std::vector<Bytes>>& recv) = 0;
  virtual void broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) = 0;
  // send[i] holds sum(counts) values; member j receives the reduced segment j (counts[j] values).
  virtual void reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                              std::span<const std::int64_t> counts, const ReduceOptions& opt) = 0;
  virtual void all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats();

 protected:
  Mesh mesh_;
  CommStats stats_;
};

// Throws unless comm runs `mesh` (same dims and sizes): a runner given a communicator for
// another mesh would pair the wrong ranks.
void check_comm_mesh(const Communicator& comm, const Mesh& mesh);

// Rank-local argument checks every communicator shares: a non-empty group and one buffer (or
// count) per member.
void check_members(const char* what, const Group& g, std::size_t n);

// The two in-process fakes (FakeCommunicator on the CPU, CudaFakeCommunicator on one GPU) see
// every member's buffers. These check a whole call before anything moves, so a rejected call
// copies nothing and books nothing, with the same messages from both; and they book a finished
// call's CommStats, so the two count alike by construction.
namespace inproc {
std::vector<int> all_ranks(const Mesh& mesh);
// Each returns what the transfer needs: the gathered size, the root's size, the counts' total,
// the all-reduce's value count.
std::size_t check_all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv);
void check_all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                      const std::vector<std::vector<Bytes>>& recv);
std::size_t check_broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs);
std::int64_t check_reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                                  std::span<const std::int64_t> counts);
std::int64_t check_all_reduce(const Group& g, std::span<const Floats> inout);
void book_all_gather(CommStats& st, const Group& g, std::span<const ConstBytes> send);
void book_all_to_all(CommStats& st, const Group& g, const std::vector<std::vector<ConstBytes>>& send);
void book_broadcast(CommStats& st, const Group& g, int root_pos, std::size_t bytes);
void book_reduce_scatter(CommStats& st, const Group& g, std::span<const std::int64_t> counts, const ReduceOptions& opt);
void book_all_reduce(CommStats& st, const Group& g, std::int64_t count, const ReduceOptions& opt);
}  // namespace inproc

// The deterministic reduction both fake communicators (CPU and GPU) and the tests share:
// out[k] = reduce over members of in[m][k], in the order the options name, for the chunk owned by
// member `owner` (its ring position). `n` members, `count` values each.
void reduce_chunk(const float* const* in, int n, int owner, std::int64_t count, const ReduceOptions& opt, float* out);

}  // namespace fp8moe::sim
