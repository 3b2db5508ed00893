#include "sim/rules/enumerate.hpp"

namespace fp8moe::sim {

std::vector<Placements> placement_options(int tensor_rank, const Mesh& mesh) {
  std::vector<Placement> per_dim{Placement::R()};
  for (int d = 0; d < tensor_rank; ++d) per_dim.push_back(Placement::S(d));
  std::vector<Placements> out{Placements{}};
  for (int md = 0; md < mesh.ndim(); ++md) {
    std::vector<Placements> next;
    for (const Placements& prefix : out) {
      for (const Placement& p : per_dim) {
        Placements x = prefix;
        x.push_back(p);
        next.push_back(std::move(x));
      }
    }
    out = std::move(next);
  }
  return out;
}

Enumeration enumerate_op(Pass p, const OpShape& shape, const Mesh& mesh, const ReduceOptions& reduce) {
  Enumeration e;
  e.pass = p;
  const int lr = static_cast<int>(lhs_shape(p, shape).size()), rr = static_cast<int>(rhs_shape(p, shape).size());
  for (const Placements& l : placement_options(lr, mesh)) {
    for (const Placements& r : placement_options(rr, mesh)) {
      EnumeratedCase c{l, r, decide(p, shape, l, r, mesh, reduce)};
      switch (c.decision.verdict) {
        case Verdict::direct: ++e.direct; break;
        case Verdict::redistribute: ++e.redistribute; break;
        case Verdict::reject: ++e.rejected; break;
      }
      e.cases.push_back(std::move(c));
    }
  }
  return e;
}

}  // namespace fp8moe::sim
