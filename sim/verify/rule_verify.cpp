#include "sim/verify/rule_verify.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <variant>

#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "reference/scale.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/dtensor/dtensor.hpp"
#include "sim/rules/enumerate.hpp"

namespace fp8moe::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const RuleArg& arg(const RuleOp& op, const char* role) { return op.args[static_cast<std::size_t>(op.arg_index(role))]; }
std::size_t arg_at(const RuleOp& op, const char* role) { return static_cast<std::size_t>(op.arg_index(role)); }

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + ")";
}

// Token groups of offsets: [begin, end) per expert.
std::vector<std::pair<std::int64_t, std::int64_t>> groups_of(const std::vector<std::int64_t>& offs) {
  std::vector<std::pair<std::int64_t, std::int64_t>> g;
  std::int64_t b = 0;
  for (std::int64_t e : offs) {
    g.emplace_back(b, e);
    b = e;
  }
  return g;
}

// A scale dim's size for a data dim of `n` elements: n over its block, token blocks per group.
std::int64_t blocked_size(const DimExpr& d, std::int64_t n, const std::vector<std::int64_t>& offs) {
  if (d.block == 1) return n;
  if (d.letter != 'M') return (n + d.block - 1) / d.block;
  std::int64_t s = 0;
  for (const auto& [b, e] : groups_of(offs)) s += (e - b + d.block - 1) / d.block;
  return s;
}

// The global shape of a tensor argument or output in a shape set.
std::vector<std::int64_t> global_shape(const ShapeExpr& s, const RuleShapes& sh) {
  std::vector<std::int64_t> offs(sh.offs.begin(), sh.offs.end());
  std::vector<std::int64_t> out;
  for (const DimExpr& d : s) out.push_back(blocked_size(d, sh.size(d.letter), offs));
  return out;
}

// ---- The op on one rank's local tensors, as the framework's op would run it ---------------------

struct LocalFailure {
  RuleVerdict verdict = RuleVerdict::wrong_shape;
  std::string why;
};
using LocalResult = std::variant<std::vector<TensorF>, LocalFailure>;

// One operand of the grouped GEMM: codes and their scales, indexed by letter.
struct Operand {
  const TensorF* codes = nullptr;
  const TensorF* scales = nullptr;
  std::string letters;
  std::vector<std::int64_t> stride, sstride;
  std::vector<std::vector<std::int64_t>> sidx;  // per dim: the scale index of each element index

  Operand(const TensorF& c, const TensorF& s, const ShapeExpr& scale_shape, const std::vector<std::int64_t>& offs)
      : codes(&c), scales(&s), letters(shape_letters(scale_shape)) {
    const int r = c.rank();
    stride.assign(static_cast<std::size_t>(r), 1);
    sstride.assign(static_cast<std::size_t>(r), 1);
    for (int d = r - 2; d >= 0; --d) {
      stride[static_cast<std::size_t>(d)] = stride[static_cast<std::size_t>(d) + 1] * c.dim(d + 1);
      sstride[static_cast<std::size_t>(d)] = sstride[static_cast<std::size_t>(d) + 1] * s.dim(d + 1);
    }
    for (int d = 0; d < r; ++d) {
      const DimExpr& e = scale_shape[static_cast<std::size_t>(d)];
      std::vector<std::int64_t> v(static_cast<std::size_t>(c.dim(d)));
      if (e.block == 1) {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i);
      } else if (e.letter != 'M') {
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i) / e.block;
      } else {  // token blocks restart at each group
        std::int64_t base = 0;
        for (const auto& [b, end] : groups_of(offs)) {
          for (std::int64_t m = b; m < end && m < static_cast<std::int64_t>(v.size()); ++m) {
            v[static_cast<std::size_t>(m)] = base + (m - b) / e.block;
          }
          base += (end - b + e.block - 1) / e.block;
        }
      }
      sidx.push_back(std::move(v));
    }
  }
  int pos(char letter) const { return static_cast<int>(letters.find(letter)); }
  // code * scale, exact in double (a code has at most 4 significant bits, a scale 24).
  double at(const std::int64_t* idx) const {
    std::int64_t o = 0, so = 0;
    for (std::size_t d = 0; d < stride.size(); ++d) {
      o += idx[d] * stride[d];
      so += sidx[d][static_cast<std::size_t>(idx[d])] * sstride[d];
    }
    return static_cast<double>(codes->data[static_cast<std::size_t>(o)]) *
           static_cast<double>(scales->data[static_cast<std::size_t>(so)]);
  }
  // The dequantized operand as a (rows, cols) matrix: rows along letter `r`, cols along `c`
  // (3-D operands: one matrix per index of their first dim, expert-major).
  std::vector<double> matrix(char r, char c) const {
    const int pr = pos(r), pc = pos(c);
    const int pe = codes->rank() == 3 ? 0 : -1;
    const std::int64_t ne = pe < 0 ? 1 : codes->dim(0), nr = codes->dim(pr), nc = codes->dim(pc);
    std::vector<double> out(static_cast<std::size_t>(ne * nr * nc));
    std::int64_t idx[3] = {0, 0, 0};
    for (std::int64_t e = 0; e < ne; ++e) {
      if (pe >= 0) idx[pe] = e;
      for (std::int64_t i = 0; i < nr; ++i) {
        idx[pr] = i;
        for (std::int64_t j = 0; j < nc; ++j) {
          idx[pc] = j;
          out[static_cast<std::size_t>((e * nr + i) * nc + j)] = at(idx);
        }
      }
    }
    return out;
  }
};

std::string letter_dims(const ShapeExpr& s, const TensorF& t) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += cat(i ? "," : "", s[i].letter, "=", t.dim(static_cast<int>(i)));
  return out + ")";
}

