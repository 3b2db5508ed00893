#pragma once
// A framework's sharding-rule table, as `fp8moe rules verify` reads it (issue 21, executed by sim/verify/rule_verify.hpp; the format is
// documented in reference/SPEC.md 10.8 and scenarios/rules/README.md).
//
// A table is JSON: {"format": "fp8moe-rules-1", "source": "...", "ops": [OP, ...]}; each OP states
//   - its kind: "grouped_mm" (the blockwise-scaled grouped GEMM: lhs and rhs FP8 codes, their
//     scales, the token-group offsets) or "quantize" (a blockwise quantizer: input -> codes, scales);
//   - the passes it serves (fwd, dgrad, wgrad);
//   - its arguments in call order: name, role, logical shape per pass in the letters M (tokens,
//     grouped by the offsets), N, K, E (experts), a letter over the block ("K/128") for a scale's
//     blocked dim, or {"tensor": false} for an argument that is not a tensor (out_dtype);
//   - its outputs: name and shape per pass (quantize: role codes and scales);
//   - its strategies as torchao's register_sharding writes them, for ONE mesh dim: the output
//     placements, then one placement per argument (None -> null for non-tensors). DTensor expands
//     them to an N-D mesh by choosing one per mesh dim. A strategy is [[outs...], [args...]]
//     (every pass the op serves) or {"passes": [...], "out": [...], "args": [...]}.
// Placements in either spelling: "Replicate()", "Shard(1)", "Partial()" or "R", "S(1)", "P".
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/gemm.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {

enum class RuleOpKind : std::uint8_t { grouped_mm, quantize };
const char* rule_op_kind_name(RuleOpKind k);  // "grouped_mm" | "quantize"

// One dim of a logical shape: a letter, and the block it is divided by (1: not blocked).
struct DimExpr {
  char letter = 'M';
  int block = 1;
  std::string str() const;  // "K" or "K/128"
  bool operator==(const DimExpr&) const = default;
};
using ShapeExpr = std::vector<DimExpr>;
std::string shape_expr_str(const ShapeExpr& s);  // "(M,K/128)"
std::string shape_letters(const ShapeExpr& s);   // "MK" for (M,K/128)

struct RuleArg {
  std::string name;
  bool tensor = true;
  // grouped_mm: lhs, rhs, lhs_scale, rhs_scale, offsets; quantize: input. Empty for non-tensors.
  std::string role;
  std::map<Pass, ShapeExpr> shape;  // per pass the op serves
};

struct RuleOutput {
  std::string name;
  std::string role;  // grouped_mm: out; quantize: codes, scales
  std::map<Pass, ShapeExpr> shape;
};

struct RuleStrategy {
  int number = 1;                    // 1-based, as listed in the table
  std::vector<Pass> passes;          // the passes it applies to (all the op serves unless given)
  std::vector<Placement> out;        // one per output
  std::vector<std::optional<Placement>> args;  // one per argument; nullopt: None (not a tensor)
  std::string str(const std::vector<RuleArg>& names) const;  // "#4 [S(1)] <- a S(0), b R, ..., None"
};

struct RuleOp {
  std::string name;
  RuleOpKind kind = RuleOpKind::grouped_mm;
  std::vector<Pass> passes;
  std::vector<RuleArg> args;
  std::vector<RuleOutput> outputs;
  std::vector<RuleStrategy> strategies;
  std::string where;  // "ops[0]" for messages

  int arg_index(const std::string& role) const;     // -1 when absent
  int output_index(const std::string& role) const;  // -1 when absent
};

struct RuleTable {
  std::string path;
  std::string source;  // where the rules come from, as the table says
  std::vector<RuleOp> ops;
};

// The table's text; an Error names the file, the entry (e.g. "ops[0].strategies[3].args[1]") and
// the fix for anything malformed, including shapes the op's kind cannot compute.
RuleTable parse_rule_table(const std::string& text, const std::string& path);
RuleTable load_rule_table(const std::string& path);

// A letter over the block in a table: the blocked dims of scales are "/128" (the block size of
// fp8moe and torchao's blockwise recipes).
inline constexpr int kRuleBlock = 128;

}  // namespace fp8moe::sim
