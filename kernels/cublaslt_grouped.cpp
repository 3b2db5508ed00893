// The cuBLASLt block-scaled grouped passes (see cublaslt_grouped.hpp for the operand mapping).
#include "kernels/cublaslt_grouped.hpp"

#include <functional>

#include "kernels/cublaslt_check.hpp"
#include "kernels/scale_layout.hpp"
#include "reference/grouped_plan.hpp"
#include "reference/groups.hpp"

namespace fp8moe::kernels {

std::string cublaslt_unsupported(const QuantOptions& q, OutDtype out) {
  if (q.format != Fp8Format::e4m3) {
    return "cuBLASLt has no e5m2 x e5m2 FP8 GEMM; its block scaling runs e4m3 operands";
  }
  if (q.block != 128) return cat("cuBLASLt block scaling is 1x128 / 128x128 only, not block ", q.block);
  if (out == OutDtype::fp64) return "cuBLASLt FP8 GEMMs write bf16 or fp32, not fp64";
  return {};
}

const char* lt_reduction_name(std::int32_t scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE: return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE: return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: return "compute-type";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE: return "output-type";
    default: return "other";
  }
}

struct CublasLtGrouped::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::int32_t algo_id = 0, tile_id = 0, splits = 1, reduction = 0;  // read from `algo`
  std::int64_t m = 0, n = 0, k = 0;                                   // cuBLAS's m, n, k
  std::string shape;  // for messages
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

constexpr std::int32_t kVec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
constexpr std::int32_t kBlk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
constexpr std::int32_t kScalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;

const char* scale_mode_name(std::int32_t m) { return m == kBlk ? "128x128" : m == kVec ? "1x128" : "per-tensor"; }

void check_opt(const char* pass, const GemmOptions& opt, const DeviceQuantized& a, const DeviceQuantized& b) {
  const std::string why = cublaslt_unsupported(opt.quant, opt.out);
  if (!why.empty()) fail("cublaslt ", pass, ": ", why);
  if (a.format != Fp8Format::e4m3 || b.format != Fp8Format::e4m3) {
    fail("cublaslt ", pass, ": operands are ", format_name(a.format), "/", format_name(b.format), ", not e4m3");
  }
}

void check_rows(const char* pass, std::span<const std::int32_t> offs) {
  std::int32_t s = 0;
  for (std::size_t e = 0; e < offs.size(); ++e) {
    if ((offs[e] - s) % kLtRowMultiple != 0) {
      fail("cublaslt ", pass, ": expert ", e, " has ", offs[e] - s, " rows, not a multiple of ", kLtRowMultiple,
           " (cuBLASLt's 1x128 scale tensor): pad the token groups");
    }
    s = offs[e];
  }
}

// cuBLASLt's FP8 kernels want 16-byte aligned operands and leading dimensions.
void check_ld(const char* pass, const char* what, std::int64_t ld) {
  if (ld % 16 != 0) fail("cublaslt ", pass, ": ", what, " = ", ld, " is not a multiple of 16 (FP8 alignment)");
}

std::size_t out_elem(OutDtype d) { return d == OutDtype::bf16 ? 2 : 4; }

}  // namespace

CublasLtGrouped::CublasLtGrouped(std::size_t workspace_bytes) : workspace_(workspace_bytes) {
  FP8MOE_CUBLASLT_CHECK(cublasLtCreate(&handle_));
}

std::vector<std::int32_t> CublasLtGrouped::last_split_k(std::size_t experts) const {
  std::vector<std::int32_t> s(experts, 1);
  for (const LtCall& c : calls_) {
    if (c.expert >= 0 && static_cast<std::size_t>(c.expert) < experts) s[static_cast<std::size_t>(c.expert)] = c.splits;
  }
  return s;
}

CublasLtGrouped::~CublasLtGrouped() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

const float* CublasLtGrouped::unit_scale() {
  if (one_.size() == 0) one_ = DeviceBuffer<float>(std::vector<float>{1.0f});
  return one_.get();
}