// One grouped_mm call on one rank: its arguments as the table names them, and the sizes of the
// shape letters as this rank's tensors give them.
struct GroupedCall {
  const RuleArg &la, &ra, &oa;
  const ShapeExpr &L, &R, &O;
  const TensorF &a, &b, &offs_t;
  std::map<char, std::int64_t> size;
  std::vector<std::int64_t> offs;
};

// The letters' sizes from lhs and rhs, or why the op refuses them (rank, or two sizes of a letter).
std::optional<LocalFailure> bind_sizes(GroupedCall& g) {
  const auto take = [&](const ShapeExpr& s, const TensorF& t, const RuleArg& who) -> std::optional<LocalFailure> {
    if (t.rank() != static_cast<int>(s.size())) {
      return LocalFailure{RuleVerdict::wrong_shape, cat(who.name, " is ", shape_text(t.shape), " but the op takes ",
                                                        shape_expr_str(s))};
    }
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::int64_t n = t.dim(static_cast<int>(i));
      const auto it = g.size.find(s[i].letter);
      if (it != g.size.end() && it->second != n) {
        return LocalFailure{RuleVerdict::wrong_shape,
                            cat("the op refuses its arguments: ", g.la.name, " ", letter_dims(g.L, g.a), " and ", g.ra.name,
                                " ", letter_dims(g.R, g.b), " disagree on ", s[i].letter,
                                shape_letters(g.O).find(s[i].letter) == std::string::npos
                                    ? " (torch: contraction dimension of mat_a and mat_b must match)"
                                    : "")};
      }
      g.size[s[i].letter] = n;
    }
    return std::nullopt;
  };
  if (auto f = take(g.L, g.a, g.la)) return f;
  return take(g.R, g.b, g.ra);
}

// The offsets as this rank sees them: 1-D, one per expert, non-decreasing, and within this rank's
// token rows (else the grouped GEMM reads out of bounds: unsafe).
std::optional<LocalFailure> read_offsets(GroupedCall& g) {
  if (g.offs_t.rank() != 1) {
    return LocalFailure{RuleVerdict::wrong_shape, cat(g.oa.name, " is ", shape_text(g.offs_t.shape), ", not 1-D")};
  }
  for (float v : g.offs_t.data) g.offs.push_back(static_cast<std::int64_t>(v));
  const std::int64_t E = static_cast<std::int64_t>(g.offs.size());
  if (g.size.count('E') && g.size['E'] != E) {
    return LocalFailure{RuleVerdict::wrong_shape, cat(g.oa.name, " has ", E, " entries but ", g.ra.name, " holds ",
                                                      g.size['E'], " experts")};
  }
  g.size['E'] = E;
  for (std::size_t e = 0; e < g.offs.size(); ++e) {
    if (g.offs[e] < 0 || (e && g.offs[e] < g.offs[e - 1])) {
      return LocalFailure{RuleVerdict::wrong_values, cat(g.oa.name, " is not non-decreasing from 0 on this rank")};
    }
  }
  const std::int64_t M = g.size['M'];
  if (!g.offs.empty() && g.offs.back() > M) {
    return LocalFailure{RuleVerdict::unsafe,
                        cat(g.oa.name, " ends at ", g.offs.back(), " but this rank holds ", M,
                            " token rows: the grouped GEMM reads rows ", M, "..", g.offs.back() - 1, " out of bounds")};
  }
  return std::nullopt;
}

// The scales must be those of this rank's codes.
std::optional<LocalFailure> check_scales(const RuleOp& op, Pass p, const std::vector<const TensorF*>& in, GroupedCall& g) {
  for (const char* role : {"lhs_scale", "rhs_scale"}) {
    const RuleArg& sa = arg(op, role);
    const TensorF& s = *in[arg_at(op, role)];
    const ShapeExpr& S = sa.shape.at(p);
    std::vector<std::int64_t> want;
    for (const DimExpr& d : S) want.push_back(blocked_size(d, g.size[d.letter], g.offs));
    if (s.shape != want) {
      const bool lhs = std::string(role) == "lhs_scale";
      return LocalFailure{RuleVerdict::wrong_shape,
                          cat("the op refuses its arguments: ", sa.name, " is ", shape_text(s.shape), " but ",
                              (lhs ? g.la : g.ra).name, " ", shape_text((lhs ? g.a : g.b).shape), " needs ", shape_text(want),
                              " ", shape_expr_str(S))};
    }
  }
  return std::nullopt;
}

