#pragma once
// The CUTLASS grouped blockwise-FP8 GEMM behind kernels/cutlass_gemm.hpp, one template for every
// configuration; CMake generates one translation unit per line of kernels/cutlass_kernels.def, each
// instantiating it (FP8MOE_CUTLASS_DEFINE below), so that the build compiles them in parallel.
//
// Arithmetic (what reference/'s hopper-tc model must reproduce): per 128-K block the tensor cores
// chain four k32 wgmma steps from zero into a partial P (ScaleOut::Zero, then One), and the
// collective folds P into the fp32 accumulator:
//   act_weight (per-row A scales, one B scale per tile): s = fl(sa * sb), acc = fma(P, s, acc)
//   act_act (per-row scales on both): acc = fma(fl(P * sa), sb, acc)
// (cutlass/gemm/collective/fp8_accumulation.hpp scale_core; the FFMA needs nvcc's default
// --fmad=true, which is why this library is compiled apart from fp8moe_kernels). The epilogue
// writes alpha * acc with alpha = 1 and no C, rounded once to the output type (RN).
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/numeric_types.h>
#include <cutlass/util/packed_stride.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>

#include "kernels/cutlass_gemm.hpp"
#include "kernels/cutlass_overlap.cuh"
#include "kernels/cutlass_units.hpp"
#include "reference/error.hpp"

namespace fp8moe::kernels::cutlass_impl {

using namespace cute;

// One configuration: the scales (act_weight: B one scale per 128x128 tile; act_act: per row), the
// output element, the schedule (cooperative 128 x kTileN x 128 or ping-pong 64 x kTileN x 128
// tiles), the mainloop (CUTLASS's collective, or fp8moe's with two partials, the fold under the
// next wgmma, or one: cutlass_overlap.cuh) and the cluster (1x2x1: two CTAs of neighbouring N
// tiles share A's TMA loads by multicast; 2x1x1: two of neighbouring M tiles share B's). kSass
// names the fold's scheduling bits that the build writes into the unit's SASS after nvcc
// (scripts/sass_fold_yield.py; kernels/CMakeLists.txt): a tag in the mainloop's type, so that a
// patched kernel is a kernel of its own name, never merged with the unpatched one at link time.
template <ScaleKind kKind, class ElementD, CutlassSchedule kSchedule, CutlassFold kFold, CutlassCluster kCluster,
          int kTileN, CutlassSass kSass>
struct Config {
  static constexpr bool kPingpong = kSchedule == CutlassSchedule::pingpong;
  // act_weight's B scales come one per 128 columns; CUTLASS's collective needs the tile width to be
  // a multiple of the scales' column granularity, so a tile whose width is not a multiple of 128
  // (160, 192: it straddles two 128x128 weight blocks) reads them at gcd(width, 128) columns, each
  // weight-block scale repeated 128 / gcd times (expand_block_scales, run below), and fp8moe's
  // one-partial mainloop folds them with act_weight's arithmetic (cutlass_overlap.cuh).
  static_assert(kTileN % 16 == 0 && kTileN <= 256, "a wgmma tile width (a multiple of 16 up to 256)");
  static constexpr int kScaleN = kKind == ScaleKind::act_weight ? std::gcd(kTileN, 128) : 1;
  static constexpr bool kExpandB = cutlass_straddles(kKind, kTileN);
  static_assert(!kExpandB || cutlass_straddling_verified(kTileN),
                "a weight tile straddling 128x128 blocks at a width not verified bitwise on a device "
                "(kCutlassVerifiedStraddling, kernels/cutlass_gemm.hpp)");
  static_assert(!kExpandB || kFold == CutlassFold::after_mma_own || kFold == CutlassFold::under_other_half,
                "a weight tile whose width is not a multiple of 128 needs one of fp8moe's mainloops that read B's "
                "scales per column group (CUTLASS's folds act_act's arithmetic where B has more than one scale per tile)");
  static_assert(kSass == CutlassSass::as_compiled || kFold != CutlassFold::after_mma,
                "the fold's SASS is patched in fp8moe's mainloops only (CUTLASS's collective's type carries no tag)");
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using LayoutA = cutlass::layout::RowMajor;     // (m, k), k contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // (k, n) column-major = (n, k), k contiguous
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16;  // elements (16 bytes of FP8)
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using Accum = float;
  using TileShape = cute::conditional_t<kPingpong, Shape<_64, Int<kTileN>, _128>, Shape<_128, Int<kTileN>, _128>>;
  using ClusterShape = cute::conditional_t<kCluster == CutlassCluster::m2n1, Shape<_2, _1, _1>, Shape<_1, _2, _1>>;
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleN, 128>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using KernelSchedule = cute::conditional_t<kPingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise,
                                             cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                               cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Accum, Accum, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, Accum, void, Accum>>::CollectiveOp;

