#include "sim/rules/sharding.hpp"

#include <limits>

#include "reference/error.hpp"

namespace fp8moe::sim {
namespace {

using P = Placement;

// The mesh dim's name for messages.
std::string md_name(const Mesh& mesh, int md) { return "mesh dim '" + mesh.dim(md).name + "'"; }

void check_operand(const char* what, const Placements& p, std::size_t rank, const Mesh& mesh) {
  if (static_cast<int>(p.size()) != mesh.ndim()) {
    fail(what, " placements ", str(p), " have ", p.size(), " entries but mesh '", mesh.str(), "' has ", mesh.ndim(),
         " dims");
  }
  for (const Placement& x : p) {
    if (x.is_shard() && (x.dim < 0 || x.dim >= static_cast<int>(rank))) {
      fail(what, " placement ", x.str(), " names a dim outside the ", rank, "-D operand");
    }
  }
}

}  // namespace

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::out_feature: return "out-feature";
    case Strategy::contraction: return "contraction";
    case Strategy::wgrad_n: return "wgrad-n";
    case Strategy::wgrad_k: return "wgrad-k";
    case Strategy::replicate: return "replicate";
  }
  return "?";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::direct: return "direct";
    case Verdict::redistribute: return "redistribute";
    case Verdict::reject: return "reject";
  }
  return "?";
}

std::vector<std::int64_t> lhs_shape(Pass p, const OpShape& s) {
  return p == Pass::fwd ? std::vector<std::int64_t>{s.M, s.K} : std::vector<std::int64_t>{s.M, s.N};
}
std::vector<std::int64_t> rhs_shape(Pass p, const OpShape& s) {
  return p == Pass::wgrad ? std::vector<std::int64_t>{s.M, s.K} : std::vector<std::int64_t>{s.E, s.N, s.K};
}
std::vector<std::int64_t> out_shape(Pass p, const OpShape& s) {
  switch (p) {
    case Pass::fwd: return {s.M, s.N};
    case Pass::dgrad: return {s.M, s.K};
    case Pass::wgrad: return {s.E, s.N, s.K};
  }
  return {};
}
const char* lhs_name(Pass p) { return p == Pass::fwd ? "A" : "dOut"; }
const char* rhs_name(Pass p) { return p == Pass::wgrad ? "A" : "W"; }
const char* out_name(Pass p) {
  switch (p) {
    case Pass::fwd: return "out";
    case Pass::dgrad: return "grad_A";
    case Pass::wgrad: return "grad_W";
  }
  return "?";
}

std::vector<StrategyRow> strategy_rows(Pass p) {
  switch (p) {
    case Pass::fwd:
      return {{Strategy::out_feature, P::R(), P::S(1), P::S(1)},
              {Strategy::contraction, P::S(1), P::S(2), P::P()},
              {Strategy::replicate, P::R(), P::R(), P::R()}};
    case Pass::dgrad:
      return {{Strategy::out_feature, P::R(), P::S(2), P::S(1)},
              {Strategy::contraction, P::S(1), P::S(1), P::P()},
              {Strategy::replicate, P::R(), P::R(), P::R()}};
    case Pass::wgrad:
      return {{Strategy::wgrad_n, P::S(1), P::R(), P::S(1)},
              {Strategy::wgrad_k, P::R(), P::S(1), P::S(2)},
              {Strategy::replicate, P::R(), P::R(), P::R()}};
  }
  return {};
}

std::string strategy_str(const std::vector<Strategy>& s, const Mesh& mesh) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += mesh.dim(static_cast<int>(i)).name + ":" + strategy_name(s[i]);
  }
  return out.empty() ? "single-device" : out;
}