// The dequantized grouped product, rounded to bf16, in the output's declared dim order:
//   an output with M: out(m, f) = sum_c lhs(m, c) rhs(e(m), f, c) over the group e(m) of row m;
//   else (wgrad):     out(e, x, y) = sum over the tokens m of group e of lhs(x, m) rhs(m, y).
TensorF grouped_product(const Operand& lo, const Operand& ro, GroupedCall& g) {
  const ShapeExpr &L = g.L, &R = g.R, &O = g.O;
  std::vector<std::int64_t> oshape;
  for (const DimExpr& d : O) oshape.push_back(g.size[d.letter]);
  TensorF out(oshape, 0.0f);
  std::vector<std::int64_t> ostride(O.size(), 1);
  for (int d = static_cast<int>(O.size()) - 2; d >= 0; --d) {
    ostride[static_cast<std::size_t>(d)] = ostride[static_cast<std::size_t>(d) + 1] * oshape[static_cast<std::size_t>(d) + 1];
  }
  const auto stride_of = [&](char c) { return ostride[shape_letters(O).find(c)]; };
  const auto groups = groups_of(g.offs);
  const std::int64_t M = g.size['M'];
  if (shape_letters(O).find('M') != std::string::npos) {
    const char c = L[0].letter == 'M' ? L[1].letter : L[0].letter;
    const char f = R[1].letter == c ? R[2].letter : R[1].letter;
    const std::vector<double> lm = lo.matrix('M', c), rm = ro.matrix(f, c);
    const std::int64_t C = g.size[c], F = g.size[f];
    for (std::size_t e = 0; e < groups.size(); ++e) {
      for (std::int64_t m = groups[e].first; m < groups[e].second; ++m) {
        for (std::int64_t j = 0; j < F; ++j) {
          const double* x = &lm[static_cast<std::size_t>(m * C)];
          const double* y = &rm[static_cast<std::size_t>((static_cast<std::int64_t>(e) * F + j) * C)];
          double acc = 0;
          for (std::int64_t k = 0; k < C; ++k) acc += x[k] * y[k];
          out.data[static_cast<std::size_t>(m * stride_of('M') + j * stride_of(f))] = round_bf16(acc);
        }
      }
    }
    return out;
  }
  const char x = L[0].letter == 'M' ? L[1].letter : L[0].letter;
  const char y = R[0].letter == 'M' ? R[1].letter : R[0].letter;
  const std::vector<double> lm = lo.matrix(x, 'M'), rm = ro.matrix(y, 'M');
  const std::int64_t X = g.size[x], Y = g.size[y];
  for (std::size_t e = 0; e < groups.size(); ++e) {
    for (std::int64_t i = 0; i < X; ++i) {
      for (std::int64_t j = 0; j < Y; ++j) {
        double acc = 0;
        for (std::int64_t m = groups[e].first; m < groups[e].second; ++m) {
          acc += lm[static_cast<std::size_t>(i * M + m)] * rm[static_cast<std::size_t>(j * M + m)];
        }
        out.data[static_cast<std::size_t>(static_cast<std::int64_t>(e) * stride_of('E') + i * stride_of(x) + j * stride_of(y))] =
            round_bf16(acc);
      }
    }
  }
  return out;
}

LocalResult grouped_mm_local(const RuleOp& op, Pass p, const std::vector<const TensorF*>& in) {
  const RuleArg &la = arg(op, "lhs"), &ra = arg(op, "rhs");
  GroupedCall g{la, ra, arg(op, "offsets"), la.shape.at(p), ra.shape.at(p), op.outputs[0].shape.at(p),
                *in[arg_at(op, "lhs")], *in[arg_at(op, "rhs")], *in[arg_at(op, "offsets")], {}, {}};
  if (auto f = bind_sizes(g)) return *f;
  if (auto f = read_offsets(g)) return *f;
  if (auto f = check_scales(op, p, in, g)) return *f;
  const Operand lo(g.a, *in[arg_at(op, "lhs_scale")], arg(op, "lhs_scale").shape.at(p), g.offs);
  const Operand ro(g.b, *in[arg_at(op, "rhs_scale")], arg(op, "rhs_scale").shape.at(p), g.offs);
  return std::vector<TensorF>{grouped_product(lo, ro, g)};
}

// A blockwise quantizer (the scale formula of reference/scale.hpp, e4m3, amax scales): codes as
// their decoded values, and the stored scales s_inv.
LocalResult quantize_local(const RuleOp& op, Pass p, const std::vector<const TensorF*>& in) {
  const RuleArg& xa = arg(op, "input");
  const TensorF& x = *in[arg_at(op, "input")];
  const ShapeExpr& X = xa.shape.at(p);
  const ShapeExpr& S = op.outputs[static_cast<std::size_t>(op.output_index("scales"))].shape.at(p);
  if (x.rank() != static_cast<int>(X.size())) {
    return LocalFailure{RuleVerdict::wrong_shape, cat(xa.name, " is ", shape_text(x.shape), " but the op takes ", shape_expr_str(X))};
  }
  // As 3-D: leading dims of extent 1.
  std::int64_t n[3] = {1, 1, 1};
  int blk[3] = {1, 1, 1};
  const int off = 3 - x.rank();
  for (int d = 0; d < x.rank(); ++d) {
    n[off + d] = x.dim(d);
    blk[off + d] = S[static_cast<std::size_t>(d)].block;
  }
  std::int64_t nb[3];
  for (int d = 0; d < 3; ++d) nb[d] = (n[d] + blk[d] - 1) / blk[d];
  std::vector<std::int64_t> sshape;
  for (int d = 0; d < x.rank(); ++d) sshape.push_back(nb[off + d]);
  TensorF codes(x.shape, 0.0f), scales(sshape, 0.0f);
  const auto index = [&](std::int64_t i, std::int64_t j, std::int64_t k) { return static_cast<std::size_t>((i * n[1] + j) * n[2] + k); };
  for (std::int64_t bi = 0; bi < nb[0]; ++bi) {
    for (std::int64_t bj = 0; bj < nb[1]; ++bj) {
      for (std::int64_t bk = 0; bk < nb[2]; ++bk) {
        const std::int64_t i1 = std::min(n[0], (bi + 1) * blk[0]), j1 = std::min(n[1], (bj + 1) * blk[1]),
                           k1 = std::min(n[2], (bk + 1) * blk[2]);
        float amax = 0.0f;
        for (std::int64_t i = bi * blk[0]; i < i1; ++i) {
          for (std::int64_t j = bj * blk[1]; j < j1; ++j) {
            for (std::int64_t k = bk * blk[2]; k < k1; ++k) amax = amax_update(amax, x.data[index(i, j, k)]);
          }
        }
        const BlockScale bs = block_scale(amax, Fp8Format::e4m3, false);
        scales.data[static_cast<std::size_t>((bi * nb[1] + bj) * nb[2] + bk)] = bs.s_inv;
        for (std::int64_t i = bi * blk[0]; i < i1; ++i) {
          for (std::int64_t j = bj * blk[1]; j < j1; ++j) {
            for (std::int64_t k = bk * blk[2]; k < k1; ++k) {
              codes.data[index(i, j, k)] =
                  fp8_decode(quantize_element(x.data[index(i, j, k)], bs.scale, Fp8Format::e4m3), Fp8Format::e4m3);
            }
          }
        }
      }
    }
  }
  std::vector<TensorF> out(2);
  out[static_cast<std::size_t>(op.output_index("codes"))] = std::move(codes);
  out[static_cast<std::size_t>(op.output_index("scales"))] = std::move(scales);
  return out;
}

