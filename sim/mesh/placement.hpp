#pragma once
// Placements per mesh dim (PyTorch DTensor): Replicate, Shard(d), Partial(sum); uneven shards
// follow torch.chunk: chunk size ceil(n/k), later shards smaller or empty.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/mesh/mesh.hpp"

namespace fp8moe::sim {

struct Placement {
  enum class Kind : std::uint8_t { replicate, shard, partial };
  Kind kind = Kind::replicate;
  int dim = -1;  // tensor dim for shard

  static Placement R() { return {Kind::replicate, -1}; }
  static Placement S(int d) { return {Kind::shard, d}; }
  static Placement P() { return {Kind::partial, -1}; }
  bool is_shard() const { return kind == Kind::shard; }
  bool is_shard(int d) const { return kind == Kind::shard && dim == d; }
  bool is_partial() const { return kind == Kind::partial; }
  bool is_replicate() const { return kind == Kind::replicate; }
  bool operator==(const Placement&) const = default;
  std::string str() const;      // "R", "S(1)", "P"
  std::string dtensor() const;  // as PyTorch's DTensor prints it: "Replicate()", "Shard(dim=1)", "Partial(sum)"
};

using Placements = std::vector<Placement>;
// The list as DTensor prints a placements tuple: "(Shard(dim=0), Replicate())".
std::string dtensor_str(const std::vector<Placement>& p);  // one per mesh dim
std::string str(const Placements& p);      // "[S(0),R]"
// "S(0),R", "[S(0),R]", or DTensor's spelling "(Shard(dim=0), Replicate())", "Shard(0), Partial()".
Placements parse_placements(const std::string& s, int mesh_ndim);

// torch.chunk: [begin, end) of chunk i of n elements split k ways.
struct Range {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};
Range chunk(std::int64_t n, int k, int i);

// The box a rank holds of a tensor of `shape` under `placements`: per tensor dim, the range.
// Several mesh dims sharding one tensor dim split it in mesh-dim order (DTensor semantics).
std::vector<Range> local_box(const std::vector<std::int64_t>& shape, const Placements& placements, const Mesh& mesh,
                             int rank);

// The mesh dims along which `placements` is Partial.
std::vector<int> partial_dims(const Placements& p);

}  // namespace fp8moe::sim
