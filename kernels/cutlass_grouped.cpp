// The CUTLASS block-scaled grouped passes (see cutlass_grouped.hpp for the operand mapping).
#include "kernels/cutlass_grouped.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <vector>

#include "kernels/cutlass_gemm.hpp"
#include "kernels/cutlass_units.hpp"
#include "kernels/scale_layout.hpp"
#include "reference/grouped_plan.hpp"
#include "reference/groups.hpp"

namespace fp8moe::kernels {

// The launch functions of kernels/cutlass_kernels.def's lines, each defined in its generated
// translation unit (FP8MOE_CUTLASS_DEFINE).
#define FP8MOE_CUTLASS_KERNEL(kind, schedule, fold, cluster, tile_n, outputs, sass)                        \
  void FP8MOE_CUTLASS_FN(kind, schedule, fold, cluster, tile_n, sass)(                                   \
      const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s,     \
      cudaStream_t stream, const std::string& what);
#include "kernels/cutlass_kernels.def"
#undef FP8MOE_CUTLASS_KERNEL

namespace {

// The .def's lines, and their launch functions in the same order.
#define FP8MOE_CUTLASS_KERNEL(kind, schedule, fold, cluster, tile_n, outputs, sass)                               \
  CutlassBuiltKernel{ScaleKind::kind,                                                                             \
                     CutlassKernel{CutlassSchedule::schedule, CutlassFold::fold, CutlassRaster::along_m, 1,       \
                                   CutlassCluster::cluster, tile_n, CutlassSass::sass},                           \
                     FP8MOE_CUTLASS_FP32_##outputs},
const CutlassBuiltKernel kBuilt[] = {
#include "kernels/cutlass_kernels.def"
};
#undef FP8MOE_CUTLASS_KERNEL
#define FP8MOE_CUTLASS_KERNEL(kind, schedule, fold, cluster, tile_n, outputs, sass) \
  &FP8MOE_CUTLASS_FN(kind, schedule, fold, cluster, tile_n, sass),
const CutlassLaunch kLaunch[] = {
#include "kernels/cutlass_kernels.def"
};
#undef FP8MOE_CUTLASS_KERNEL
static_assert(std::size(kBuilt) == std::size(kLaunch));

// The index of the kernel that runs `k` for `kind` and output `out`, or -1. Raster and swizzle are
// launch arguments: every built kernel takes any, and kBuilt lists each with along_m and 1.
std::ptrdiff_t find_unit(ScaleKind kind, CutlassKernel k, OutDtype out) {
  k.raster = CutlassRaster::along_m;
  k.swizzle = 1;
  for (std::size_t i = 0; i < std::size(kBuilt); ++i) {
    const CutlassBuiltKernel& u = kBuilt[i];
    if (u.kind == kind && u.kernel == k && (out == OutDtype::bf16 || (out == OutDtype::fp32 && u.fp32))) {
      return static_cast<std::ptrdiff_t>(i);
    }
  }
  return -1;
}

// Each enum value's names, indexed by the value: its short code (cutlass_short_name) and its
// words (cutlass_config_name). One table per enum, so a new value is named in one place.
struct Names {
  const char* code;
  const char* words;
};
constexpr Names kScheduleNames[] = {{"co", "cooperative"}, {"pp", "ping-pong"}};
constexpr Names kFoldNames[] = {{"cl", "fold after each wgmma"},
                                {"ov", "fold under the next wgmma"},
                                {"f1", "fold after each wgmma (fp8moe's mainloop)"},
                                {"hv", "fold each half under the other's wgmma (fp8moe's mainloop)"}};
constexpr Names kSassNames[] = {{"", "SASS as compiled"},
                                {"ya", "every fold FFMA yielding"},
                                {"yn", "no fold FFMA yielding"},
                                {"yh", "the fold's first half of FFMAs yielding"}};
static_assert(std::size(kScheduleNames) == static_cast<std::size_t>(CutlassSchedule::pingpong) + 1);
static_assert(std::size(kFoldNames) == static_cast<std::size_t>(CutlassFold::under_other_half) + 1);
static_assert(std::size(kSassNames) == static_cast<std::size_t>(CutlassSass::yield_head) + 1);

template <typename Enum, std::size_t N>
const Names& names_of(const Names (&table)[N], Enum e) {
  const auto i = static_cast<std::size_t>(e);
  if (i >= N) fail("cutlass: enum value ", i, " has no name (kernels/cutlass_grouped.cpp's name tables)");
  return table[i];
}

// The M extent of a CTA's tile: each ping-pong warpgroup owns a 64-row tile, the cooperative
// schedules' two warpgroups share a 128-row one.
int tile_m(CutlassSchedule s) { return s == CutlassSchedule::pingpong ? 64 : 128; }

}  // namespace

const char* cutlass_schedule_name(CutlassSchedule s) { return names_of(kScheduleNames, s).words; }
const char* cutlass_fold_name(CutlassFold f) { return names_of(kFoldNames, f).words; }
const char* cutlass_raster_name(CutlassRaster r) { return r == CutlassRaster::along_n ? "along N" : "along M"; }
const char* cutlass_cluster_name(CutlassCluster c) { return c == CutlassCluster::m2n1 ? "2x1x1" : "1x2x1"; }
const char* cutlass_sass_name(CutlassSass s) { return names_of(kSassNames, s).words; }

std::span<const CutlassBuiltKernel> cutlass_built_kernels() { return kBuilt; }

bool cutlass_built(ScaleKind kind, const CutlassKernel& k, OutDtype out) { return find_unit(kind, k, out) >= 0; }

void cutlass_grouped_gemm(ScaleKind kind, const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups,
                          CutlassScratch& s, cudaStream_t stream, const std::string& what) {
  if (k.swizzle != 1 && k.swizzle != 2 && k.swizzle != 4 && k.swizzle != 8) {
    fail(what, ": CUTLASS's tile scheduler swizzles by 1, 2, 4 or 8 tiles, not ", k.swizzle);
  }
  const std::ptrdiff_t u = find_unit(kind, k, out);
  if (u < 0) {
    std::string built;
    for (const CutlassBuiltKernel& b : kBuilt) {
      if (b.kind != kind) continue;
      built += cat(built.empty() ? "" : "; ", cutlass_short_name(b.kernel, false), b.fp32 ? " (bf16, fp32)" : " (bf16)");
    }
    fail(what, ": the CUTLASS kernel ", cutlass_config_name(kind, k), " is not built for ", out_dtype_name(out),
         " output (built for these scales, any raster and swizzle: ", built, "; kernels/cutlass_kernels.def lists them)");
  }
  kLaunch[u](k, out, groups, s, stream, what);
}

std::string cutlass_unsupported(const QuantOptions& q, OutDtype out) {
  if (q.format != Fp8Format::e4m3) return "the cuda-cutlass passes are built for e4m3 operands, not e5m2";
  if (q.block != 128) return cat("CUTLASS's blockwise FP8 GEMM here is 1x128 / 128x128 only, not block ", q.block);
  if (out == OutDtype::fp64) return "the CUTLASS FP8 GEMM writes bf16 or fp32, not fp64";
  return {};
}

std::string cutlass_config_name(ScaleKind kind, const CutlassKernel& k) {
  return cat("tile ", tile_m(k.schedule), "x", k.tile_n, "x128, cluster ",
             cutlass_cluster_name(k.cluster), ", ",
             cutlass_schedule_name(k.schedule), ", ", cutlass_fold_name(k.fold), ", raster ", cutlass_raster_name(k.raster),
             " swizzle ", k.swizzle, k.sass == CutlassSass::as_compiled ? "" : cat(", ", cutlass_sass_name(k.sass)),
             ", scales ", kind == ScaleKind::act_weight ? "1x128 x 128x128" : "1x128 x 1x128");
}

std::string cutlass_short_name(const CutlassKernel& k, bool walk) {
  const char* sass = names_of(kSassNames, k.sass).code;
  return cat(names_of(kScheduleNames, k.schedule).code, "/", names_of(kFoldNames, k.fold).code,
             walk ? cat("/", k.raster == CutlassRaster::along_n ? "N" : "M", k.swizzle) : std::string(),
             k.cluster == CutlassCluster::m2n1 ? "/2x1" : "", k.tile_n != 128 ? cat("/n", k.tile_n) : std::string(),
             *sass != '\0' ? "/" : "", sass);
}

CutlassKernel cutlass_choose(ScaleKind kind, OutDtype out, std::int64_t m, std::int64_t n) {
  CutlassKernel k;
  k.schedule = CutlassSchedule::cooperative;
  if (out != OutDtype::bf16) {
    k.fold = CutlassFold::after_mma;
  } else if (kind == ScaleKind::act_weight) {
    k.fold = CutlassFold::after_mma_own;
    k.cluster = CutlassCluster::m2n1;
    k.tile_n = 192;
  } else {
    k.fold = CutlassFold::under_other_half;
    k.cluster = CutlassCluster::m2n1;
    k.tile_n = 192;
  }
  k.raster = m <= n ? CutlassRaster::along_m : CutlassRaster::along_n;
  k.swizzle = k.raster == CutlassRaster::along_m ? 2 : 1;
  return k;
}

struct CutlassGrouped::State {
  CutlassScratch scratch;
  ScaleScratch scales;  // the relaid scales (0: CUTLASS A's, 1: B's)
  std::vector<CutlassGroup> groups;
};

namespace {

int as_int(std::int64_t v, const char* what, const char* pass) {
  if (v > std::numeric_limits<int>::max()) fail("cutlass ", pass, ": ", what, " = ", v, " exceeds CUTLASS's int problem dims");
  return static_cast<int>(v);
}

}  // namespace

CutlassGrouped::CutlassGrouped() : s_(std::make_unique<State>()) {}
CutlassGrouped::~CutlassGrouped() = default;

std::int64_t CutlassGrouped::reused_launches() const { return s_->scratch.reused; }

void CutlassGrouped::run(Pass pass, const DeviceQuantized& lhs, const DeviceQuantized& rhs,
                         std::span<const std::int32_t> offs, const GemmOptions& opt, void* out, cudaStream_t stream) {
  const char* pn = pass_name(pass);
  const std::string why = cutlass_unsupported(opt.quant, opt.out);
  if (!why.empty()) fail("cutlass ", pn, ": ", why);
  if (lhs.format != Fp8Format::e4m3 || rhs.format != Fp8Format::e4m3) {
    fail("cutlass ", pn, ": operands are ", format_name(lhs.format), "/", format_name(rhs.format), ", not e4m3");
  }
  if (pass == Pass::wgrad && rhs.recipe != Recipe::kgrouped_lhs) {
    require_recipe(rhs.recipe, Recipe::kgrouped_lhs, "cutlass wgrad: A^T (CUTLASS's TN: A as (K, M))");
  }
  const GroupedPlan plan = plan_grouped(pass, operand(lhs), operand(rhs), offs, opt);
  const QuantLayout &ll = lhs.layout, &rl = rhs.layout;
  const std::int64_t kc = ll.cols, width = rl.rows;  // fwd/dgrad: contraction, output width; wgrad: tokens, K
  if (pass == Pass::wgrad) check_kgroup_offsets(offs, kc, 128);
  const std::int64_t E = static_cast<std::int64_t>(offs.size());
  // The kernel (set_kernel's, or the backend's for the launch's shapes: the largest group's rows
  // and the first group's columns), chosen first: it decides B's scale layout below.
  const ScaleKind kind = pass == Pass::wgrad ? ScaleKind::act_act : ScaleKind::act_weight;
  std::int64_t m_max = 0, n_first = 0;
  for (const ExpertGemm& g : plan.gemms) {
    if (g.kc <= 0 || g.L.rows <= 0 || g.R.rows <= 0) continue;
    m_max = std::max(m_max, g.L.rows);
    if (n_first == 0) n_first = g.R.rows;
  }
  const CutlassKernel k = kernel_ ? *kernel_ : cutlass_choose(kind, opt.out, m_max, n_first);
  // Each expert's scale pointers: CUTLASS's MN-major layouts (B as quantized where the tiles straddle).
  std::vector<const float*> sfa(static_cast<std::size_t>(E)), sfb(static_cast<std::size_t>(E));
  if (pass != Pass::wgrad) {
    // A: 1x128 (M, kb) -> per expert (kb, M_e) at voff[e]; B: 128x128 (E, wb, kb) -> (E, kb, wb),
    // or as quantized for a kernel whose tiles straddle weight blocks (its launch repeats and
    // transposes them in one pass: cutlass_straddles).
    const std::int64_t kb = kc / 128, wb = width / 128;
    const std::vector<std::int64_t> voff = vec_scale_offsets(offs, kb);
    float* a_s = s_->scales.get(0, static_cast<std::size_t>(voff.back()));
    relayout_vec_scales(lhs.scales.get(), offs, kb, voff, a_s, stream);
    const float* b_s = rhs.scales.get();
    if (!cutlass_straddles(kind, k.tile_n)) {
      float* t = s_->scales.get(1, static_cast<std::size_t>(E * wb * kb));
      transpose_scales(rhs.scales.get(), wb, kb, t, stream, E);
      b_s = t;
    }
    for (std::int64_t e = 0; e < E; ++e) {
      sfa[static_cast<std::size_t>(e)] = a_s + voff[static_cast<std::size_t>(e)];
      sfb[static_cast<std::size_t>(e)] = b_s + e * wb * kb;
    }
  } else {
    // 1x128-along-tokens scales, transposed: MN-major per expert (CUTLASS A = dOut^T, B = A^T).
    const TokenBlockScales t =
        relay_token_block_scales(lhs.scales.get(), ll.rows, rhs.scales.get(), width, offs, kc / 128, s_->scales, stream);
    for (std::size_t e = 0; e < static_cast<std::size_t>(E); ++e) {
      sfa[e] = t.dout_of(e);
      sfb[e] = t.a_of(e);
    }
  }
  const std::size_t es = opt.out == OutDtype::bf16 ? 2 : 4;
  auto* o = static_cast<std::uint8_t*>(out);
  std::vector<CutlassGroup>& groups = s_->groups;
  groups.clear();
  for (const ExpertGemm& g : plan.gemms) {
    if (g.L.ks != 1 || g.R.ks != 1) {
      fail("cutlass ", pn, ": expert ", g.expert, "'s operands are not contiguous along the contraction (CUTLASS's TN)");
    }
    std::uint8_t* d = o + static_cast<std::size_t>(g.out_offset) * es;
    const std::int64_t m = g.L.rows, n = g.R.rows;
    if (g.kc > 0 && m > 0 && n > 0) {
      groups.push_back(CutlassGroup{as_int(m, "m", pn), as_int(n, "n", pn), as_int(g.kc, "k", pn), g.L.codes, g.L.rs,
                                    g.R.codes, g.R.rs, d, g.ldc, sfa[g.expert], sfb[g.expert]});
    } else if (pass == Pass::wgrad && m * n > 0) {
      // An empty expert's dW is zero, as on the CPU (a zero-length contraction).
      FP8MOE_CUDA_CHECK(cudaMemsetAsync(d, 0, static_cast<std::size_t>(m * n) * es, stream), "cutlass wgrad dW of empty expert ",
                        g.expert, " (", m, ",", n, ")");
    }
  }
  const std::string what = cat("cutlass ", pn, " (", groups.size(), " of ", E, " experts)");
  cutlass_grouped_gemm(kind, k, opt.out, groups, s_->scratch, stream, what);
  last_config_ = cat(cutlass_config_name(kind, k), ", ", groups.size(), " groups");
}

void CutlassGrouped::fwd(const DeviceQuantized& A_q, const DeviceQuantized& W_q, std::span<const std::int32_t> offs,
                         const GemmOptions& opt, void* out, cudaStream_t stream) {
  run(Pass::fwd, A_q, W_q, offs, opt, out, stream);
}

void CutlassGrouped::dgrad(const DeviceQuantized& dOut_q, const DeviceQuantized& W_q,
                           std::span<const std::int32_t> offs, const GemmOptions& opt, void* out, cudaStream_t stream) {
  run(Pass::dgrad, dOut_q, W_q, offs, opt, out, stream);
}

void CutlassGrouped::wgrad(const DeviceQuantized& dOutT_q, const DeviceQuantized& AT_q,
                           std::span<const std::int32_t> offs, const GemmOptions& opt, void* out, cudaStream_t stream) {
  run(Pass::wgrad, dOutT_q, AT_q, offs, opt, out, stream);
}

}  // namespace fp8moe::kernels
