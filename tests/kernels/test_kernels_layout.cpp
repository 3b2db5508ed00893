// Host-side index math of kernels/ that runs without a GPU (STYLE.md: index math testable on the
// CPU): the GPU quantizers' layouts against reference/'s, and the block-partial rounding of the
// simt GEMM against an exact oracle. Label kernels (not gpu): runs everywhere CUDA compiles.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "reference/block_partial.hpp"
#include "kernels/quantize.hpp"
#include "kernels/scale_layout.hpp"
#include "kernels/check.hpp"
#ifdef FP8MOE_HAVE_CUTLASS
#include "kernels/cutlass_grouped.hpp"
#endif
#include "sim/backend/backend.hpp"
#include "reference/quantize.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;
using kernels::Recipe;

TEST_CASE("every recipe's layout: its shapes, and scale indices that tile the codes in blocks, once each") {
  // The one recipe -> layout mapping (reference/quantize.hpp quant_layout) that the CPU and GPU
  // quantizers share, against the recipe table written out here: code shape, block extent, and
  // the property that each scale index owns exactly one block of codes.
  for (int B : {64, 128, 256}) {
    const std::vector<std::int32_t> offs{B, B, 3 * B};  // expert 1 empty
    const QuantOptions opt{B, false, Fp8Format::e4m3};
    const std::int64_t M = 3 * B, K = 2 * B, Mr = M + 17, Kr = K + 3, E = 2, N = B;
    CAPTURE(B);
    struct Want {
      Recipe r;
      std::vector<std::int64_t> in, codes;
      int br, bc;
    };
    const std::vector<Want> table{
        {Recipe::act_lhs, {M, K}, {M, K}, 1, B},
        {Recipe::act_rhs, {Mr, Kr}, {Mr, Kr}, B, 1},
        {Recipe::act_lhs_t, {Mr, Kr}, {Kr, Mr}, 1, B},
        {Recipe::weight_fwd, {E, N, K}, {E, N, K}, B, B},
        {Recipe::weight_dgrad, {E, N, K}, {E, K, N}, B, B},
        {Recipe::kgrouped_lhs, {M, K}, {K, M}, 1, B},
        {Recipe::kgrouped_rhs, {M, K}, {M, K}, B, 1},
    };
    for (const Want& w : table) {
      CAPTURE(std::string(recipe_name(w.r)));
      const bool kg = w.r == Recipe::kgrouped_lhs || w.r == Recipe::kgrouped_rhs;
      const QuantLayout l = quant_layout(w.r, w.in, kg ? std::span<const std::int32_t>(offs) : std::span<const std::int32_t>{}, opt);
      CHECK(l.code_shape() == w.codes);
      CHECK(l.block_rows == w.br);
      CHECK(l.block_cols == w.bc);
      // Each scale index owns one block: the codes mapping to it span at most br x bc, all of
      // them within one block-aligned rectangle, and every index is used.
      const std::int64_t Eb = l.batch, R = l.rows, C = l.cols;
      std::vector<std::int64_t> count(static_cast<std::size_t>(l.scale_count()), 0);
      std::vector<std::array<std::int64_t, 3>> first(count.size(), {-1, -1, -1});
      bool ok = true;
      for (std::int64_t e = 0; e < Eb; ++e) {
        for (std::int64_t r = 0; r < R; ++r) {
          for (std::int64_t c = 0; c < C; ++c) {
            const std::int64_t j = l.scale_index(e, r, c);
            REQUIRE(j >= 0);
            REQUIRE(j < l.scale_count());
            REQUIRE(l.code_index(e, r, c) == (e * R + r) * C + c);
            auto& f = first[static_cast<std::size_t>(j)];
            if (f[0] < 0) f = {e, r - r % w.br, c - c % w.bc};
            ok = ok && f[0] == e && r >= f[1] && r < f[1] + w.br && c >= f[2] && c < f[2] + w.bc;
            ++count[static_cast<std::size_t>(j)];
          }
        }
      }
      CHECK(ok);
      CHECK(std::count(count.begin(), count.end(), 0) == 0);
      // The CPU quantizer's tensors have the layout's shapes.
      const TensorF x(w.in, 1.0f);
      const Quantized q = quantize(w.r, x, kg ? std::span<const std::int32_t>(offs) : std::span<const std::int32_t>{}, opt);
      CHECK(q.layout == l);
      CHECK(q.codes.shape == l.code_shape());
      CHECK(q.scales.shape == l.scale_shape());
    }
  }
  // The preconditions, named: a 1x128 K that is not a multiple of the block, a 2-D grouped weight
  // for the GPU quantizer (the CPU's 2-D weight is (N, K)).
  CHECK_THROWS_WITH_AS(quant_layout(Recipe::act_lhs, {4, 100}, {}, QuantOptions{}),
                       doctest::Contains("K (the quantized dim of the 1x128 recipe) = 100"), Error);
  CHECK(quant_layout(Recipe::weight_fwd, {128, 256}, {}, QuantOptions{}).code_shape() == std::vector<std::int64_t>{128, 256});
}

