#include "sim/mesh/mesh.hpp"

#include <set>
#include <sstream>

#include "reference/error.hpp"
#include "sim/limits/limits.hpp"

namespace fp8moe::sim {

Mesh::Mesh(std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  std::set<std::string> seen;
  if (static_cast<int>(dims_.size()) > kMaxMeshDims) {
    fail("a mesh of ", dims_.size(), " dims exceeds the limit of ", kMaxMeshDims, " dims: use at most ", kMaxMeshDims,
         " NAME=SIZE pairs");
  }
  // The world size in 64 bits against the limit: an int product wraps (dp=65536,tp=65536 is 2^32).
  std::int64_t world = 1;
  for (const MeshDim& d : dims_) {
    if (d.size < 1) fail("mesh dim '", d.name, "' has size ", d.size, ": sizes must be >= 1");
    if (d.name.empty()) fail("mesh dims need names, e.g. dp=2,tp=2");
    if (!seen.insert(d.name).second) fail("mesh dim '", d.name, "' appears twice");
    world *= d.size;  // each size <= kMaxWorld (parse) and the running product too: no overflow
    if (world > kMaxWorld) {
      std::string spec;
      for (const MeshDim& x : dims_) spec += (spec.empty() ? "" : ",") + x.name + "=" + std::to_string(x.size);
      fail("mesh '", spec, "' has more ranks than the limit ", kMaxWorld, ": use a smaller mesh");
    }
  }
  world_ = static_cast<int>(world);
}

Mesh Mesh::parse(const std::string& spec) {
  std::vector<MeshDim> dims;
  if (spec.empty() || spec == "1" || spec == "single") return Mesh(dims);
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      fail("bad mesh entry '", item, "' in '", spec, "': write NAME=SIZE pairs, e.g. dp=2,tp=2");
    }
    MeshDim d;
    d.name = item.substr(0, eq);
    long long size = 0;
    try {
      std::size_t used = 0;
      size = std::stoll(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1 || size < 1) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      fail("bad mesh size in '", item, "' of '", spec, "': the size must be a positive integer, e.g. tp=2");
    }
    // Range-checked in 64 bits before it narrows to int (tp=4294967298 must not run as tp=2).
    if (size > kMaxWorld) fail("mesh size ", item, " in '", spec, "' exceeds the limit of ", kMaxWorld, " ranks: use a smaller mesh");
    d.size = static_cast<int>(size);
    dims.push_back(d);
  }
  return Mesh(dims);
}

int Mesh::find(const std::string& name) const {
  for (int i = 0; i < ndim(); ++i) {
    if (dims_[static_cast<std::size_t>(i)].name == name) return i;
  }
  return -1;
}

int Mesh::index_of(const std::string& name) const {
  const int i = find(name);
  if (i < 0) fail("mesh '", str(), "' has no dim named '", name, "'");
  return i;
}

std::vector<int> Mesh::coords(int rank) const {
  if (rank < 0 || rank >= world_) fail("rank ", rank, " is outside mesh '", str(), "' of ", world_, " ranks");
  std::vector<int> c(dims_.size());
  for (int i = ndim() - 1; i >= 0; --i) {
    c[static_cast<std::size_t>(i)] = rank % size(i);
    rank /= size(i);
  }
  return c;
}

int Mesh::rank_of(const std::vector<int>& c) const {
  int r = 0;
  for (int i = 0; i < ndim(); ++i) r = r * size(i) + c[static_cast<std::size_t>(i)];
  return r;
}

std::vector<int> Mesh::group(int rank, int dim) const {
  std::vector<int> c = coords(rank), g;
  for (int k = 0; k < size(dim); ++k) {
    c[static_cast<std::size_t>(dim)] = k;
    g.push_back(rank_of(c));
  }
  return g;
}

std::vector<std::vector<int>> Mesh::groups(int dim) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_; ++r) {
    if (coord(r, dim) == 0) out.push_back(group(r, dim));
  }
  return out;
}

std::string Mesh::str() const {
  if (dims_.empty()) return "1";
  std::string s;
  for (const MeshDim& d : dims_) s += (s.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  return s;
}

}  // namespace fp8moe::sim