LocalResult run_local(const RuleOp& op, Pass p, const std::vector<const TensorF*>& in) {
  return op.kind == RuleOpKind::grouped_mm ? grouped_mm_local(op, p, in) : quantize_local(op, p, in);
}

// ---- Inputs --------------------------------------------------------------------------------

// Fresh random global arguments of one (op, pass, shape set): FP8 codes (every finite e4m3 value
// equally likely), positive scales, the offsets, and a quantizer's bf16 input with outliers.
std::vector<std::optional<TensorF>> make_inputs(const RuleOp& op, Pass p, const RuleShapes& sh, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::optional<TensorF>> out;
  for (const RuleArg& a : op.args) {
    if (!a.tensor) {
      out.emplace_back(std::nullopt);
      continue;
    }
    TensorF t(global_shape(a.shape.at(p), sh));
    if (a.role == "offsets") {
      for (std::size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<float>(sh.offs[i]);
    } else if (a.role == "lhs" || a.role == "rhs") {
      std::uniform_int_distribution<int> code(0, 255);
      for (float& v : t.data) {
        std::uint8_t c = 0;
        do c = static_cast<std::uint8_t>(code(rng));
        while (!fp8_is_finite(c, Fp8Format::e4m3));
        v = fp8_decode(c, Fp8Format::e4m3);
      }
    } else if (a.role == "lhs_scale" || a.role == "rhs_scale") {
      std::uniform_real_distribution<float> u(1.0f / 1024, 1.0f / 16);
      for (float& v : t.data) v = u(rng);
    } else {  // a quantizer's input: N(0,1) in bf16, one element in 64 scaled up to 2^10
      std::normal_distribution<float> g;
      std::uniform_int_distribution<int> outlier(0, 63), exp(1, 10);
      for (float& v : t.data) v = round_bf16(g(rng) * (outlier(rng) == 0 ? std::ldexp(1.0f, exp(rng)) : 1.0f));
    }
    out.emplace_back(std::move(t));
  }
  return out;
}

// ---- DTensor's choice ---------------------------------------------------------------------

double element_bytes(const RuleArg& a) {
  if (a.role == "lhs" || a.role == "rhs") return 1;
  if (a.role == "input") return 2;
  return 4;
}

// DTensor's redistribute_cost with fp8moe's constants (verify.hpp).
double redistribute_cost(const Placements& cur, const Placements& tgt, double global_bytes, const Mesh& mesh) {
  if (cur == tgt) return 0;
  if (std::all_of(cur.begin(), cur.end(), [](const Placement& p) { return p.is_replicate(); })) return 0;
  double shards = 1;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (cur[static_cast<std::size_t>(i)].is_shard()) shards *= mesh.size(i);
  }
  double mb = global_bytes / shards / 1e6;
  double cost = 0;
  const auto coll = [](double bytes_mb, int n, double times) { return 1 + times * bytes_mb * (n - 1) / n; };
  for (int i = 0; i < mesh.ndim(); ++i) {
    const Placement& c = cur[static_cast<std::size_t>(i)];
    const Placement& t = tgt[static_cast<std::size_t>(i)];
    const int n = mesh.size(i);
    if (c == t) continue;
    if (c.is_shard() && t.is_replicate()) {
      mb *= n;
      cost += coll(mb, n, 1);
    } else if (c.is_shard() && t.is_shard()) {
      cost += coll(mb, n, 1) + 1;
    } else if (c.is_partial() && t.is_replicate()) {
      cost += coll(mb, n, 2);
    } else if (c.is_partial() && t.is_shard()) {
      cost += coll(mb, n, 1);
      mb /= n;
    } else if (c.is_shard() && t.is_partial()) {
      return kInf;
    }
  }
  return cost;
}

// One strategy of the full mesh: a single-dim strategy per mesh dim.
struct MeshStrategy {
  std::vector<int> pick;                     // indices into op.strategies, per mesh dim
  std::vector<std::optional<Placements>> args;  // per argument
  std::vector<Placements> outs;              // per output
};

// Why a single-dim strategy cannot serve pass p, or empty.
std::string not_applicable(const RuleOp& op, const RuleStrategy& s, Pass p) {
  if (std::find(s.passes.begin(), s.passes.end(), p) == s.passes.end()) return cat("listed for other passes");
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    if (!op.args[i].tensor || !s.args[i]->is_shard()) continue;
    const int rank = static_cast<int>(op.args[i].shape.at(p).size());
    if (s.args[i]->dim >= rank) {
      return cat(op.args[i].name, " ", s.args[i]->str(), " but ", op.args[i].name, " is ", rank, "-D in ", pass_name(p));
    }
  }
  return {};
}