TEST_CASE("i128_to_f32_scaled rounds exact partials once, RNE, like the fp64 -> fp32 cast") {
  const std::uint64_t seed = test::seed_for(531);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    // e4m3 partials: |p| < 2^44, exact in fp64, so (float)(p * 2^-18) is the single rounding
    const int bits = 1 + static_cast<int>(rng() % 44);
    std::int64_t p = static_cast<std::int64_t>(rng() >> (64 - bits));
    if (rng() & 1) p = -p;
    const float want = static_cast<float>(std::ldexp(static_cast<double>(p), -18));
    const float got = i128_to_f32_scaled(p, 18);
    REQUIRE_MESSAGE(f32_bits(want) == f32_bits(got), "p = ", p);
  }
  for (int i = 0; i < 200000; ++i) {
    // e5m2 partials up to 2^72: round-to-odd to 53 bits keeps the sticky bit, then fp64 -> fp32
    // is RNE with a single effective rounding (53 >= 24 + 2)
    const int bits = 1 + static_cast<int>(rng() % 72);
    unsigned __int128 m = (static_cast<unsigned __int128>(rng()) << 64) | rng();
    m >>= (128 - bits);
    int msb = 127;
    while (msb > 0 && ((m >> msb) & 1) == 0) --msb;
    unsigned __int128 t = m;
    if (msb > 52) {
      const int drop = msb - 52;
      const bool sticky = (m & ((static_cast<unsigned __int128>(1) << drop) - 1)) != 0;
      t = (m >> drop) | (sticky ? 1 : 0);
      const double d = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(t)), drop - 32);
      const float want = static_cast<float>(d);
      REQUIRE(f32_bits(want) == f32_bits(i128_to_f32_scaled(static_cast<__int128>(m), 32)));
      REQUIRE(f32_bits(-want) == f32_bits(i128_to_f32_scaled(-static_cast<__int128>(m), 32)));
    } else {
      const float want = static_cast<float>(std::ldexp(static_cast<double>(static_cast<std::uint64_t>(t)), -32));
      REQUIRE(f32_bits(want) == f32_bits(i128_to_f32_scaled(static_cast<__int128>(m), 32)));
    }
  }
  CHECK(i128_to_f32_scaled(0, 18) == 0.0f);
}

TEST_CASE("cuBLASLt scale layouts: 16-byte aligned per-expert VEC128 blocks, BLK128x128 pitch padded to 4") {
  // offs [129,129,384,500] with kb = 2: blocks of 258, 0, 510, 232 floats, each start rounded up to 4
  const std::vector<std::int32_t> offs{129, 129, 384, 500};
  CHECK(kernels::vec_scale_offsets(offs, 2) == std::vector<std::int64_t>{0, 260, 260, 772, 1004});
  CHECK(kernels::vec_scale_offsets(offs, 56).back() == 500 * 56);  // 129*56 is a multiple of 4 already
  CHECK(kernels::blk_scale_pitch(2) == 4);
  CHECK(kernels::blk_scale_pitch(56) == 56);
  CHECK(kernels::blk_scale_pitch(57) == 60);
}