CublasLtGrouped::Plan& CublasLtGrouped::plan(const Key& key, const char* pass, const float* a_scale,
                                              const float* b_scale) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [m, n, k, lda, ldb, ldd, amode, bmode, dtype] = key;
  auto p = std::make_unique<Plan>();
  p->m = m;
  p->n = n;
  p->k = k;
  p->shape = cat(pass, " m=", m, " n=", n, " k=", k, " lda=", lda, " ldb=", ldb, " ldd=", ldd,
                 " A scale ", scale_mode_name(amode), ", B scale ", scale_mode_name(bmode), ", D ",
                 dtype == CUDA_R_16BF ? "bf16" : "fp32");
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), p->shape);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), p->shape);
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), p->shape);
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode),
                        p->shape);
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode),
                        p->shape);
  // The heuristic rejects a block-scaled mode without its scale pointer (CUBLAS_STATUS_INVALID_VALUE,
  // "requires a custom pointer", seen on the H200 and in NVIDIA/CUDALibrarySamples#274): give it the
  // first call's pointers; every call sets its own.
  FP8MOE_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale), p->shape);
  FP8MOE_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale), p->shape);
  // A stored k x m (ld lda), B stored k x n (ld ldb), D m x n (ld ldd), all column-major.
  FP8MOE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, k, m, lda), p->shape);
  FP8MOE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, k, n, ldb), p->shape);
  FP8MOE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&p->d, static_cast<cudaDataType_t>(dtype), m, n, ldd), p->shape);

  cublasLtMatmulPreference_t pref = nullptr;
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref), p->shape);
  const std::size_t ws = workspace_.bytes();
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->d, p->d, pref, 1, &res, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublaslt_fail(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__, p->shape);
  }
  if (found == 0) fail("cuBLASLt found no algorithm for ", p->shape, " (workspace ", ws, " bytes)");
  p->algo = res.algo;
  // The split-K count and reduction of the chosen algorithm decide its arithmetic (see LtCall).
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, std::int32_t& v, const char* name) {
    std::size_t written = 0;
    const cublasStatus_t s2 = cublasLtMatmulAlgoConfigGetAttribute(&p->algo, attr, &v, sizeof v, &written);
    if (s2 != CUBLAS_STATUS_SUCCESS) cublaslt_fail(s2, "cublasLtMatmulAlgoConfigGetAttribute", __FILE__, __LINE__, name, " of ", p->shape);
  };
  get(CUBLASLT_ALGO_CONFIG_ID, p->algo_id, "CUBLASLT_ALGO_CONFIG_ID");
  get(CUBLASLT_ALGO_CONFIG_TILE_ID, p->tile_id, "CUBLASLT_ALGO_CONFIG_TILE_ID");
  get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, p->splits, "CUBLASLT_ALGO_CONFIG_SPLITK_NUM");
  get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, p->reduction, "CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME");
  if (p->splits < 1) p->splits = 1;
  Plan& ref = *p;
  plans_.emplace(key, std::move(p));
  return ref;
}

void CublasLtGrouped::matmul(Plan& p, const void* a, const float* a_scale, const void* b, const float* b_scale,
                             void* d, cudaStream_t stream, const char* pass, std::int64_t expert) {
  // The descriptor is shared by the experts of one shape: the scale pointers are set before each
  // call, which reads them when it enqueues.
  FP8MOE_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale), p.shape);
  FP8MOE_CUBLASLT_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale), p.shape);
  calls_.push_back(LtCall{expert, p.m, p.n, p.k, p.algo_id, p.tile_id, p.splits, p.reduction});
  const float alpha = 1.0f, beta = 0.0f;
  FP8MOE_CUBLASLT_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo,
                                       workspace_.get(), workspace_.bytes(), stream),
                        pass, " expert ", expert, ": ", p.shape);
}

namespace {

// cuBLASLt's FP8 GEMMs are TN: both operands contiguous along the contraction (k stride 1).
void check_tn(const char* pass, const char* what, const BlockOperand& v) {
  if (v.ks != 1) {
    fail("cublaslt ", pass, ": ", what, " is not contiguous along the contraction (stride ", v.ks,
         "): cuBLASLt's FP8 GEMMs are TN only; quantize wgrad's A as A^T (kgrouped-lhs)");
  }
}

}  // namespace