std::vector<MeshStrategy> expand(const RuleOp& op, Pass p, const Mesh& mesh, const RuleShapes& sh) {
  std::vector<int> single;
  for (std::size_t i = 0; i < op.strategies.size(); ++i) {
    if (not_applicable(op, op.strategies[i], p).empty()) single.push_back(static_cast<int>(i));
  }
  std::vector<MeshStrategy> out;
  if (single.empty()) return out;
  std::vector<std::size_t> at(static_cast<std::size_t>(mesh.ndim()), 0);
  while (true) {
    MeshStrategy m;
    for (std::size_t d = 0; d < at.size(); ++d) m.pick.push_back(single[at[d]]);
    bool ok = true;
    for (std::size_t i = 0; i < op.args.size() && ok; ++i) {
      if (!op.args[i].tensor) {
        m.args.emplace_back(std::nullopt);
        continue;
      }
      Placements pl;
      for (int s : m.pick) pl.push_back(*op.strategies[static_cast<std::size_t>(s)].args[i]);
      // DTensor's is_tensor_shardable: no dim split into more shards than it has elements.
      const std::vector<std::int64_t> shape = global_shape(op.args[i].shape.at(p), sh);
      std::vector<std::int64_t> shards(shape.size(), 1);
      for (std::size_t d = 0; d < pl.size(); ++d) {
        if (pl[d].is_shard()) shards[static_cast<std::size_t>(pl[d].dim)] *= mesh.size(static_cast<int>(d));
      }
      for (std::size_t k = 0; k < shape.size(); ++k) ok = ok && shards[k] <= shape[k];
      m.args.emplace_back(pl);
    }
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      Placements pl;
      for (int s : m.pick) pl.push_back(op.strategies[static_cast<std::size_t>(s)].out[o]);
      m.outs.push_back(pl);
    }
    if (ok) out.push_back(std::move(m));
    std::size_t d = at.size();
    while (d > 0 && ++at[d - 1] == single.size()) at[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

struct Choice {
  int index = -1;  // into the expanded strategies; -1: none
  double cost = 0;
  std::string why_none;
};

Choice select(const RuleOp& op, const std::vector<MeshStrategy>& cands, const std::vector<std::optional<Placements>>& in,
              const std::vector<double>& bytes, const Mesh& mesh) {
  Choice c;
  if (cands.empty()) {
    c.why_none = "no strategy of the table applies to this pass";
    return c;
  }
  int exact = -1, zero = -1, best = -1;
  double best_cost = kInf;
  for (std::size_t s = 0; s < cands.size(); ++s) {
    double cost = 0;
    bool same = true;
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      if (!in[i]) continue;
      cost += redistribute_cost(*in[i], *cands[s].args[i], bytes[i], mesh);
      same = same && *in[i] == *cands[s].args[i];
    }
    if (cost == 0 && same) exact = static_cast<int>(s);
    if (cost == 0 && !same && zero < 0) zero = static_cast<int>(s);
    if (cost < best_cost) best_cost = cost, best = static_cast<int>(s);
  }
  c.index = exact >= 0 ? exact : zero >= 0 ? zero : best;
  if (c.index < 0) {
    c.why_none = "every strategy needs Shard -> Partial, which DTensor cannot do";
    return c;
  }
  c.cost = exact >= 0 || zero >= 0 ? 0 : best_cost;
  return c;
}

// ---- Running one chosen strategy ------------------------------------------------------------

struct Outcome {
  RuleVerdict verdict = RuleVerdict::correct;
  std::string detail;
  double sqnr_db = kInf;
};

double sqnr(const TensorF& ref, const TensorF& got) {
  double s = 0, e = 0;
  for (std::size_t i = 0; i < ref.data.size(); ++i) {
    const double d = static_cast<double>(got.data[i]) - ref.data[i];
    s += static_cast<double>(ref.data[i]) * ref.data[i];
    e += d * d;
  }
  if (std::isnan(e)) return kNaN;
  return e == 0 ? kInf : 10 * std::log10(s / e);
}

std::string index_text(const std::vector<std::int64_t>& shape, std::size_t flat) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = static_cast<std::int64_t>(flat) % shape[d];
    flat /= static_cast<std::size_t>(shape[d]);
  }
  return shape_text(idx);
}

// The rounding bound of a Partial output: each rank's bf16 partial is off by at most 2^-9 of
// itself, the fp32 sum of p of them by (p-1) 2^-24 of their absolute sum, and the single device's
// bf16 result by 2^-9 of itself: |got - ref| <= 2^-8 (sum_r |partial_r| + |ref|) covers all three.
bool within_partial_bound(double got, double ref, double abs_sum) {
  return std::abs(got - ref) <= std::ldexp(1.0, -8) * (abs_sum + std::abs(ref));
}

