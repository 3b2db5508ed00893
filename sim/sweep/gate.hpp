#pragma once
// `fp8moe gate` (issue 4 item 6): every row of a sweep file against the gates of a gates file
// (scenarios/gates.ini by default, compiled in), and optionally against a baseline run.
//
//   [gate.NAME]
//   description = what the gate holds and its source
//   level = op                 # match keys: any column of the cases table (results/SCHEMA.md),
//   strategy = !*contraction*  #   values are globs separated by ';', '!' negates; a row must
//   mode = !hp64               #   match every match key
//   expect = bitwise           # or: metric = sqnr_db | sqnr_vs_single_db, min_db = 27
//                              # or: expect = identical (to the baseline run's row of the same
//                              #     case on its own backend: every metric identical)
//
// A row with status error, or a NaN metric under a floor, fails. Every matching gate applies.
#include <string>
#include <vector>

#include "results/store.hpp"

namespace fp8moe::sim {

struct GateMatch {
  std::string column;
  std::vector<std::string> any_of, none_of;  // globs
};

struct Gate {
  std::string name, description, where;  // where: "gates.ini:12"
  std::vector<GateMatch> match;
  bool expect_bitwise = false;
  bool expect_identical = false;  // identical metrics to the baseline's row of the same case
  std::string metric;  // sqnr_db | sqnr_vs_single_db
  double min_db = 0;
};

std::vector<Gate> parse_gates(const std::string& text, const std::string& path);

struct GateFailure {
  const results::CaseRow* row = nullptr;
  std::string gate;     // gate name, "status" or "baseline"
  std::string message;  // value, floor, why
};

struct GateReport {
  std::vector<GateFailure> failures;
  std::size_t rows = 0, rows_gated = 0, checks = 0;
};

bool gate_matches(const Gate& g, const results::CaseRow& r);
GateReport check_gates(const std::vector<results::CaseRow>& rows, const std::vector<Gate>& gates);
// No matched row dropped more than max_drop dB (sqnr_db and sqnr_vs_single_db), no bitwise row
// lost its bitwise equality, and no baseline row is missing. Only baseline rows of a backend the
// run has are held to this (a GPU run against the CPU baseline meets the identity gates instead).
void check_baseline(const std::vector<results::CaseRow>& rows, const std::vector<results::CaseRow>& baseline,
                    double max_drop, GateReport& rep);

// The `expect = identical` gates: every run row a gate matches has a baseline row of the same
// case (any backend) with identical metrics. Without a baseline, a matched row is a failure
// asking for one.
void check_identities(const std::vector<results::CaseRow>& rows, const std::vector<results::CaseRow>* baseline,
                      const std::vector<Gate>& gates, GateReport& rep);

// "case 12 op tp=2 A=[R] W=[S(1)] fwd out promote-fp32:cublas": how failures name a row.
std::string row_label(const results::CaseRow& r);
// (case_key, pass, tensor): the identity of a row across runs. Without the backend, the same case
// run on two backends (CPU reference vs a GPU backend) has one identity.
std::string row_identity(const results::CaseRow& r, bool with_backend = true);

}  // namespace fp8moe::sim