  using CutlassMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA*, LayoutSFA*>, kAlignAB,
      ElementB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB, Accum, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using CollectiveMainloop =
      cute::conditional_t<kFold == CutlassFold::after_mma, CutlassMainloop,
                          FoldMainloop<CutlassMainloop, kFold == CutlassFold::after_mma_own ? 1 : 2, kKind,
                                       kFold == CutlassFold::under_other_half, kSass>>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
};

// Where each of the groups' argument arrays lies in the packed buffer (bytes from its start).
struct Offsets {
  std::size_t shapes, a, b, d, sfa, sfb, sa, sb, sd, lsfa, lsfb, expand;
};

// One group's 128x128 weight-block scales as quantized, (ceil(n/128), k/128) row-major, and where
// their expansion to one per Config::kScaleN columns, MN-major (k/128, cols = ceil(n/kScaleN)),
// goes (Config::kExpandB).
struct ExpandB {
  const float* src;
  float* dst;
  int cols, kb;
};

// dst[kb][c] = src[c / kRepeat][kb] for each of the n_groups groups (grid-stride along y as along
// x), kRepeat = 128 / kScaleN: the repeat and CUTLASS's transpose in one pass; a template so that
// each translation unit's copy is the same one.
template <int kRepeat>
__global__ void expand_block_scales(const ExpandB* groups, int n_groups) {
  for (int gi = static_cast<int>(blockIdx.y); gi < n_groups; gi += static_cast<int>(gridDim.y)) {
    const ExpandB g = groups[gi];
    const long long total = static_cast<long long>(g.cols) * g.kb;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
      const long long kb = i / g.cols, c = i % g.cols;
      g.dst[i] = __ldg(g.src + (c / kRepeat) * g.kb + kb);
    }
  }
}

// The expanded B scale columns of a group n wide (Config::kExpandB).
template <class C>
int expanded_cols(int n) {
  return (n + C::kScaleN - 1) / C::kScaleN;
}

// The device pointers of the argument arrays packed at `base`.
template <class C>
struct Packed {
  Packed(std::uint8_t* base, const Offsets& o)
      : shapes(reinterpret_cast<typename C::Shape3*>(base + o.shapes)),
        a(reinterpret_cast<const typename C::ElementA**>(base + o.a)),
        b(reinterpret_cast<const typename C::ElementB**>(base + o.b)),
        d(reinterpret_cast<typename C::Gemm::ElementD**>(base + o.d)),
        sfa(reinterpret_cast<const float**>(base + o.sfa)),
        sfb(reinterpret_cast<const float**>(base + o.sfb)),
        sa(reinterpret_cast<typename C::StrideA*>(base + o.sa)),
        sb(reinterpret_cast<typename C::StrideB*>(base + o.sb)),
        sd(reinterpret_cast<typename C::StrideD*>(base + o.sd)),
        lsfa(reinterpret_cast<typename C::LayoutSFA*>(base + o.lsfa)),
        lsfb(reinterpret_cast<typename C::LayoutSFB*>(base + o.lsfb)) {}
  typename C::Shape3* shapes;
  const typename C::ElementA** a;
  const typename C::ElementB** b;
  typename C::Gemm::ElementD** d;
  const float** sfa;
  const float** sfb;
  typename C::StrideA* sa;
  typename C::StrideB* sb;
  typename C::StrideD* sd;
  typename C::LayoutSFA* lsfa;
  typename C::LayoutSFB* lsfb;
};

