// The three grouped passes: padding, quantization, and dispatch of each expert's GEMM to the mode.
#include <Eigen/Core>
#include <algorithm>

#include "reference/gemm.hpp"
#include "reference/grouped_plan.hpp"
#include "reference/groups.hpp"

namespace fp8moe {

bool is_quantized(Mode m) {
  return m == Mode::exact || m == Mode::torchao_emulated || m == Mode::promote_fp32 || m == Mode::hopper_tc;
}
bool is_promoted(Mode m) { return m == Mode::promote_fp32 || m == Mode::hopper_tc; }

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::fwd: return "fwd";
    case Pass::dgrad: return "dgrad";
    case Pass::wgrad: return "wgrad";
  }
  return "?";
}
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::hp64: return "hp64";
    case Mode::bf16: return "bf16";
    case Mode::exact: return "exact";
    case Mode::torchao_emulated: return "torchao-emulated";
    case Mode::promote_fp32: return "promote-fp32";
    case Mode::hopper_tc: return "hopper-tc";
  }
  return "?";
}
const char* promotion_name(Promotion p) { return p == Promotion::deepgemm ? "deepgemm" : "cublas"; }
const char* out_dtype_name(OutDtype d) {
  return d == OutDtype::bf16 ? "bf16" : d == OutDtype::fp32 ? "fp32" : "fp64";
}
std::string mode_label(Mode m, Promotion p) {
  return is_promoted(m) ? std::string(mode_name(m)) + ":" + promotion_name(p) : mode_name(m);
}
std::string ModeSpec::label() const { return mode_label(mode, promo); }

std::vector<ModeSpec> parse_mode_spec(const std::string& s) {
  const auto sep = s.find_first_of(":/");
  const Mode m = parse_mode(s.substr(0, sep));
  if (sep == std::string::npos) {
    if (is_promoted(m)) return {{m, Promotion::deepgemm}, {m, Promotion::cublas}};
    return {{m, Promotion::deepgemm}};
  }
  if (!is_promoted(m)) {
    fail("mode '", s, "': only promote-fp32 and hopper-tc take a promotion family (:deepgemm or :cublas); write '",
         s.substr(0, sep), "'");
  }
  return {{m, parse_promotion(s.substr(sep + 1))}};
}

Pass parse_pass(const std::string& s) {
  for (Pass p : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
    if (s == pass_name(p)) return p;
  }
  fail("unknown pass '", s, "': use fwd, dgrad or wgrad");
}
Mode parse_mode(const std::string& s) {
  for (Mode m : {Mode::hp64, Mode::bf16, Mode::exact, Mode::torchao_emulated, Mode::promote_fp32, Mode::hopper_tc}) {
    if (s == mode_name(m)) return m;
  }
  fail("unknown mode '", s, "': use hp64, bf16, exact, torchao-emulated, promote-fp32 or hopper-tc");
}
Promotion parse_promotion(const std::string& s) {
  if (s == "deepgemm") return Promotion::deepgemm;
  if (s == "cublas") return Promotion::cublas;
  fail("unknown promotion family '", s, "': use deepgemm or cublas");
}
OutDtype parse_out_dtype(const std::string& s) {
  if (s == "bf16") return OutDtype::bf16;
  if (s == "fp32") return OutDtype::fp32;
  if (s == "fp64") return OutDtype::fp64;
  fail("unknown output dtype '", s, "': use bf16, fp32 or fp64");
}

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapF = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Round every element to bf16 (identity on bf16-valued data).
TensorF to_bf16(const TensorF& x) {
  TensorF y = x;
  for (float& v : y.data) v = round_bf16(v);
  return y;
}

// Wide (fp64) grouped GEMM on high-precision values; with `round` the result is rounded once to
// the output dtype (the bf16 mode, like torch._grouped_mm), otherwise left in fp64 (hp64).
// Operand views: lhs rows of each expert (rows, kc) and rhs (cols, kc), given as Eigen maps.
OutDtype wide_out(const GemmOptions& opt) { return opt.mode == Mode::hp64 ? OutDtype::fp64 : opt.out; }