TEST_CASE("backend registry: the CUDA backends are listed and say why a mode is not theirs, without a device") {
  const std::vector<std::string>& names = sim::backend_names();
#ifdef FP8MOE_HAVE_CUTLASS
  REQUIRE(names.size() == 4);
  CHECK(names[3] == "cuda-cutlass");
#else
  REQUIRE(names.size() == 3);
  CHECK_THROWS_WITH_AS(sim::make_backend("cuda-cutlass"), doctest::Contains("-DFP8MOE_CUTLASS_DIR"), Error);
#endif
  CHECK(names[0] == "reference");
  CHECK(names[1] == "cuda-simt");
  CHECK(names[2] == "cuda-cublaslt");
  GemmOptions opt;  // promote-fp32:deepgemm, e4m3, block 128, bf16
  CHECK(sim::backend_unsupported("cuda-simt", opt).empty());
  // cuBLASLt is held to the model of what it computes: hopper-tc:cublas, nothing else
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("use mode hopper-tc:cublas") != std::string::npos);
  opt.promotion = Promotion::cublas;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("use mode hopper-tc:cublas") != std::string::npos);
  opt.mode = Mode::hopper_tc;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).empty());
  opt.quant.block = 64;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).find("block 64") != std::string::npos);
  opt.mode = Mode::promote_fp32;
  CHECK(sim::backend_unsupported("cuda-simt", opt).empty());
  for (Mode m : {Mode::bf16, Mode::exact, Mode::torchao_emulated}) {
    opt.mode = m;
    CHECK(sim::backend_unsupported("cuda-simt", opt).find("--backend reference") != std::string::npos);
  }
  opt.mode = Mode::hp64;
  CHECK(sim::backend_unsupported("cuda-cublaslt", opt).empty());
  CHECK_THROWS_WITH_AS(sim::backend_unsupported("cuda-nope", opt), doctest::Contains("cuda-simt, cuda-cublaslt"), Error);
#ifdef FP8MOE_HAVE_CUTLASS
  // CUTLASS is held to the same model: hopper-tc:cublas (its wgrad promotion is cuBLASLt's)
  opt.mode = Mode::hopper_tc;
  opt.promotion = Promotion::deepgemm;
  opt.quant.block = 128;
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).find("use mode hopper-tc:cublas") != std::string::npos);
  opt.promotion = Promotion::cublas;
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).empty());
  opt.quant.format = Fp8Format::e5m2;
  CHECK(sim::backend_unsupported("cuda-cutlass", opt).find("e5m2") != std::string::npos);
#endif
  if (kernels::cuda_device_count() == 0) {
    CHECK_THROWS_WITH_AS(sim::make_backend("cuda-simt"), doctest::Contains("'cuda-simt' needs a CUDA device"), Error);
  }
}

