#pragma once
// Expands parsed scenarios into cases (issue 4 item 1): every axis of a scenario (a key with
// several values) is crossed with every other, in the canonical key order of scenario_keys()
// (level outermost, ..., lr innermost); then `plan = all` becomes every plan the mesh holds and,
// at op level, `lhs`/`rhs = all` every placement combination the rules admit (`placements`:
// direct, redistribute or all). A combination that cannot run is kept as a rejected case with the
// reason (fp8moe list shows it); a value no combination can use is an error naming its line.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/datagen.hpp"
#include "reference/gemm.hpp"
#include "scenarios/scenario.hpp"
#include "sim/comm/communicator.hpp"
#include "sim/limits/limits.hpp"
#include "sim/mesh/placement.hpp"
#include "sim/plans/layer_plan.hpp"

namespace fp8moe::scenarios {

struct Case {
  int id = 0;                 // position in the expanded sweep (rejected cases included)
  std::string scenario;       // section name
  std::string where;          // "ci.ini:12": the scenario's header
  std::string level = "op";   // op | layer
  std::string mesh = "1";     // canonical Mesh::str()
  int world = 1;
  // op level
  Pass pass = Pass::fwd;
  sim::Placements lhs, rhs;
  std::string op_verdict;     // direct | redistribute
  // layer level
  std::string plan = "single";
  // shape and data
  int experts = 2;
  std::int64_t tokens = 256, n = 256, k = 256, dim = 256, hidden = 256;
  std::vector<std::int32_t> offs;  // resolved cumulative offsets (E)
  std::string routing = "balanced";  // routing name, or "explicit"
  Dist dist = Dist::normal;
  std::uint64_t seed = 0;
  GemmOptions gemm;           // mode, promotion, quant, pad (resolved)
  sim::ReduceOptions reduce;
  sim::GatherDtype fsdp_gather = sim::GatherDtype::bf16;
  bool fp8_dispatch = false;
  float lr = 0;
  std::string backend = "reference";

  std::string rejected;       // non-empty: why this case does not run

  std::string mode_label() const;   // "promote-fp32/cublas"
  std::string placements() const;   // op: "A=[R] W=[S(1)]"; layer: the plan's parameter placements
  // Every parameter, canonical: the identity of a case across runs (resume, compare, baseline).
  std::string key() const;
  // A rough upper bound of the host bytes the case holds at once (inputs, every rank's shards,
  // three sets of outputs), for the check against the machine's memory.
  std::int64_t memory_estimate() const;
  double flops() const;             // GEMM flops of the case (all runs), for the ETA
};

struct ExpandOptions {
  std::string only;               // glob on "scenario" or on the case key ("*tp=2*"); empty: all
  std::string backend_override;   // --backend: replaces every scenario's backend
  // Bytes a reference-backend case may need (its memory_estimate): a larger one is refused before
  // it is routed, naming the estimate. 0: not checked (the machine-independent limits still are).
  std::int64_t host_memory = 0;
  // Cases the files may expand to (sim/limits/limits.hpp's kMaxCases; the fuzzer asks for fewer).
  std::int64_t max_cases = sim::kMaxCases;
};

struct Expansion {
  std::vector<Case> cases;        // runnable and rejected, in sweep order
  int runnable = 0, rejected = 0;
};

Expansion expand(const std::vector<ScenarioFile>& files, const ExpandOptions& opt = {});

// Glob with * and ? (fnmatch-like, no classes).
bool glob_match(const std::string& pattern, const std::string& s);

}  // namespace fp8moe::scenarios
