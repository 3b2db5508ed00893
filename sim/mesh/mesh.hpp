#pragma once
// A device mesh with named dims, ranks in row-major order (reference/SPEC.md 10.1).
//   "dp=2,tp=2": rank = dp_index * 2 + tp_index; the tp group of rank 1 is {0, 1}, its dp group {1, 3}.
#include <string>
#include <vector>

namespace fp8moe::sim {

struct MeshDim {
  std::string name;
  int size = 1;
};

class Mesh {
 public:
  Mesh() = default;
  explicit Mesh(std::vector<MeshDim> dims);
  // "dp=2,tp=2" (or "1" / "" for a single device). Errors name the bad entry and the format.
  static Mesh parse(const std::string& spec);

  int ndim() const { return static_cast<int>(dims_.size()); }
  int world() const { return world_; }
  const MeshDim& dim(int i) const { return dims_.at(static_cast<std::size_t>(i)); }
  int size(int i) const { return dim(i).size; }
  // Index of the named dim, or -1.
  int find(const std::string& name) const;
  int index_of(const std::string& name) const;  // throws naming the mesh when absent

  std::vector<int> coords(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  int coord(int rank, int dim) const { return coords(rank)[static_cast<std::size_t>(dim)]; }
  // The ranks that differ from `rank` only along `dim`, ordered by their coordinate there.
  std::vector<int> group(int rank, int dim) const;
  // Every distinct group along `dim` (world / size(dim) of them).
  std::vector<std::vector<int>> groups(int dim) const;

  std::string str() const;  // "dp=2,tp=2"

 private:
  std::vector<MeshDim> dims_;
  int world_ = 1;
};

}  // namespace fp8moe::sim
