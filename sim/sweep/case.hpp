#pragma once
// One case of a sweep (issue 17 item 1): the engine's CaseSpec (sim/spec/case_spec.hpp), which
// the op runner and the layer plans take as it is, plus its identity in the sweep. Built only by
// the expansion (sim/sweep/expand.hpp) from scenario text or from `fp8moe run`'s flags; its key,
// HDF5 row and table come from the key registry (sim/sweep/case_keys.hpp).
#include <cstdint>
#include <string>

#include "sim/spec/case_spec.hpp"

namespace fp8moe::scenarios {

struct Case : sim::CaseSpec {
  int id = 0;                       // position in the expanded sweep (rejected cases included)
  std::string scenario;             // section name
  std::string where;                // "ci.ini:12": the scenario's header
  std::string level = "op";         // op | layer
  int world = 1;                    // ranks of the mesh
  std::string op_verdict;           // op level: direct | redistribute (| reject)
  std::string routing_label;        // the routing's name, or "explicit" when offs were given
  std::string rejected;             // non-empty: why this case does not run

  std::string mode_label() const;   // "promote-fp32:cublas"
  std::string placements() const;   // op: "A=[R] W=[S(1)]"; layer: the plan's parameter placements
  // Every parameter, canonical: the identity of a case across runs (resume, compare, baseline).
  std::string key() const;
  // A rough upper bound of the host bytes the case holds at once (inputs, every rank's shards,
  // three sets of outputs), for the check against the machine's memory.
  std::int64_t memory_estimate() const;
  double flops() const;             // GEMM flops of the case (all runs), for the ETA
};

}  // namespace fp8moe::scenarios