std::string str(const ShardingDecision& d, const Mesh& mesh) {
  std::string s = verdict_name(d.verdict);
  if (d.verdict == Verdict::reject) return s + ": " + d.reason;
  s += " " + strategy_str(d.strategy, mesh) + " lhs=" + str(d.lhs) + " rhs=" + str(d.rhs) + " -> out=" + str(d.out);
  if (d.verdict == Verdict::redistribute) {
    s += " (" + d.reason + "; lhs: " + str(d.lhs_plan) + "; rhs: " + str(d.rhs_plan) + "; " +
         std::to_string(d.redist_bytes) + " bytes)";
  }
  return s;
}

ShardingDecision decide(Pass p, const OpShape& shape, const Placements& lhs, const Placements& rhs, const Mesh& mesh,
                        const ReduceOptions& reduce) {
  const auto ls = lhs_shape(p, shape), rs = rhs_shape(p, shape);
  check_operand(lhs_name(p), lhs, ls.size(), mesh);
  check_operand(rhs_name(p), rhs, rs.size(), mesh);
  const int nd = mesh.ndim();
  ShardingDecision d;

  // Rejections first: they hold whatever the other operand does.
  for (int md = 0; md < nd; ++md) {
    const Placement& l = lhs[static_cast<std::size_t>(md)];
    const Placement& r = rhs[static_cast<std::size_t>(md)];
    const bool rhs_tokens = p == Pass::wgrad && r.is_shard(0);
    if (l.is_shard(0) || rhs_tokens) {
      d.reason = md_name(mesh, md) + ": " + (l.is_shard(0) ? lhs_name(p) : rhs_name(p)) +
                 " S(0) shards the token dim M: token sharding needs per-rank routing: use the dp plan";
      return d;
    }
    if (p != Pass::wgrad && r.is_shard(0)) {
      d.reason = md_name(mesh, md) + ": W S(0) shards the expert dim E: sharding experts needs the EP plan";
      return d;
    }
  }

  // A strategy that takes the placements as they are.
  const std::vector<StrategyRow> rows = strategy_rows(p);
  std::vector<int> match(static_cast<std::size_t>(nd), -1);
  std::string why;
  for (int md = 0; md < nd; ++md) {
    const Placement& l = lhs[static_cast<std::size_t>(md)];
    const Placement& r = rhs[static_cast<std::size_t>(md)];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].lhs == l && rows[i].rhs == r) match[static_cast<std::size_t>(md)] = static_cast<int>(i);
    }
    if (match[static_cast<std::size_t>(md)] >= 0 || !why.empty()) continue;
    if (l.is_partial() || r.is_partial()) {
      why = md_name(mesh, md) + ": " + (l.is_partial() ? lhs_name(p) : rhs_name(p)) +
            " is Partial: it needs a reduction first";
    } else {
      why = md_name(mesh, md) + ": no strategy takes " + lhs_name(p) + " " + l.str() + " with " + rhs_name(p) + " " +
            r.str();
    }
  }
  auto fill = [&](const std::vector<int>& pick) {
    d.strategy.clear();
    d.lhs.clear();
    d.rhs.clear();
    d.out.clear();
    for (int i : pick) {
      const StrategyRow& row = rows[static_cast<std::size_t>(i)];
      d.strategy.push_back(row.strategy);
      d.lhs.push_back(row.lhs);
      d.rhs.push_back(row.rhs);
      d.out.push_back(row.out);
    }
  };
  if (why.empty()) {
    d.verdict = Verdict::direct;
    fill(match);
    return d;
  }

  // The cheapest redistribution: every combination of rows over the mesh dims, mesh dim 0 most
  // significant, rows in table order; the first of the cheapest wins.
  const int nr = static_cast<int>(rows.size());
  std::int64_t combos = 1;
  for (int md = 0; md < nd; ++md) combos *= nr;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  std::vector<int> pick(static_cast<std::size_t>(nd));
  for (std::int64_t c = 0; c < combos; ++c) {
    std::int64_t rest = c;
    for (int md = nd - 1; md >= 0; --md) {
      pick[static_cast<std::size_t>(md)] = static_cast<int>(rest % nr);
      rest /= nr;
    }
    ShardingDecision cand;
    for (int i : pick) {
      cand.lhs.push_back(rows[static_cast<std::size_t>(i)].lhs);
      cand.rhs.push_back(rows[static_cast<std::size_t>(i)].rhs);
    }
    const auto lp = plan_redistribute(ls, lhs, cand.lhs, mesh, reduce);
    const auto rp = plan_redistribute(rs, rhs, cand.rhs, mesh, reduce);
    const std::int64_t bytes = plan_bytes(lp) + plan_bytes(rp);
    if (bytes < best) {
      best = bytes;
      fill(pick);
      d.lhs_plan = lp;
      d.rhs_plan = rp;
      d.redist_bytes = bytes;
    }
  }
  d.verdict = Verdict::redistribute;
  d.reason = why;
  return d;
}

