#pragma once
// A communicator whose process (or thread) holds one rank of the mesh: the MPI communicator
// (mpi_communicator.cpp) and the NCCL one (nccl_communicator.cpp) are this class over a
// RankTransport. Written once here: the argument checks, the size agreement, the CommStats and
// the deterministic reductions, so both real meshes give the FakeCommunicator's bits and stats.
//
// Calling convention (the one the fake mesh already imposes): every process of the mesh makes
// every call, for its own groups and for the others' (the SPMD code loops over mesh.groups(d)),
// in the same order. Each call starts with a size agreement over the whole mesh (one small
// all-gather of int64 headers): members state their buffer sizes, non-members only take part.
// From it every process checks the call as the fake does (the same messages, raised on every
// process at once, so a bad size is an error everywhere rather than a hang) and counts every
// member's bytes exactly as the fake does (so comm_bytes match the fake mesh's). Then the members
// move the data on the group's sub-communicator.
//
// Reductions never use the library's reduce (its order is unspecified): each member's
// contribution to a chunk goes to the chunk's owner (all_to_allv), the owner runs reduce_chunk()
// on the host in the fake's order and dtype, and the reduced chunks are all-gathered.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/comm/communicator.hpp"

namespace fp8moe::sim {

// One collective call, for the transports' error messages and watchdogs.
struct CommCall {
  const char* what = "";   // "all_gather", ...
  const Group* group = nullptr;
  std::string describe(const Mesh& mesh) const;  // "all_gather on group [0,1] of mesh dp=2,tp=2"
};

std::string group_str(const Group& g);  // "[0,1]"

// What the library gives a one-rank communicator. Sizes were agreed before every data call, so a
// transport is never handed mismatched sizes. `me` is this rank's position in `g`. Spans may be
// device memory where the transport says so (NCCL); the base class touches them only through
// the transport.
class RankTransport {
 public:
  virtual ~RankTransport() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  // Every rank of the mesh gives `mine` (the same length on every rank); `all` receives them in
  // rank order (world x mine.size()).
  virtual void exchange_headers(std::span<const std::int64_t> mine, std::span<std::int64_t> all,
                                const CommCall& call) = 0;
  // Called on every process after a successful size agreement, members or not: a transport whose
  // sub-communicators are made by a call over the whole mesh (ncclCommSplit) makes them here.
  virtual void prepare_group(const Group& g, const CommCall& call) {
    (void)g;
    (void)call;
  }
  // recv = the members' pieces in group order; sizes[i] bytes come from member i.
  virtual void all_gatherv(const Group& g, int me, ConstBytes mine, Bytes recv, std::span<const std::int64_t> sizes,
                           const CommCall& call) = 0;
  // to[j]: the bytes for member j (to[me] too); from[i]: the bytes member i sends here.
  virtual void all_to_allv(const Group& g, int me, std::span<const ConstBytes> to, std::span<const Bytes> from,
                           const CommCall& call) = 0;
  virtual void broadcast(const Group& g, int me, int root, Bytes buf, const CommCall& call) = 0;
  // dst <- src within this rank (host or, for NCCL, device memory).
  virtual void copy(Bytes dst, ConstBytes src) = 0;
};

class RankCommunicator : public Communicator {
 public:
  RankCommunicator(Mesh mesh, int rank, std::unique_ptr<RankTransport> transport);
  std::vector<int> local_ranks() const override { return {rank_}; }
  bool is_local(int rank) const override { return rank == rank_; }
  std::string name() const override { return transport_->name(); }
  int rank() const { return rank_; }

  void all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) override;
  void all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                  const std::vector<std::vector<Bytes>>& recv) override;
  void broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) override;
  void reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                      std::span<const std::int64_t> counts, const ReduceOptions& opt) override;
  void all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) override;

 private:
  // The size agreement: `mine` (payload_len() values, kAbsent where this rank is no member) from
  // every rank; checks that every rank makes the same call on the same group. Returns the
  // payloads, rank-major.
  std::vector<std::int64_t> agree(const CommCall& call, int kind, std::vector<std::int64_t> mine);
  std::size_t payload_len() const;
  int position(const Group& g, const char* what) const;  // this rank's position in g, or -1

  int rank_;
  std::unique_ptr<RankTransport> transport_;
};

}  // namespace fp8moe::sim