// Every pass is reference/grouped_plan.hpp's plan (the CPU and simt passes' operand checks, expert
// loop and views); cuBLASLt adds its own preconditions and reads each expert's GEMM off the views,
// the same way for the three passes: cuBLAS A = the plan's R (m = R.rows, lda = R.rs), cuBLAS B =
// the plan's L (n = L.rows, ldb = L.rs), k = kc, D at out_offset with ldd = ldc. Only the scales
// differ per pass: relaid once into cuBLASLt's layouts, then addressed per expert.
void CublasLtGrouped::run(Pass pass, const DeviceQuantized& lhs, const DeviceQuantized& rhs,
                          std::span<const std::int32_t> offs, const GemmOptions& opt, void* out, cudaStream_t stream,
                          LtScaling scaling) {
  calls_.clear();
  const char* pn = pass_name(pass);
  check_opt(pn, opt, lhs, rhs);
  if (pass == Pass::wgrad && rhs.recipe != Recipe::kgrouped_lhs) {
    require_recipe(rhs.recipe, Recipe::kgrouped_lhs, "cublaslt wgrad: A^T (cuBLASLt is TN: A as (K, M))");
  }
  const GroupedPlan grouped = plan_grouped(pass, operand(lhs), operand(rhs), offs, opt);
  const std::int64_t E = static_cast<std::int64_t>(offs.size());
  const QuantLayout &ll = lhs.layout, &rl = rhs.layout;
  // fwd/dgrad: the contraction (K, N) and the output width (N, K); wgrad: the tokens and K.
  const std::int64_t kc = ll.cols, width = rl.rows;
  if (pass == Pass::wgrad) {
    check_kgroup_offsets(offs, ll.cols, 128);
    check_ld(pn, "M (tokens)", ll.cols);
    check_ld(pn, "K", rl.rows);
  } else {
    check_rows(pn, offs);
    check_ld(pn, "K", pass == Pass::fwd ? kc : width);
    check_ld(pn, "N", pass == Pass::fwd ? width : kc);
  }
  const bool blk = scaling == LtScaling::block;
  // Per-expert scale pointers into the relaid buffers: cuBLAS A's (the plan's R) and B's (L).
  std::function<const float*(const ExpertGemm&)> scale_a, scale_b;
  std::int32_t amode = kScalar, bmode = kScalar;
  if (blk && pass != Pass::wgrad) {
    // 128x128 weight scales (E, width/128, kc/128) -> cuBLASLt's BLK128x128 (a pitch per row of
    // blocks); 1x128 activation scales (M, kc/128) -> VEC128 per expert (voff[e] its start).
    const std::int64_t kb = kc / 128, wb = width / 128, pitch = blk_scale_pitch(kb);
    const std::vector<std::int64_t> voff = vec_scale_offsets(offs, kb);
    float* a_s = scratch_.get(0, static_cast<std::size_t>(E * wb * pitch));
    float* b_s = scratch_.get(1, static_cast<std::size_t>(voff.back()));
    relayout_blk_scales(rhs.scales.get(), E * wb, kb, a_s, stream);
    relayout_vec_scales(lhs.scales.get(), offs, kb, voff, b_s, stream);
    scale_a = [=](const ExpertGemm& g) { return a_s + static_cast<std::int64_t>(g.expert) * wb * pitch; };
    scale_b = [=](const ExpertGemm& g) { return b_s + voff[g.expert]; };
    amode = kBlk;
    bmode = kVec;
  } else if (blk) {
    // 1x128-along-tokens scales, transposed: cuBLASLt's VEC128 layout for every expert at once.
    const TokenBlockScales t =
        relay_token_block_scales(lhs.scales.get(), ll.rows, rhs.scales.get(), width, offs, kc / 128, scratch_, stream);
    scale_a = [t](const ExpertGemm& g) { return t.a_of(g.expert); };
    scale_b = [t](const ExpertGemm& g) { return t.dout_of(g.expert); };
    amode = bmode = kVec;
  } else {
    scale_a = scale_b = [this](const ExpertGemm&) { return unit_scale(); };
  }
  const int dtype = opt.out == OutDtype::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const std::size_t es = out_elem(opt.out);
  auto* o = static_cast<std::uint8_t*>(out);
  for (const ExpertGemm& g : grouped.gemms) {
    check_tn(pn, pass == Pass::wgrad ? "dOut^T" : "the activation operand", g.L);
    check_tn(pn, pass == Pass::wgrad ? "A^T" : "W", g.R);
    std::uint8_t* d = o + static_cast<std::size_t>(g.out_offset) * es;
    const std::int64_t n = g.L.rows, m = g.R.rows;
    if (g.kc > 0 && n > 0 && m > 0) {
      const float *sa = scale_a(g), *sb = scale_b(g);
      Plan& p = plan({m, n, g.kc, g.R.rs, g.L.rs, g.ldc, amode, bmode, dtype}, pn, sa, sb);
      matmul(p, g.R.codes, sa, g.L.codes, sb, d, stream, pn, static_cast<std::int64_t>(g.expert));
    } else if (pass == Pass::wgrad && m * n > 0) {
      // An empty expert's dW is zero, as on the CPU (a zero-length contraction).
      FP8MOE_CUDA_CHECK(cudaMemsetAsync(d, 0, static_cast<std::size_t>(m * n) * es, stream), "wgrad dW of empty expert ",
                        g.expert, " (", n, ",", m, ")");
    }
  }
}

void CublasLtGrouped::fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                          const GemmOptions& opt, void* out, cudaStream_t stream, LtScaling scaling) {
  run(Pass::fwd, A_q, W_q, offs, opt, out, stream, scaling);
}

void CublasLtGrouped::dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q,
                            std::span<const std::int32_t> offs, const GemmOptions& opt, void* out,
                            cudaStream_t stream, LtScaling scaling) {
  run(Pass::dgrad, dOut_q, W_q, offs, opt, out, stream, scaling);
}

void CublasLtGrouped::wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& AT_q,
                            std::span<const std::int32_t> offs, const GemmOptions& opt, void* out,
                            cudaStream_t stream, LtScaling scaling) {
  run(Pass::wgrad, dOutT_q, AT_q, offs, opt, out, stream, scaling);
}

}  // namespace fp8moe::kernels