// ---- Quantizers -----------------------------------------------------------------------------

std::vector<int> recipe_block_extent(Recipe r, int block) {
  switch (r) {
    case Recipe::act_lhs: return {1, block};
    case Recipe::act_rhs: return {block, 1};
    case Recipe::act_lhs_t: return {block, 1};
    case Recipe::weight_fwd:
    case Recipe::weight_dgrad: return {1, block, block};
    case Recipe::kgrouped_lhs:
    case Recipe::kgrouped_rhs: return {block, 1};
  }
  return {};
}


QuantizerRule quantizer_rule(Recipe r, const std::vector<std::int64_t>& shape, const Placements& in, const Mesh& mesh,
                             int block) {
  const std::vector<int> extent = recipe_block_extent(r, block);
  if (shape.size() != extent.size()) {
    fail("the ", recipe_name(r), " quantizer takes a ", extent.size(), "-D input, got shape ", shape_str(shape));
  }
  check_operand(recipe_name(r), in, shape.size(), mesh);
  QuantizerRule q;
  // The dims a transposing quantizer swaps (input dims; -1: none).
  int t0 = -1, t1 = -1;
  if (r == Recipe::act_lhs_t || r == Recipe::kgrouped_lhs) t0 = 0, t1 = 1;
  if (r == Recipe::weight_dgrad) t0 = 1, t1 = 2;
  for (int md = 0; md < mesh.ndim(); ++md) {
    Placement p = in[static_cast<std::size_t>(md)];
    if (p.is_partial() && q.valid) {
      q.valid = false;
      q.reason = md_name(mesh, md) + ": the input is Partial and quantization is not linear: reduce it first";
    }
    if (p.is_shard(t0)) {
      p.dim = t1;
    } else if (p.is_shard(t1)) {
      p.dim = t0;
    }
    q.codes.push_back(p);
  }
  const bool kgrouped = r == Recipe::kgrouped_lhs || r == Recipe::kgrouped_rhs;
  // A local block coincides with a single-device block iff the local range starts on a block
  // boundary and ends on one (or at the dim's end, where both have the same ragged block).
  for (int rank = 0; rank < mesh.world() && q.block_aligned; ++rank) {
    const std::vector<Range> box = local_box(shape, in, mesh, rank);
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const Range& rg = box[d];
      const std::int64_t b = extent[d];
      if (b <= 1 || rg.size() == 0 || rg.size() == shape[d]) continue;
      if (kgrouped && d == 0) {
        q.block_aligned = false;
        q.misaligned = cat("rank ", rank, " holds tokens [", rg.begin, ",", rg.end, ") of ", shape[d], ": the ",
                           recipe_name(r), " blocks follow the expert groups, which need per-rank routing");
        break;
      }
      if (rg.begin % b != 0 || (rg.end % b != 0 && rg.end != shape[d])) {
        q.block_aligned = false;
        const std::int64_t bad = rg.begin % b != 0 ? rg.begin : rg.end;
        q.misaligned = cat("rank ", rank, " holds [", rg.begin, ",", rg.end, ") of dim ", d, " (size ", shape[d],
                           "): the shard boundary ", bad, " is not a multiple of the ", recipe_name(r), " block ", b);
        break;
      }
    }
  }
  return q;
}

}  // namespace fp8moe::sim
