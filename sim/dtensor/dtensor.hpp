#pragma once
// A distributed tensor: global shape, one placement per mesh dim, and each local rank's shard
// (PyTorch DTensor semantics, uneven shards as torch.chunk). Redistribution between any two
// placement lists runs as collectives on the communicator and is planned first, with the bytes
// each rank moves.
#include <string>
#include <vector>

#include "reference/tensor.hpp"
#include "sim/comm/communicator.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {

struct DTensor {
  std::vector<std::int64_t> shape;  // global
  Placements placements;
  std::vector<TensorF> local;        // (world): rank r's shard; empty for ranks not local here

  const TensorF& at(int rank) const { return local.at(static_cast<std::size_t>(rank)); }
  TensorF& at(int rank) { return local.at(static_cast<std::size_t>(rank)); }
};

// Shards a global tensor every local rank can see (e.g. generated from the same keyed seed).
// Partial: the rank at coordinate 0 of each Partial mesh dim holds the values, the others zeros,
// so the sum is exact.
DTensor distribute(const TensorF& global, const Placements& placements, const Communicator& comm);

// One step of a redistribution plan.
struct RedistStep {
  int mesh_dim = 0;
  std::string collective;  // all_gather, reduce_scatter, all_reduce, local_chunk, local_zero
  Placement from, to;
  std::int64_t bytes_per_rank = 0;  // the most any rank sends in this step (fp32 payload)
};
std::vector<RedistStep> plan_redistribute(const std::vector<std::int64_t>& shape, const Placements& src,
                                          const Placements& dst, const Mesh& mesh, const ReduceOptions& opt);
std::int64_t plan_bytes(const std::vector<RedistStep>& plan);
std::string str(const std::vector<RedistStep>& plan);

DTensor redistribute(const DTensor& t, const Placements& dst, Communicator& comm, const ReduceOptions& opt = {});

// The global tensor, assembled on every local rank (all-Replicate); returns the first local rank's.
TensorF full_tensor(const DTensor& t, Communicator& comm, const ReduceOptions& opt = {});

// Placements all Replicate for a mesh.
Placements replicated(const Mesh& mesh);

}  // namespace fp8moe::sim