inline std::size_t align_up(std::size_t v) { return (v + 255) / 256 * 256; }

// Packs the groups' argument arrays into s.host (one upload) and their problem shapes into
// host_shapes; returns where each array lies.
template <class C>
Offsets pack_host(std::span<const CutlassGroup> groups, std::vector<typename C::Shape3>& host_shapes, CutlassScratch& s) {
  // Expanded B scales (Config::kExpandB): each group's (k/128, expanded_cols(n)) floats in s.expanded.
  std::vector<std::size_t> expanded_at;
  if constexpr (C::kExpandB) {
    expanded_at.assign(groups.size() + 1, 0);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      expanded_at[g + 1] = expanded_at[g] + static_cast<std::size_t>(expanded_cols<C>(groups[g].n)) *
                                                static_cast<std::size_t>(groups[g].k / 128);
    }
    if (s.expanded.size() < expanded_at.back()) s.expanded = DeviceBuffer<float>(expanded_at.back());
  }
  const std::size_t G = groups.size();
  std::size_t off = 0;
  auto slot = [&](std::size_t bytes) {
    const std::size_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  Offsets o{};
  o.shapes = slot(G * sizeof(typename C::Shape3));
  o.a = slot(G * sizeof(void*));
  o.b = slot(G * sizeof(void*));
  o.d = slot(G * sizeof(void*));
  o.sfa = slot(G * sizeof(void*));
  o.sfb = slot(G * sizeof(void*));
  o.sa = slot(G * sizeof(typename C::StrideA));
  o.sb = slot(G * sizeof(typename C::StrideB));
  o.sd = slot(G * sizeof(typename C::StrideD));
  o.lsfa = slot(G * sizeof(typename C::LayoutSFA));
  o.lsfb = slot(G * sizeof(typename C::LayoutSFB));
  o.expand = slot(C::kExpandB ? G * sizeof(ExpandB) : 0);
  s.host.assign(off, 0);
  auto at = [&](std::size_t where) { return s.host.data() + where; };
  host_shapes.clear();
  for (std::size_t g = 0; g < G; ++g) {
    const CutlassGroup& x = groups[g];
    const typename C::Shape3 shape{x.m, x.n, x.k};
    host_shapes.push_back(shape);
    std::memcpy(at(o.shapes) + g * sizeof shape, &shape, sizeof shape);
    const void* sfb = x.sfb;
    if constexpr (C::kExpandB) {
      const ExpandB e{x.sfb, s.expanded.get() + expanded_at[g], expanded_cols<C>(x.n), x.k / 128};
      std::memcpy(at(o.expand) + g * sizeof e, &e, sizeof e);
      sfb = e.dst;
    }
    const void* ptrs[5] = {x.a, x.b, x.d, x.sfa, sfb};
    const std::size_t pos[5] = {o.a, o.b, o.d, o.sfa, o.sfb};
    for (int i = 0; i < 5; ++i) std::memcpy(at(pos[i]) + g * sizeof(void*), &ptrs[i], sizeof(void*));
    // Packed strides, then each operand's own leading dimension (wgrad's views into (rows, M)).
    typename C::StrideA sa = cutlass::make_cute_packed_stride(typename C::StrideA{}, {x.m, x.k, 1});
    typename C::StrideB sb = cutlass::make_cute_packed_stride(typename C::StrideB{}, {x.n, x.k, 1});
    typename C::StrideD sd = cutlass::make_cute_packed_stride(typename C::StrideD{}, {x.m, x.n, 1});
    cute::get<0>(sa) = x.lda;
    cute::get<0>(sb) = x.ldb;
    cute::get<0>(sd) = x.ldd;
    std::memcpy(at(o.sa) + g * sizeof sa, &sa, sizeof sa);
    std::memcpy(at(o.sb) + g * sizeof sb, &sb, sizeof sb);
    std::memcpy(at(o.sd) + g * sizeof sd, &sd, sizeof sd);
    const auto lsfa = C::ScaleConfig::tile_atom_to_shape_SFA(make_shape(x.m, x.n, x.k, 1));
    const auto lsfb = C::ScaleConfig::tile_atom_to_shape_SFB(make_shape(x.m, x.n, x.k, 1));
    std::memcpy(at(o.lsfa) + g * sizeof lsfa, &lsfa, sizeof lsfa);
    std::memcpy(at(o.lsfb) + g * sizeof lsfb, &lsfb, sizeof lsfb);
  }
  return o;
}