#ifdef FP8MOE_HAVE_CUTLASS
TEST_CASE("cuda-cutlass's kernel table and per-shape choice: host code, checked without a device") {
  using kernels::cutlass_choose;
  using kernels::CutlassCluster;
  using kernels::CutlassFold;
  using kernels::CutlassKernel;
  using kernels::CutlassRaster;
  using kernels::CutlassSchedule;
  using kernels::ScaleKind;
  // The backend's own choice per output type and shape (SPEC 15.5's table): the walk along the
  // shorter side of the outputs.
  CHECK(cutlass_choose(ScaleKind::act_act, OutDtype::bf16, 8192, 4096) ==
        CutlassKernel{CutlassSchedule::cooperative, CutlassFold::under_other_half, CutlassRaster::along_n, 1,
                      CutlassCluster::m2n1, 192});
  CHECK(cutlass_choose(ScaleKind::act_act, OutDtype::bf16, 2048, 5120) ==
        CutlassKernel{CutlassSchedule::cooperative, CutlassFold::under_other_half, CutlassRaster::along_m, 2,
                      CutlassCluster::m2n1, 192});
  CHECK(cutlass_choose(ScaleKind::act_act, OutDtype::fp32, 2048, 5120) ==
        CutlassKernel{CutlassSchedule::cooperative, CutlassFold::after_mma, CutlassRaster::along_m, 2});
  CHECK(cutlass_choose(ScaleKind::act_weight, OutDtype::bf16, 8192, 4096) ==
        CutlassKernel{CutlassSchedule::cooperative, CutlassFold::after_mma_own, CutlassRaster::along_n, 1,
                      CutlassCluster::m2n1, 192});
  CHECK(cutlass_choose(ScaleKind::act_weight, OutDtype::fp32, 2048, 5120) ==
        CutlassKernel{CutlassSchedule::cooperative, CutlassFold::after_mma, CutlassRaster::along_m, 2});
  CHECK(cutlass_choose(ScaleKind::act_weight, OutDtype::bf16, 4096, 4096).raster == CutlassRaster::along_m);  // a tie walks M
  // Row names: the schedule first (co, pp), then the fold, the walk, the cluster, the width.
  CHECK(kernels::cutlass_short_name(cutlass_choose(ScaleKind::act_weight, OutDtype::bf16, 8192, 4096), true) == "co/f1/N1/2x1/n192");
  CHECK(kernels::cutlass_short_name(CutlassKernel{CutlassSchedule::cooperative, CutlassFold::under_other_half,
                                                  CutlassRaster::along_m, 2, CutlassCluster::m2n1, 192},
                                    true) == "co/hv/M2/2x1/n192");
  CHECK(kernels::cutlass_short_name(CutlassKernel{CutlassSchedule::pingpong}, false) == "pp/ov");
  CHECK(kernels::cutlass_short_name(CutlassKernel{CutlassSchedule::cooperative, CutlassFold::after_mma_own,
                                                  CutlassRaster::along_m, 1, CutlassCluster::m2n1, 192,
                                                  kernels::CutlassSass::yield_head},
                                    false) == "co/f1/2x1/n192/yh");
  CHECK(kernels::cutlass_config_name(ScaleKind::act_act, CutlassKernel{CutlassSchedule::pingpong})
            .find("tile 64x128x128, cluster 1x2x1, ping-pong, fold under the next wgmma") != std::string::npos);
  // Every choice is built, for both output types, at square, tall and wide outputs and at one row.
  for (ScaleKind kind : {ScaleKind::act_act, ScaleKind::act_weight}) {
    for (OutDtype out : {OutDtype::bf16, OutDtype::fp32}) {
      for (const auto& [m, n] : {std::pair{4096, 7168}, std::pair{8192, 2048}, std::pair{1, 128}, std::pair{3072, 3072}}) {
        CAPTURE(m);
        CAPTURE(n);
        CHECK(kernels::cutlass_built(kind, cutlass_choose(kind, out, m, n), out));
      }
    }
  }
  // The table (kernels/cutlass_kernels.def): each row found again by cutlass_built in any walk,
  // no row twice, the refusals of kernels/CMakeLists.txt held (a straddling act_weight tile only
  // at a verified width, with a mainloop that reads B's scales per column group), fp32 output
  // only where the row says so.
  const auto built = kernels::cutlass_built_kernels();
  REQUIRE(built.size() >= 16);
  for (std::size_t i = 0; i < built.size(); ++i) {
    const kernels::CutlassBuiltKernel& b = built[i];
    CAPTURE(i);
    CAPTURE(kernels::cutlass_config_name(b.kind, b.kernel));
    for (const auto& [r, w] : {std::pair{CutlassRaster::along_m, 1}, std::pair{CutlassRaster::along_n, 8}}) {
      CutlassKernel k = b.kernel;
      k.raster = r;
      k.swizzle = w;
      CHECK(kernels::cutlass_built(b.kind, k, OutDtype::bf16));
      CHECK(kernels::cutlass_built(b.kind, k, OutDtype::fp32) == b.fp32);
    }
    if (kernels::cutlass_straddles(b.kind, b.kernel.tile_n)) {
      CHECK(kernels::cutlass_straddling_verified(b.kernel.tile_n));
      CHECK((b.kernel.fold == CutlassFold::after_mma_own || b.kernel.fold == CutlassFold::under_other_half));
    }
    for (std::size_t j = 0; j < i; ++j) CHECK_FALSE((built[j].kind == b.kind && built[j].kernel == b.kernel));
  }
  // Outside the table: a width never built, and fp32 where only bf16 is.
  CutlassKernel wide = cutlass_choose(ScaleKind::act_weight, OutDtype::bf16, 8192, 4096);
  wide.tile_n = 208;
  CHECK_FALSE(kernels::cutlass_straddling_verified(208));
  CHECK_FALSE(kernels::cutlass_straddling_verified(224));
  CHECK(kernels::cutlass_straddling_verified(192));
  CHECK_FALSE(kernels::cutlass_built(ScaleKind::act_weight, wide, OutDtype::bf16));
  CHECK_FALSE(kernels::cutlass_built(ScaleKind::act_weight, cutlass_choose(ScaleKind::act_weight, OutDtype::bf16, 8192, 4096),
                                     OutDtype::fp32));
}
#endif

TEST_CASE("cuda-fastest is this build's fastest tensor-core backend") {
#ifdef FP8MOE_HAVE_CUTLASS
  const std::string fastest = "cuda-cutlass";
#else
  const std::string fastest = "cuda-cublaslt";
#endif
  CHECK(sim::resolve_backend(sim::kFastestBackend) == fastest);
  for (const char* b : {"reference", "cuda-simt", "cuda-cublaslt", "cuda-nope"}) CHECK(sim::resolve_backend(b) == b);
  CHECK_THROWS_WITH_AS(sim::backend_unsupported(sim::kFastestBackend, GemmOptions{}), doctest::Contains("alias"), Error);
}

}  // namespace
