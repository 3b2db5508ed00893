#include "reference/grouped_plan.hpp"

#include "reference/error.hpp"
#include "reference/groups.hpp"

namespace fp8moe {

PassRecipes pass_recipes(Pass p) {
  switch (p) {
    case Pass::fwd: return {Recipe::act_lhs, Recipe::weight_fwd};
    case Pass::dgrad: return {Recipe::act_lhs, Recipe::weight_dgrad};
    case Pass::wgrad: return {Recipe::kgrouped_lhs, Recipe::kgrouped_rhs};
  }
  fail("unknown pass ", static_cast<int>(p));
}

namespace {

// 1xB codes (M, C): rows [r0, r0 + rows), one scale per row and k-block.
BlockOperand rows_view(const QuantOperand& q, std::int64_t r0, std::int64_t rows) {
  const QuantLayout& l = q.layout;
  return BlockOperand{q.codes + l.code_index(0, r0, 0), l.cols, 1, q.scales + l.scale_index(0, r0, 0), l.scale_cols(),
                      1, 1, rows};
}

// BxB codes (E, R, C): expert e's (R, C) matrix, one scale per B rows and k-block.
BlockOperand expert_view(const QuantOperand& q, std::int64_t e) {
  const QuantLayout& l = q.layout;
  return BlockOperand{q.codes + l.code_index(e, 0, 0), l.cols, 1, q.scales + l.scale_index(e, 0, 0), l.scale_cols(),
                      1, l.block_rows, l.rows};
}

// kgrouped-lhs codes (N, M) contracted along tokens from token s: rows n, one scale per row and
// token block.
BlockOperand kgroup_lhs_view(const QuantOperand& q, std::int64_t s) {
  const QuantLayout& l = q.layout;
  return BlockOperand{q.codes + l.code_index(0, 0, s), l.cols, 1, q.scales + l.scale_index(0, 0, s), l.scale_cols(), 1,
                      1, l.rows};
}

// kgrouped-rhs codes (M, K) read transposed as (K, tokens) from token s: one scale per column k
// and token block.
BlockOperand kgroup_rhs_view(const QuantOperand& q, std::int64_t s) {
  const QuantLayout& l = q.layout;
  return BlockOperand{q.codes + l.code_index(0, s, 0), 1, l.cols, q.scales + l.scale_index(0, s, 0), 1, l.scale_cols(),
                      1, l.cols};
}

const char* lhs_what(Pass p) { return p == Pass::fwd ? "fwd: A" : p == Pass::dgrad ? "dgrad: dOut" : "wgrad: dOut^T"; }
const char* rhs_what(Pass p) { return p == Pass::fwd ? "fwd: W" : p == Pass::dgrad ? "dgrad: W (dgrad orientation)" : "wgrad: A"; }

// wgrad's A may come as kgrouped-rhs (M, K) or, for a TN tensor-core GEMM that wants both operands
// contiguous along the tokens (cuBLASLt), as kgrouped-lhs of A: A^T (K, M). The blocks are the same
// 128 tokens of one column k either way, so the codes and scales are equal, only transposed.
void require_wgrad_rhs(Recipe got) {
  if (got != Recipe::kgrouped_rhs && got != Recipe::kgrouped_lhs) {
    fail("wgrad: A must be quantized with the ", recipe_name(Recipe::kgrouped_rhs), " recipe (A) or the ",
         recipe_name(Recipe::kgrouped_lhs), " recipe (A^T), got ", recipe_name(got));
  }
}

}  // namespace

GroupedPlan plan_grouped(Pass p, const QuantOperand& lhs, const QuantOperand& rhs, std::span<const std::int32_t> offs,
                         const GemmOptions& opt) {
  const PassRecipes want = pass_recipes(p);
  require_recipe(lhs.recipe, want.lhs, lhs_what(p));
  if (p == Pass::wgrad) {
    require_wgrad_rhs(rhs.recipe);
  } else {
    require_recipe(rhs.recipe, want.rhs, rhs_what(p));
  }
  if (lhs.format != opt.quant.format || rhs.format != opt.quant.format) {
    fail(pass_name(p), ": operands are ", format_name(lhs.format), "/", format_name(rhs.format), " but the options say ",
         format_name(opt.quant.format));
  }
  const QuantLayout &a = lhs.layout, &b = rhs.layout;
  GroupedPlan plan;
  std::int64_t s = 0;
  if (p == Pass::wgrad) {
    const bool a_t = rhs.recipe == Recipe::kgrouped_lhs;  // A given as A^T (K, M)
    const std::int64_t N = a.rows, M = a.cols, K = a_t ? b.rows : b.cols, b_tokens = a_t ? b.cols : b.rows;
    if (b_tokens != M) fail("wgrad: dOut has ", M, " tokens but A has ", b_tokens);
    check_offsets(offs, M);
    const std::int64_t E = static_cast<std::int64_t>(offs.size());
    plan.out_shape = {E, N, K};
    for (std::size_t e = 0; e < offs.size(); ++e) {
      plan.gemms.push_back({e, kgroup_lhs_view(lhs, s), a_t ? kgroup_lhs_view(rhs, s) : kgroup_rhs_view(rhs, s), offs[e] - s,
                            static_cast<std::int64_t>(e) * N * K, K, splits_of(opt, e)});
      s = offs[e];
    }
    return plan;
  }
  // fwd and dgrad: lhs (M, kc) rows per expert times the expert's (n_out, kc) weight.
  const std::int64_t M = a.rows, kc = a.cols, n_out = b.rows;
  const char* kname = p == Pass::fwd ? "K" : "N";
  if (b.cols != kc) fail(lhs_what(p), " has ", kname, " = ", kc, " but W has ", kname, " = ", b.cols);
  if (b.batch != static_cast<std::int64_t>(offs.size())) {
    fail(pass_name(p), ": W has ", b.batch, " experts but offs has ", offs.size(), " entries");
  }
  check_offsets(offs, M);
  plan.out_shape = {M, n_out};
  for (std::size_t e = 0; e < offs.size(); ++e) {
    plan.gemms.push_back({e, rows_view(lhs, s, offs[e] - s), expert_view(rhs, static_cast<std::int64_t>(e)), kc,
                          s * n_out, n_out, splits_of(opt, e)});
    s = offs[e];
  }
  return plan;
}

}  // namespace fp8moe