// What a launch keeps for the next one (CutlassScratch::last): the initialized kernel object and
// the groups' host problem shapes its parameters point to (CUTLASS's grouped tile scheduler reads
// them again at every run() to size the grid, so they must live as long as the object).
template <class C>
struct Initialized {
  typename C::Gemm gemm;
  std::vector<typename C::Shape3> host_shapes;
};

// Expands the groups' B scales (packed ExpandB arrays already on the device at `args`); every
// launch, cached or not: the scales' values may change under the same pointers.
template <class C>
void expand_b(std::span<const CutlassGroup> groups, const std::uint8_t* args, const Offsets& o, cudaStream_t stream,
              const std::string& what) {
  if constexpr (C::kExpandB) {
    long long most = 0;
    for (const CutlassGroup& g : groups) most = std::max(most, static_cast<long long>(expanded_cols<C>(g.n)) * (g.k / 128));
    const unsigned blocks = static_cast<unsigned>(std::clamp((most + 255) / 256, 1LL, 1024LL));
    const int n_groups = static_cast<int>(groups.size());
    expand_block_scales<128 / C::kScaleN><<<dim3(blocks, static_cast<unsigned>(std::min(n_groups, 65535))), 256, 0, stream>>>(
        reinterpret_cast<const ExpandB*>(args + o.expand), n_groups);
    FP8MOE_CUDA_CHECK_LAUNCH("cutlass: repeating the weight-block scales for a tile width that is not a multiple of 128", what);
  }
}

template <class C>
void run(std::span<const CutlassGroup> groups, const CutlassKernel& k, CutlassScratch& s, cudaStream_t stream,
         const std::string& what) {
  if (groups.empty()) return;
  if (s.sm_count == 0) {
    int dev = 0;
    FP8MOE_CUDA_CHECK(cudaGetDevice(&dev), what);
    s.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  }
  std::vector<typename C::Shape3> host_shapes;
  const Offsets offsets = pack_host<C>(groups, host_shapes, s);
  // The same configuration and arguments as the last launch: run its initialized object again.
  static const char tag = 0;  // one per instantiation
  std::vector<std::uint8_t> key = s.host;
  const int walk[3] = {static_cast<int>(k.raster), k.swizzle, s.sm_count};
  key.insert(key.end(), reinterpret_cast<const std::uint8_t*>(walk), reinterpret_cast<const std::uint8_t*>(walk + 3));
  if (s.last.object && s.last.type == &tag && s.last.key == key) {
    expand_b<C>(groups, s.args.get(), offsets, stream, what);
    const cutlass::Status st = static_cast<Initialized<C>*>(s.last.object.get())->gemm.run(stream);
    if (st != cutlass::Status::kSuccess) fail(what, ": CUTLASS grouped GEMM failed: ", cutlassGetStatusString(st));
    FP8MOE_CUDA_CHECK_LAUNCH("cutlass grouped gemm", what);
    ++s.reused;
    return;
  }
  s.last.object.reset();  // its arguments are about to be overwritten
  auto fresh = std::make_shared<Initialized<C>>();
  fresh->host_shapes = std::move(host_shapes);
  if (s.args.size() < s.host.size()) s.args = DeviceBuffer<std::uint8_t>(s.host.size());
  FP8MOE_CUDA_CHECK(cudaMemcpyAsync(s.args.get(), s.host.data(), s.host.size(), cudaMemcpyHostToDevice, stream), what,
                    ": uploading ", groups.size(), " groups' CUTLASS arguments");
  expand_b<C>(groups, s.args.get(), offsets, stream, what);
  const Packed<C> p(s.args.get(), offsets);
  cutlass::KernelHardwareInfo hw;
  hw.sm_count = s.sm_count;
  typename C::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {static_cast<int>(groups.size()), p.shapes, fresh->host_shapes.data()},
      {p.a, p.sa, p.b, p.sb, p.sfa, p.lsfa, p.sfb, p.lsfb},
      {{}, nullptr, p.sd, p.d, p.sd},
      hw};
  auto& f = args.epilogue.thread;
  f.alpha = 1.0f;
  f.beta = 0.0f;
  f.alpha_ptr = nullptr;
  f.beta_ptr = nullptr;
  f.alpha_ptr_array = nullptr;
  f.beta_ptr_array = nullptr;
  f.dAlpha = {cute::_0{}, cute::_0{}, 0};
  f.dBeta = {cute::_0{}, cute::_0{}, 0};
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = k.raster == CutlassRaster::along_n ? Raster::AlongN : Raster::AlongM;
  args.scheduler.max_swizzle_size = k.swizzle;
  typename C::Gemm& gemm = fresh->gemm;
  const cutlass::Status can = gemm.can_implement(args);
  if (can != cutlass::Status::kSuccess) {
    fail(what, ": CUTLASS cannot run this grouped GEMM (", cutlassGetStatusString(can), ", ", groups.size(),
         " groups, first m=", groups[0].m, " n=", groups[0].n, " k=", groups[0].k,
         "): its TMA needs 16-byte aligned rows and bases and K a multiple of 128");
  }
  const std::size_t ws = C::Gemm::get_workspace_size(args);
  if (s.workspace.size() < ws) s.workspace = DeviceBuffer<std::uint8_t>(ws);
  cutlass::Status st = gemm.initialize(args, s.workspace.get(), stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) fail(what, ": CUTLASS grouped GEMM failed: ", cutlassGetStatusString(st));
  FP8MOE_CUDA_CHECK_LAUNCH("cutlass grouped gemm", what);
  s.last = {std::move(fresh), &tag, std::move(key)};
}

