#pragma once
// `fp8moe rules verify`: a sharding-rule table checked by execution (issue 21, reference/SPEC.md 10.8).
//
// For each op of the table, each pass it serves, each mesh (default: a mesh of 2 and a 2x2 one),
// each shape set (uneven token counts, an empty token group, an expert count the mesh does not
// divide) and every placement of the op's data arguments (R or S(d) per mesh dim; scales follow
// their data as the quantizer makes them; offsets Replicate):
//   1. the strategy is chosen as DTensor chooses it (_select_min_cost_strategy): the table's
//      single-dim strategies are expanded to the mesh (one per mesh dim, mesh dim 0 most
//      significant); strategies that shard a dim an argument lacks, or a dim smaller than its
//      shard count, are dropped; a strategy needing no redistribution wins (the last such one),
//      else the first of zero cost, else the first of least cost. Cost per argument, as DTensor's
//      redistribute_cost: 0 when the placements are equal or the input is all Replicate; else per
//      mesh dim that changes, Shard->Replicate an all-gather (bytes grow by the dim's size first),
//      Shard->Shard an all-gather plus 1, Partial->Replicate an all-reduce, Partial->Shard a
//      reduce-scatter, Shard->Partial impossible, Replicate->anything free; a collective costs
//      1 + MB moved * (n-1)/n (an all-reduce twice the bytes); codes 1 byte, scales and offsets 4,
//      a quantizer's input 2.
//   2. the inputs are redistributed to it on fp8moe's fake mesh, each rank runs the op on its
//      local tensors (and the Replicate offsets) exactly as the framework's op would, and the
//      output is assembled as the strategy claims (Shard: concatenated; Partial: summed in fp32);
//   3. the result is compared with the op on one device.
// Verdicts: correct (bitwise), correct (Partial sum: every element within the rounding bound of
// summing bf16 partials, SQNR given), wrong shape (a rank's op refuses its arguments, or the
// output's pieces do not have the shapes the claimed placement gives), wrong values, unsafe (the
// offsets reach past a rank's rows: an out-of-bounds read on a GPU), unreachable (no strategy).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/tensor.hpp"
#include "sim/mesh/mesh.hpp"
#include "sim/rules/rule_table.hpp"

namespace fp8moe::sim {

enum class RuleVerdict : std::uint8_t { correct, correct_partial, wrong_shape, wrong_values, unsafe, unreachable };
const char* rule_verdict_name(RuleVerdict v);  // "correct", "correct-partial", "wrong-shape", ...
bool rule_verdict_is_defect(RuleVerdict v);    // wrong-shape, wrong-values, unsafe

// The letters' sizes of one verification case.
struct RuleShapes {
  std::string name;                 // "E3-M45"
  std::vector<std::int32_t> offs;   // token-group ends: E = offs.size(), M = offs.back()
  std::int64_t n = 0, k = 0;         // 0: 128 * max(4, the mesh's ranks), see on()
  std::int64_t size(char letter) const;
  std::string str() const;          // "E=3 M=45 offs=20,20,45 N=512 K=512"
  // N and K resolved for a mesh: 128 blocks times max(4, its ranks), so that every shard of a
  // blocked dim (over any mesh dims) holds whole 128-blocks.
  RuleShapes on(const Mesh& mesh) const;
};
// Refuses a shape set the verifier cannot run (an Error naming it and the fix): 1 to 64 experts,
// non-decreasing offsets, 1 to 8192 tokens, N and K multiples of 128 up to 8192 (0: auto).
void check_rule_shapes(const RuleShapes& sh);
// The default sets: E=3, M=45, offs 20,20,45 (uneven over 2 and 4 ranks, an empty group, 3
// experts over 2) and E=4, M=64; N and K as on() gives them (512 on up to 4 ranks).
std::vector<RuleShapes> default_rule_shapes();

struct RuleVerifyOptions {
  std::vector<std::string> meshes{"tp=2", "dp=2,tp=2"};
  std::vector<RuleShapes> shapes = default_rule_shapes();
  std::uint64_t seed = 0;
};

struct RuleVerifyRow {
  std::string op;
  Pass pass = Pass::fwd;
  std::string mesh;
  std::string shapes;                // RuleShapes::name
  std::string inputs;                // "a=[S(0)] b=[R]": the data arguments' placements
  std::vector<int> strategy;         // the chosen strategy's number per mesh dim; empty: none
  std::string strategy_text;         // the chosen strategies as the table writes them, per mesh dim
  std::string redistribution;        // "a [S(0)]->[R], a_s [S(0)]->[R]" or "none"
  double cost = 0;                   // its DTensor cost
  RuleVerdict verdict = RuleVerdict::correct;
  std::string detail;                // why, for anything but bitwise correct
  double sqnr_db = 0;                // vs the single device; +inf when bitwise; NaN when not run
};

struct RuleVerifyReport {
  std::string table;   // path
  std::string source;
  std::uint64_t seed = 0;
  std::vector<RuleVerifyRow> rows;
  // Strategies the enumeration never chose, per op and pass ("#2 (not applicable: ...)").
  std::vector<std::string> never_chosen;
  int defects() const;  // rows with a defect verdict
};

// The op on one device's (or one rank's) tensors, one per argument (nullptr for non-tensors):
// its outputs, or an Error saying why it refuses them. What each rank runs in verify_rules.
std::vector<TensorF> run_rule_op(const RuleOp& op, Pass p, const std::vector<const TensorF*>& args);
// The random global arguments verify_rules gives one (op, pass, shape set); nullopt for non-tensors.
std::vector<std::optional<TensorF>> rule_inputs(const RuleOp& op, Pass p, const RuleShapes& sh, std::uint64_t seed);

// Verifies every op of the table; an Error (exit 2) when the table's shapes cannot run on one
// device, naming the op and pass.
RuleVerifyReport verify_rules(const RuleTable& table, const RuleVerifyOptions& opt = {});

}  // namespace fp8moe::sim