// The verdict of one output: each rank's piece must have the shape the claimed placements give
// it; assembled as claimed, it must equal the single device bitwise (correct), or, for a Partial
// claim, within the rounding bound of a sum of bf16 partials (correct-partial); else wrong-values.
Outcome judge_output(const RuleOutput& out, const Placements& claim, const std::vector<std::vector<TensorF>>& outs,
                     std::size_t o, const TensorF& ref, const Mesh& mesh, FakeCommunicator& comm, const ReduceOptions& reduce) {
  const std::vector<std::int64_t> gshape = ref.shape;
  for (const Placement& pl : claim) {
    if (pl.is_shard() && pl.dim >= static_cast<int>(gshape.size())) {
      return {RuleVerdict::wrong_shape,
              cat("the strategy says ", out.name, " is ", pl.dtensor(), " but ", out.name, " ", shape_text(gshape), " is ",
                  gshape.size(), "-D"),
              kNaN};
    }
  }
  const bool partial = std::any_of(claim.begin(), claim.end(), [](const Placement& pl) { return pl.is_partial(); });
  DTensor t{gshape, claim, {}};
  DTensor abs_t{gshape, claim, {}};  // |partials|, for the rounding bound of a Partial claim only
  for (int r = 0; r < mesh.world(); ++r) {
    const TensorF& got = outs[static_cast<std::size_t>(r)][o];
    std::vector<std::int64_t> want;
    for (const Range& x : local_box(gshape, claim, mesh, r)) want.push_back(x.size());
    if (got.shape != want) {
      return {RuleVerdict::wrong_shape,
              cat("rank ", r, "'s ", out.name, " is ", shape_text(got.shape), " but ", dtensor_str(claim), " of ", out.name,
                  " ", shape_text(gshape), " gives it ", shape_text(want)),
              kNaN};
    }
    t.local.push_back(got);
    if (!partial) continue;
    TensorF a = got;
    for (float& v : a.data) v = std::abs(v);
    abs_t.local.push_back(std::move(a));
  }
  const TensorF full = full_tensor(t, comm, reduce);
  std::size_t differ = 0, first = 0, outside = 0;
  const TensorF abs_sum = partial ? full_tensor(abs_t, comm, reduce) : TensorF{};
  for (std::size_t i = 0; i < ref.data.size(); ++i) {
    if (f32_bits(full.data[i]) == f32_bits(ref.data[i])) continue;
    if (differ++ == 0) first = i;
    if (!partial || !within_partial_bound(full.data[i], ref.data[i], abs_sum.data[i])) ++outside;
  }
  Outcome oc;
  oc.sqnr_db = sqnr(ref, full);
  if (differ == 0) {
    oc.verdict = RuleVerdict::correct;
  } else if (outside == 0) {
    oc.verdict = RuleVerdict::correct_partial;
    oc.detail = cat(out.name, ": the Partial sum of the ranks' bf16 outputs differs from one device in ", differ, " of ",
                    ref.data.size(), " elements, each within the rounding bound; SQNR ", fmt::format("{:.1f}", oc.sqnr_db), " dB");
  } else {
    oc.verdict = RuleVerdict::wrong_values;
    oc.detail = cat(out.name, " assembled as ", dtensor_str(claim), " differs from one device in ", differ, " of ",
                    ref.data.size(), " elements", partial ? cat(" (", outside, " beyond the Partial-sum rounding bound)") : "",
                    "; first at ", index_text(gshape, first), ": ", fmt::format("{:g}", full.data[first]), " vs ",
                    fmt::format("{:g}", ref.data[first]), "; SQNR ", fmt::format("{:.1f}", oc.sqnr_db), " dB");
  }
  return oc;
}

// Runs a strategy: each input redistributed from its placement to the strategy's, each rank's
// local op on its local tensors, each output judged; the op's verdict is its worst output's, the
// SQNR its lowest.
Outcome run_strategy(const RuleOp& op, Pass p, const Mesh& mesh, const MeshStrategy& st,
                     const std::vector<std::optional<Placements>>& in, const std::vector<std::optional<TensorF>>& global,
                     const std::vector<TensorF>& single) {
  FakeCommunicator comm(mesh);
  const ReduceOptions reduce{ReduceOrder::ascending, ReduceDtype::fp32};
  std::vector<std::optional<DTensor>> local(op.args.size());
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    if (!global[i]) continue;
    local[i] = redistribute(distribute(*global[i], *in[i], comm), *st.args[i], comm, reduce);
  }
  std::vector<std::vector<TensorF>> outs(static_cast<std::size_t>(mesh.world()));
  for (int r = 0; r < mesh.world(); ++r) {
    std::vector<const TensorF*> args;
    for (const auto& t : local) args.push_back(t ? &t->at(r) : nullptr);
    LocalResult res = run_local(op, p, args);
    if (auto* f = std::get_if<LocalFailure>(&res)) return {f->verdict, cat("rank ", r, ": ", f->why), kNaN};
    outs[static_cast<std::size_t>(r)] = std::move(std::get<std::vector<TensorF>>(res));
  }
  Outcome worst;
  for (std::size_t o = 0; o < op.outputs.size(); ++o) {
    const Outcome oc = judge_output(op.outputs[o], st.outs[o], outs, o, single[o], mesh, comm, reduce);
    if (oc.verdict == RuleVerdict::wrong_shape) return oc;  // a piece of the wrong shape: nothing more is judged
    const double low = o == 0 ? oc.sqnr_db : std::min(worst.sqnr_db, oc.sqnr_db);
    if (o == 0 || static_cast<int>(oc.verdict) > static_cast<int>(worst.verdict)) worst = oc;
    worst.sqnr_db = low;
  }
  return worst;
}

std::string strategies_text(const RuleOp& op, const std::vector<int>& pick) {
  std::string out;
  for (std::size_t d = 0; d < pick.size(); ++d) {
    out += (d ? " | " : "") + op.strategies[static_cast<std::size_t>(pick[d])].str(op.args);
  }
  return out;
}