// One translation unit's launch (a line of cutlass_kernels.def): bf16 output, and fp32 where kFp32.
// fp8moe's fold under the next wgmma is not built for fp32 output: ptxas serializes that kernel's
// wgmmas (C7518, "program dependence on compiler-inserted WG.DP in divergent path") and on the H100
// it differed from the model on a few outputs of the (4,8192,4096,7168) wgrad (0.035 %; 0.0038 %
// once the fold's scale loads were fenced before the stage's release), while every bf16 kernel is
// bitwise everywhere.
template <ScaleKind kKind, CutlassSchedule kSchedule, CutlassFold kFold, CutlassCluster kCluster, int kTileN,
          CutlassSass kSass, bool kFp32>
void launch(const CutlassKernel& k, OutDtype out, std::span<const CutlassGroup> groups, CutlassScratch& s,
            cudaStream_t stream, const std::string& what) {
  if (out == OutDtype::bf16) {
    run<Config<kKind, cutlass::bfloat16_t, kSchedule, kFold, kCluster, kTileN, kSass>>(groups, k, s, stream, what);
  } else if constexpr (kFp32) {
    run<Config<kKind, float, kSchedule, kFold, kCluster, kTileN, kSass>>(groups, k, s, stream, what);
  } else {
    fail(what, ": internal error: ", cutlass_config_name(kKind, k),
         " has no fp32 kernel; cutlass_grouped_gemm refuses it first (cutlass_built)");
  }
}

}  // namespace fp8moe::kernels::cutlass_impl

// Defines a .def line's launch function (the body of each generated translation unit).
#define FP8MOE_CUTLASS_DEFINE(kind, schedule, fold, cluster, tile_n, outputs, sass)                               \
  namespace fp8moe::kernels {                                                                                   \
  void FP8MOE_CUTLASS_FN(kind, schedule, fold, cluster, tile_n, sass)(const CutlassKernel& k, OutDtype out,    \
                                                                      std::span<const CutlassGroup> groups,     \
                                                                      CutlassScratch& s, cudaStream_t stream,   \
                                                                      const std::string& what) {                \
    cutlass_impl::launch<ScaleKind::kind, CutlassSchedule::schedule, CutlassFold::fold, CutlassCluster::cluster, \
                         tile_n, CutlassSass::sass, FP8MOE_CUTLASS_FP32_##outputs>(k, out, groups, s, stream,  \
                                                                                   what);                       \
  }                                                                                                             \
  }
