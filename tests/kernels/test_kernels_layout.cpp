// Host-side index math of kernels/ that runs without a GPU (STYLE.md: index math testable on the
// CPU): the GPU quantizers' layouts against reference/'s, and the block-partial rounding of the
// simt GEMM against an exact oracle. Label kernels (not gpu): runs everywhere CUDA compiles.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "reference/block_partial.hpp"
#include "kernels/quantize.hpp"
#include "kernels/scale_layout.hpp"
#include "kernels/check.hpp"
#include "sim/backend/backend.hpp"
#include "reference/quantize.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;
using kernels::Recipe;

TEST_CASE("quant_layout gives reference/'s code and scale shapes and block extents for every recipe") {
  for (int B : {64, 128, 256}) {
    const std::vector<std::int32_t> offs{B, B, 3 * B};  // expert 1 empty
    const QuantOptions opt{B, false, Fp8Format::e4m3};
    const std::int64_t M = 3 * B, K = 2 * B;
    CAPTURE(B);
    const TensorF x({M, K}, 1.0f), w({2, B, 2 * B}, 1.0f);
    const std::vector<std::pair<Recipe, Quantized>> pairs{
        {Recipe::act_lhs, quantize_act_lhs(x, opt)},
        {Recipe::act_rhs, quantize_act_rhs(TensorF({M + 17, K + 3}, 1.0f), opt)},
        {Recipe::act_lhs_t, quantize_act_lhs_t(TensorF({M + 17, K + 3}, 1.0f), opt)},
        {Recipe::weight_fwd, quantize_grouped_weight(w, WeightOrientation::fwd, opt)},
        {Recipe::weight_dgrad, quantize_grouped_weight(w, WeightOrientation::dgrad, opt)},
        {Recipe::kgrouped_lhs, quantize_kgrouped_lhs(TensorF({M, K}, 1.0f), offs, opt)},
        {Recipe::kgrouped_rhs, quantize_kgrouped_rhs(TensorF({M, K}, 1.0f), offs, opt)},
    };
    for (const auto& [r, q] : pairs) {
      CAPTURE(std::string(recipe_name(r)));
      const std::vector<std::int64_t> in = r == Recipe::act_rhs || r == Recipe::act_lhs_t ? std::vector<std::int64_t>{M + 17, K + 3}
                                           : (r == Recipe::weight_fwd || r == Recipe::weight_dgrad) ? w.shape
                                                                                                    : x.shape;
      const bool kg = r == Recipe::kgrouped_lhs || r == Recipe::kgrouped_rhs;
      const kernels::QuantLayout l = kernels::quant_layout(r, in, kg ? std::span<const std::int32_t>(offs) : std::span<const std::int32_t>{}, opt);
      CHECK(l.codes == q.codes.shape);
      CHECK(l.scales == q.scales.shape);
      CHECK(l.block_rows == q.block_rows);
      CHECK(l.block_cols == q.block_cols);
      CHECK(r == q.recipe);
    }
  }
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
  REQUIRE(names.size() == 3);
  CHECK(names[0] == "reference");
  CHECK(names[1] == "cuda-simt");
  CHECK(names[2] == "cuda-cublaslt");
  GemmOptions opt;  // promote-fp32/deepgemm, e4m3, block 128, bf16
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
  if (kernels::cuda_device_count() == 0) {
    CHECK_THROWS_WITH_AS(sim::make_backend("cuda-simt"), doctest::Contains("'cuda-simt' needs a CUDA device"), Error);
  }
}

}  // namespace