double round_to(double v, OutDtype d) {
  if (d == OutDtype::bf16) return round_bf16(v);
  if (d == OutDtype::fp32) return static_cast<double>(static_cast<float>(v));
  return v;
}

void round_all(TensorD& t, OutDtype d) {
  if (d == OutDtype::fp64) return;
  for (double& v : t.data) v = round_to(v, d);
}

TensorD wide_fwd(const TensorF& A, const TensorF& W, std::span<const std::int32_t> offs) {
  const std::int64_t M = A.dim(0), K = A.dim(1), N = W.dim(1);
  TensorD out({M, N}, 0.0);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    const std::int64_t Me = offs[e] - s;
    if (Me > 0) {
      MapF a(A.ptr() + s * K, Me, K), w(W.ptr() + static_cast<std::int64_t>(e) * N * K, N, K);
      Eigen::Map<MatD>(out.ptr() + s * N, Me, N).noalias() = a.cast<double>() * w.cast<double>().transpose();
    }
    s = offs[e];
  }
  return out;
}

TensorD wide_dgrad(const TensorF& dOut, const TensorF& W, std::span<const std::int32_t> offs) {
  const std::int64_t M = dOut.dim(0), N = W.dim(1), K = W.dim(2);
  TensorD out({M, K}, 0.0);
  std::int64_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    const std::int64_t Me = offs[e] - s;
    if (Me > 0) {
      MapF g(dOut.ptr() + s * N, Me, N), w(W.ptr() + static_cast<std::int64_t>(e) * N * K, N, K);
      Eigen::Map<MatD>(out.ptr() + s * K, Me, K).noalias() = g.cast<double>() * w.cast<double>();
    }
    s = offs[e];
  }
  return out;
}

TensorD wide_wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs) {
  const std::int64_t N = dOut.dim(1), K = A.dim(1), E = static_cast<std::int64_t>(offs.size());
  TensorD out({E, N, K}, 0.0);
  std::vector<GemmTask> tasks;
  std::int64_t s = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t Me = offs[static_cast<std::size_t>(e)] - s;
    if (Me > 0) {
      MapF g(dOut.ptr() + s * N, Me, N), a(A.ptr() + s * K, Me, K);
      Eigen::Map<MatD>(out.ptr() + e * N * K, N, K).noalias() = g.cast<double>().transpose() * a.cast<double>();
    }
    s = offs[static_cast<std::size_t>(e)];
  }
  return out;
}

void check_shapes(const char* pass, const TensorF& act, const char* act_name, std::int64_t act_cols,
                  std::span<const std::int32_t> offs) {
  if (act.rank() != 2) fail(pass, ": ", act_name, " must be 2-D, got shape ", shape_str(act.shape));
  if (act.dim(1) != act_cols) {
    fail(pass, ": ", act_name, " has ", act.dim(1), " columns but the weight needs ", act_cols, " (shape ",
         shape_str(act.shape), ")");
  }
  check_offsets(offs, act.dim(0));
}

void check_weight(const char* pass, const TensorF& W, std::span<const std::int32_t> offs) {
  if (W.rank() != 3) fail(pass, ": W must be 3-D (E,N,K), got shape ", shape_str(W.shape));
  if (W.dim(0) != static_cast<std::int64_t>(offs.size())) {
    fail(pass, ": W has ", W.dim(0), " experts but offs has ", offs.size(), " entries");
  }
}