std::uint64_t mix(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (a * 1315423911ull + b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The op's global arguments and its result on one device, for one (pass, shape set).
struct SingleDevice {
  std::vector<std::optional<TensorF>> args;
  std::vector<double> bytes;   // per argument, for DTensor's cost
  std::vector<TensorF> outputs;
};

SingleDevice single_device(const RuleOp& op, Pass p, const RuleShapes& sh, std::uint64_t seed, const std::string& table) {
  SingleDevice d;
  d.args = make_inputs(op, p, sh, seed);
  std::vector<const TensorF*> in;
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    in.push_back(d.args[i] ? &*d.args[i] : nullptr);
    d.bytes.push_back(d.args[i] ? element_bytes(op.args[i]) * static_cast<double>(d.args[i]->numel()) : 0);
  }
  LocalResult one = run_local(op, p, in);
  if (auto* f = std::get_if<LocalFailure>(&one)) {
    fail("rule table '", table, "': ", op.where, " (", op.name, "), ", pass_name(p), ": the op does not run on one device with ",
         sh.str(), ": ", f->why, ": fix the arguments' shapes");
  }
  d.outputs = std::move(std::get<std::vector<TensorF>>(one));
  for (std::size_t o = 0; o < op.outputs.size(); ++o) {
    if (d.outputs[o].shape != global_shape(op.outputs[o].shape.at(p), sh)) {
      fail("rule table '", table, "': ", op.where, ": ", pass_name(p), ": the output ", op.outputs[o].name, " is ",
           shape_expr_str(op.outputs[o].shape.at(p)), " but the op computes ", shape_text(d.outputs[o].shape));
    }
  }
  return d;
}

// The input placements of one case: the data arguments' as enumerated, each scale as its data,
// everything else Replicate. `inputs` says them: "a=[S(0)] b=[R]".
struct InputPlacements {
  std::vector<std::optional<Placements>> per_arg;
  std::string text;
};

// Every combination of placements of the op's data arguments on `mesh`, first argument outermost.
std::vector<InputPlacements> input_placements(const RuleOp& op, Pass p, const Mesh& mesh) {
  std::vector<std::size_t> data;
  std::map<std::size_t, std::size_t> follows;  // scale argument -> its data argument
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    const std::string& role = op.args[i].role;
    if (role == "lhs" || role == "rhs" || role == "input") data.push_back(i);
    if (role == "lhs_scale") follows[i] = arg_at(op, "lhs");
    if (role == "rhs_scale") follows[i] = arg_at(op, "rhs");
  }
  std::vector<std::vector<Placements>> options;
  for (std::size_t i : data) options.push_back(placement_options(static_cast<int>(op.args[i].shape.at(p).size()), mesh));
  std::vector<InputPlacements> out;
  std::vector<std::size_t> at(data.size(), 0);
  while (true) {
    InputPlacements c;
    c.per_arg.resize(op.args.size());
    for (std::size_t k = 0; k < data.size(); ++k) {
      c.per_arg[data[k]] = options[k][at[k]];
      c.text += cat(k ? " " : "", op.args[data[k]].name, "=", str(options[k][at[k]]));
    }
    for (const auto& [s, d] : follows) c.per_arg[s] = c.per_arg[d];
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      if (op.args[i].tensor && !c.per_arg[i]) c.per_arg[i] = replicated(mesh);
    }
    out.push_back(std::move(c));
    std::size_t k = at.size();
    while (k > 0 && ++at[k - 1] == options[k - 1].size()) at[--k] = 0;
    if (k == 0) break;
  }
  return out;
}

// Every case of one (pass, mesh, shape set); marks the single-dim strategies chosen.
void verify_cases(const RuleOp& op, Pass p, const Mesh& mesh, const RuleShapes& sh, const SingleDevice& one,
                  std::vector<int>& chosen, RuleVerifyReport& rep) {
  const std::vector<MeshStrategy> cands = expand(op, p, mesh, sh);
  std::map<int, Outcome> done;  // by chosen strategy: the outcome depends on it alone
  for (const InputPlacements& in : input_placements(op, p, mesh)) {
    RuleVerifyRow row;
    row.op = op.name;
    row.pass = p;
    row.mesh = mesh.str();
    row.shapes = sh.name;
    row.inputs = in.text;
    row.redistribution = "none";
    const Choice c = select(op, cands, in.per_arg, one.bytes, mesh);
    if (c.index < 0) {
      row.verdict = RuleVerdict::unreachable;
      row.detail = c.why_none;
      row.sqnr_db = kNaN;
      rep.rows.push_back(std::move(row));
      continue;
    }
    const MeshStrategy& st = cands[static_cast<std::size_t>(c.index)];
    for (int s : st.pick) {
      row.strategy.push_back(op.strategies[static_cast<std::size_t>(s)].number);
      chosen[static_cast<std::size_t>(s)] = 1;
    }
    row.strategy_text = strategies_text(op, st.pick);
    row.cost = c.cost;
    std::string moved;
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      const auto& from = in.per_arg[i];
      if (from && *from != *st.args[i]) moved += cat(moved.empty() ? "" : ", ", op.args[i].name, " ", str(*from), "->", str(*st.args[i]));
    }
    if (!moved.empty()) row.redistribution = moved;
    auto it = done.find(c.index);
    if (it == done.end()) it = done.emplace(c.index, run_strategy(op, p, mesh, st, in.per_arg, one.args, one.outputs)).first;
    row.verdict = it->second.verdict;
    row.detail = it->second.detail;
    row.sqnr_db = it->second.sqnr_db;
    rep.rows.push_back(std::move(row));
  }
}

