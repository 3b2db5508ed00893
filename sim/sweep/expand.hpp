#pragma once
// Expands parsed scenarios into cases (issue 4 item 1): every axis of a scenario (a key with
// several values) is crossed with every other, in the canonical key order of scenario_keys()
// (scenarios/keys.hpp: level outermost, ..., lr innermost), each key's values through its rule
// (sim/sweep/case_keys.hpp); then `plan = all` becomes every plan the mesh holds and,
// at op level, `lhs`/`rhs = all` every placement combination the rules admit (`placements`:
// direct, redistribute or all). A combination that cannot run is kept as a rejected case with the
// reason (fp8moe list shows it); a value no combination can use is an error naming its line.
#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/scenario.hpp"
#include "sim/limits/limits.hpp"
#include "sim/sweep/case.hpp"

namespace fp8moe::scenarios {

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