// Row-padding wrapper: runs `body` on the padded rows/offsets and unpads the (rows, C) result.
template <class Body>
TensorD with_padding(const GemmOptions& opt, std::span<const std::int32_t> offs, std::initializer_list<const TensorF*> acts,
                     Body body, bool unpad_output) {
  if (!opt.pad) {
    std::vector<const TensorF*> v(acts);
    return body(v, offs);
  }
  const PaddedGroups p = pad_groups(offs, opt.quant.block);
  // The zero-filled buffer has p.rows rows; the experts own the first padded_ends.back() of them,
  // and the passes see exactly those (offs[E-1] must equal the rows they are given).
  const std::vector<std::int32_t>& poffs = p.padded_ends;
  std::vector<TensorF> padded;
  std::vector<const TensorF*> v;
  for (const TensorF* a : acts) {
    TensorF t = pad_rows(*a, offs, p);
    t.shape[0] = poffs.back();
    t.data.resize(static_cast<std::size_t>(poffs.back() * t.shape[1]));
    padded.push_back(std::move(t));
  }
  for (const TensorF& a : padded) v.push_back(&a);
  TensorD out = body(v, std::span<const std::int32_t>(poffs));
  return unpad_output ? unpad_rows(out, offs, p) : out;
}

// A plan's GEMMs on the CPU, all experts in one parallel region.
TensorD run_plan(const GroupedPlan& plan, const GemmOptions& opt) {
  TensorD out(plan.out_shape, 0.0);
  std::vector<GemmTask> tasks;
  for (const ExpertGemm& g : plan.gemms) tasks.push_back({g.L, g.R, g.kc, out.ptr() + g.out_offset, g.ldc, g.splits});
  block_gemm_batch(tasks, opt);
  return out;
}

void check_q_mode(const GemmOptions& opt) {
  if (opt.mode != Mode::exact && !is_promoted(opt.mode)) {
    fail("the quantized-operand passes compute exact, promote-fp32 and hopper-tc, not ", mode_name(opt.mode));
  }
  const std::string why = mode_unsupported(opt);
  if (!why.empty()) fail(why);
}


}  // namespace

std::string mode_unsupported(const GemmOptions& opt) {
  if (opt.mode != Mode::hopper_tc || opt.promotion != Promotion::cublas) return {};
  if (opt.quant.block != 128) {
    return cat("hopper-tc:cublas models cuBLASLt, whose block scaling is 128 wide, not block ", opt.quant.block,
               ": use block 128, or hopper-tc:deepgemm for a kernel promoting every ", opt.quant.block, " elements");
  }
  if (opt.quant.format != Fp8Format::e4m3) {
    return "hopper-tc:cublas models cuBLASLt, which has no e5m2 x e5m2 GEMM: use format e4m3, or hopper-tc:deepgemm";
  }
  return {};
}

int splits_of(const GemmOptions& opt, std::size_t e) {
  if (opt.split_k.empty()) return 1;
  if (opt.split_k.size() <= e) fail("split_k has ", opt.split_k.size(), " entries but expert ", e, " needs one");
  const int s = opt.split_k[e];
  if (s < 1) fail("split_k[", e, "] = ", s, ": a split count is >= 1");
  return s;
}

TensorD grouped_fwd_q(const Quantized& A_q, const Quantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt) {
  check_q_mode(opt);
  return run_plan(plan_grouped(Pass::fwd, operand(A_q), operand(W_q), offs, opt), opt);
}

TensorD grouped_dgrad_q(const Quantized& dOut_q, const Quantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt) {
  check_q_mode(opt);
  return run_plan(plan_grouped(Pass::dgrad, operand(dOut_q), operand(W_q), offs, opt), opt);
}

TensorD grouped_wgrad_q(const Quantized& dOutT_q, const Quantized& A_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt) {
  check_q_mode(opt);
  return run_plan(plan_grouped(Pass::wgrad, operand(dOutT_q), operand(A_q), offs, opt), opt);
}