void verify_op(const RuleOp& op, std::size_t op_index, const RuleVerifyOptions& opt, RuleVerifyReport& rep) {
  for (Pass p : op.passes) {
    std::vector<int> chosen(op.strategies.size(), 0);
    for (const std::string& mesh_text : opt.meshes) {
      const Mesh mesh = Mesh::parse(mesh_text);
      for (std::size_t si = 0; si < opt.shapes.size(); ++si) {
        const RuleShapes sh = opt.shapes[si].on(mesh);
        if (sh.size('E') * sh.n * sh.k > (std::int64_t{1} << 24)) {
          fail("shape set ", sh.name, " on ", mesh.str(), ": E*N*K = ", sh.size('E') * sh.n * sh.k,
               " elements per 3-D operand, over the verifier's 2^24 (every rank holds a copy): give fewer experts or "
               "smaller N, K");
        }
        const SingleDevice one = single_device(op, p, sh, mix(opt.seed, op_index * 8 + static_cast<std::uint64_t>(p), si), rep.table);
        verify_cases(op, p, mesh, sh, one, chosen, rep);
      }
    }
    for (std::size_t s = 0; s < op.strategies.size(); ++s) {
      const auto& ps = op.strategies[s].passes;
      if (chosen[s] || std::find(ps.begin(), ps.end(), p) == ps.end()) continue;
      const std::string why = not_applicable(op, op.strategies[s], p);
      rep.never_chosen.push_back(cat(op.name, " ", pass_name(p), ": ", op.strategies[s].str(op.args), ": ",
                                     why.empty() ? "never chosen (another strategy always wins)" : "not applicable: " + why));
    }
  }
}

}  // namespace

const char* rule_verdict_name(RuleVerdict v) {
  switch (v) {
    case RuleVerdict::correct: return "correct";
    case RuleVerdict::correct_partial: return "correct-partial";
    case RuleVerdict::wrong_shape: return "wrong-shape";
    case RuleVerdict::wrong_values: return "wrong-values";
    case RuleVerdict::unsafe: return "unsafe";
    case RuleVerdict::unreachable: return "unreachable";
  }
  return "?";
}

bool rule_verdict_is_defect(RuleVerdict v) {
  return v == RuleVerdict::wrong_shape || v == RuleVerdict::wrong_values || v == RuleVerdict::unsafe;
}

std::int64_t RuleShapes::size(char letter) const {
  switch (letter) {
    case 'M': return offs.empty() ? 0 : offs.back();
    case 'E': return static_cast<std::int64_t>(offs.size());
    case 'N': return n;
    case 'K': return k;
  }
  fail("no size for the letter ", letter);
}

std::string RuleShapes::str() const {
  std::string o;
  for (std::int32_t v : offs) o += (o.empty() ? "" : ",") + std::to_string(v);
  const auto nk = [](std::int64_t v) { return v ? std::to_string(v) : cat(kRuleBlock, "*max(4,ranks)"); };
  return cat("E=", offs.size(), " M=", size('M'), " offs=", o, " N=", nk(n), " K=", nk(k));
}

void check_rule_shapes(const RuleShapes& sh) {
  const std::string what = cat("shape set ", sh.name, " (", sh.str(), ")");
  if (sh.offs.empty() || sh.offs.size() > 64) fail(what, ": give 1 to 64 token-group ends (experts), e.g. --offs 20,20,45");
  std::int32_t prev = 0;
  for (std::int32_t v : sh.offs) {
    if (v < prev) fail(what, ": the offsets must be non-decreasing from 0 (each is where an expert's tokens end)");
    prev = v;
  }
  if (prev < 1 || prev > 8192) fail(what, ": M = ", prev, " tokens: give 1 to 8192");
  for (const auto& [name, v] : {std::pair{"N", sh.n}, std::pair{"K", sh.k}}) {
    if (v < 0 || v > 8192 || v % kRuleBlock != 0) {
      fail(what, ": ", name, " = ", v, ": give a multiple of ", kRuleBlock, " up to 8192 (0: ", kRuleBlock,
           " x max(4, ranks))");
    }
  }
}

RuleShapes RuleShapes::on(const Mesh& mesh) const {
  RuleShapes s = *this;
  const std::int64_t whole = static_cast<std::int64_t>(kRuleBlock) * std::max(4, mesh.world());
  if (s.n == 0) s.n = whole;
  if (s.k == 0) s.k = whole;
  return s;
}

std::vector<RuleShapes> default_rule_shapes() {
  return {{"E3-M45", {20, 20, 45}, 0, 0}, {"E4-M64", {16, 32, 48, 64}, 0, 0}};
}

std::vector<TensorF> run_rule_op(const RuleOp& op, Pass p, const std::vector<const TensorF*>& args) {
  LocalResult r = run_local(op, p, args);
  if (auto* f = std::get_if<LocalFailure>(&r)) fail(op.name, " ", pass_name(p), ": ", rule_verdict_name(f->verdict), ": ", f->why);
  return std::move(std::get<std::vector<TensorF>>(r));
}

std::vector<std::optional<TensorF>> rule_inputs(const RuleOp& op, Pass p, const RuleShapes& sh, std::uint64_t seed) {
  return make_inputs(op, p, sh, seed);
}

int RuleVerifyReport::defects() const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [](const RuleVerifyRow& r) { return rule_verdict_is_defect(r.verdict); }));
}

RuleVerifyReport verify_rules(const RuleTable& table, const RuleVerifyOptions& opt) {
  RuleVerifyReport rep;
  rep.table = table.path;
  rep.source = table.source;
  rep.seed = opt.seed;
  if (opt.meshes.empty()) fail("rules verify: no mesh to verify on: give one, e.g. tp=2");
  if (opt.shapes.empty()) fail("rules verify: no shape set to verify with: give token-group ends, e.g. --offs 20,20,45");
  for (const RuleShapes& sh : opt.shapes) check_rule_shapes(sh);
  for (const std::string& m : opt.meshes) {
    const int world = Mesh::parse(m).world();
    if (world < 2 || world > 16) {
      fail("--mesh ", m, ": ", world, " rank(s): verify on a mesh of 2 to 16 ranks, e.g. tp=2 or dp=2,tp=2 (N and K grow "
           "with the ranks so that shards hold whole blocks)");
    }
  }
  for (std::size_t i = 0; i < table.ops.size(); ++i) verify_op(table.ops[i], i, opt, rep);
  return rep;
}

}  // namespace fp8moe::sim
