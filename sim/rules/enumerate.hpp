#pragma once
// Every placement combination of one op's operands over a mesh (issue 3 item 7): each operand's
// placement per mesh dim is R or S(d) for each of its dims (Partial inputs are left out: they
// come from a previous op, not from a user's choice). Each combination gets its verdict from
// decide(): direct (a strategy takes it), redistribute (with the chosen plan and its bytes), or
// reject (with the reason). The order is deterministic: lhs combinations outer, rhs inner; within
// an operand, mesh dim 0 most significant, options in the order R, S(0), S(1), ...
#include <vector>

#include "sim/rules/sharding.hpp"

namespace fp8moe::sim {

// All placement lists of a `tensor_rank`-D operand over `mesh`, in the order above.
std::vector<Placements> placement_options(int tensor_rank, const Mesh& mesh);

struct EnumeratedCase {
  Placements lhs, rhs;
  ShardingDecision decision;
};

struct Enumeration {
  Pass pass = Pass::fwd;
  std::vector<EnumeratedCase> cases;
  int direct = 0, redistribute = 0, rejected = 0;
};

Enumeration enumerate_op(Pass p, const OpShape& shape, const Mesh& mesh, const ReduceOptions& reduce = {});

}  // namespace fp8moe::sim