TensorD grouped_fwd(const TensorF& A, const TensorF& W, std::span<const std::int32_t> offs, const GemmOptions& opt) {
  check_weight("fwd", W, offs);
  check_shapes("fwd", A, "A", W.dim(2), offs);
  auto body = [&](const std::vector<const TensorF*>& v, std::span<const std::int32_t> o) -> TensorD {
    const TensorF& a = *v[0];
    switch (opt.mode) {
      case Mode::hp64: return wide_fwd(a, W, o);
      case Mode::bf16: {
        TensorD r = wide_fwd(to_bf16(a), to_bf16(W), o);
        round_all(r, wide_out(opt));
        return r;
      }
      case Mode::torchao_emulated: {
        TensorD r = wide_fwd(dequantize_bf16(quantize_act_lhs(a, opt.quant)),
                             dequantize_bf16(quantize_grouped_weight(W, WeightOrientation::fwd, opt.quant)), o);
        round_all(r, wide_out(opt));
        return r;
      }
      default:
        return grouped_fwd_q(quantize_act_lhs(a, opt.quant),
                             quantize_grouped_weight(W, WeightOrientation::fwd, opt.quant), o, opt);
    }
  };
  return with_padding(opt, offs, {&A}, body, true);
}

TensorD grouped_dgrad(const TensorF& dOut, const TensorF& W, std::span<const std::int32_t> offs,
                      const GemmOptions& opt) {
  check_weight("dgrad", W, offs);
  check_shapes("dgrad", dOut, "dOut", W.dim(1), offs);
  auto body = [&](const std::vector<const TensorF*>& v, std::span<const std::int32_t> o) -> TensorD {
    const TensorF& g = *v[0];
    switch (opt.mode) {
      case Mode::hp64: return wide_dgrad(g, W, o);
      case Mode::bf16: {
        TensorD r = wide_dgrad(to_bf16(g), to_bf16(W), o);
        round_all(r, wide_out(opt));
        return r;
      }
      case Mode::torchao_emulated: {
        // The dgrad weight quantization is the exact transpose of the forward one (reference/SPEC.md 4.2),
        // so dequantizing the forward orientation gives the same values.
        TensorD r = wide_dgrad(dequantize_bf16(quantize_act_lhs(g, opt.quant)),
                               dequantize_bf16(quantize_grouped_weight(W, WeightOrientation::fwd, opt.quant)), o);
        round_all(r, wide_out(opt));
        return r;
      }
      default:
        return grouped_dgrad_q(quantize_act_lhs(g, opt.quant),
                               quantize_grouped_weight(W, WeightOrientation::dgrad, opt.quant), o, opt);
    }
  };
  return with_padding(opt, offs, {&dOut}, body, true);
}

TensorD grouped_wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs,
                      const GemmOptions& opt) {
  check_shapes("wgrad", dOut, "dOut", dOut.dim(1), offs);
  check_shapes("wgrad", A, "A", A.dim(1), offs);
  auto body = [&](const std::vector<const TensorF*>& v, std::span<const std::int32_t> o) -> TensorD {
    const TensorF& g = *v[0];
    const TensorF& a = *v[1];
    switch (opt.mode) {
      case Mode::hp64: return wide_wgrad(g, a, o);
      case Mode::bf16: {
        TensorD r = wide_wgrad(to_bf16(g), to_bf16(a), o);
        round_all(r, wide_out(opt));
        return r;
      }
      case Mode::torchao_emulated: {
        // dOut^T quantized 1x128 along tokens: its dequantization is (N, M); transpose back.
        const TensorF gt = dequantize_bf16(quantize_kgrouped_lhs(g, o, opt.quant));
        TensorF gd({g.dim(0), g.dim(1)});
        for (std::int64_t n = 0; n < gt.dim(0); ++n) {
          for (std::int64_t m = 0; m < gt.dim(1); ++m) gd(m, n) = gt(n, m);
        }
        TensorD r = wide_wgrad(gd, dequantize_bf16(quantize_kgrouped_rhs(a, o, opt.quant)), o);
        round_all(r, wide_out(opt));
        return r;
      }
      default:
        return grouped_wgrad_q(quantize_kgrouped_lhs(g, o, opt.quant), quantize_kgrouped_rhs(a, o, opt.quant), o,
                               opt);
    }
  };
  return with_padding(opt, offs, {&dOut, &A}, body, false);
}

}  // namespace fp8moe
