#include "sim/sweep/case.hpp"

#include "reference/error.hpp"
#include "sim/limits/limits.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/rules/sharding.hpp"
#include "sim/sweep/case_keys.hpp"

namespace fp8moe::scenarios {

using namespace fp8moe::sim;

std::string Case::mode_label() const { return fp8moe::mode_label(gemm.mode, gemm.promotion); }

std::string Case::placements() const {
  if (level == "op") return cat(lhs_name(pass), "=", str(lhs), " ", rhs_name(pass), "=", str(rhs));
  if (!rejected.empty()) return "";
  return make_layer_plan(plan, Mesh::parse(mesh)).describe();
}

std::string Case::key() const {
  std::string key;
  for (const Key k : kCaseKeyOrder) {
    const std::string part = key_rule(k).key(*this);
    if (!part.empty()) key += (key.empty() ? "" : " ") + part;
  }
  return key;
}

std::int64_t Case::memory_estimate() const {
  CaseSize s;
  s.layer = level == "layer";
  s.pass = pass;
  s.world = world;
  s.experts = experts;
  s.tokens = tokens;
  s.n = n;
  s.k = k;
  s.dim = dim;
  s.hidden = hidden;
  return host_memory_estimate(s);
}

double Case::flops() const {
  if (level == "op") return 3 * 2.0 * static_cast<double>(tokens) * static_cast<double>(n) * static_cast<double>(k);
  return 3 * 18.0 * static_cast<double>(tokens) * static_cast<double>(dim) * static_cast<double>(hidden);
}

}  // namespace fp8moe::scenarios
