// The GPU quantizers (kernels/quantize.hpp) against reference/quantize.hpp: codes and scales
// bitwise, for every recipe, block size, scale option, format and input dtype, on fresh random
// data with all-zero blocks, ragged M and empty experts. Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gpu_compare.hpp"
#include "kernels/quantize.hpp"
#include "reference/quantize.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;
using kernels::Recipe;

bool is_weight(Recipe r) { return r == Recipe::weight_fwd || r == Recipe::weight_dgrad; }
bool is_kgrouped(Recipe r) { return r == Recipe::kgrouped_lhs || r == Recipe::kgrouped_rhs; }

Quantized cpu_quantize(Recipe r, const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt) {
  return fp8moe::quantize(r, x, offs, opt);
}

// All-zero blocks in every recipe: row 1, column 2, and the first B x B tile of the first matrix.
void zero_blocks(TensorF& x, int B) {
  const std::int64_t C = x.shape.back(), R = x.dim(x.rank() - 2);
  for (std::int64_t c = 0; c < C && R > 1; ++c) x.data[static_cast<std::size_t>(C + c)] = 0.0f;
  for (std::int64_t r = 0; r < R && C > 2; ++r) x.data[static_cast<std::size_t>(r * C + 2)] = 0.0f;
  for (std::int64_t r = 0; r < std::min<std::int64_t>(B, R); ++r) {
    for (std::int64_t c = 0; c < std::min<std::int64_t>(B, C); ++c) x.data[static_cast<std::size_t>(r * C + c)] = 0.0f;
  }
}

std::vector<std::uint16_t> to_bf16_bits(const TensorF& x) {
  std::vector<std::uint16_t> b(x.numel());
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = bf16_bits_rne(x.data[i]);
  return b;
}

// Quantize x on both sides (the GPU from fp32 or bf16 input) and require bitwise equality.
void check_recipe(Recipe r, const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt, bool bf16_in) {
  CAPTURE(std::string(recipe_name(r)));
  CAPTURE(shape_str(x.shape));
  CAPTURE(opt.block);
  CAPTURE(opt.pow2_scales);
  CAPTURE(std::string(format_name(opt.format)));
  CAPTURE(bf16_in);
  const Quantized want = cpu_quantize(r, x, offs, opt);
  Quantized got;
  if (bf16_in) {
    kernels::DeviceBuffer<std::uint16_t> d(to_bf16_bits(x));
    got = kernels::quantize<kernels::Bf16Bits>(r, d.get(), x.shape, offs, opt).to_host();
  } else {
    kernels::DeviceBuffer<float> d(x.data);
    got = kernels::quantize<float>(r, d.get(), x.shape, offs, opt).to_host();
  }
  CHECK(got.recipe == want.recipe);
  REQUIRE(got.codes.shape == want.codes.shape);
  REQUIRE(got.scales.shape == want.scales.shape);
  CHECK(got.layout.block_rows == want.layout.block_rows);
  CHECK(got.layout.block_cols == want.layout.block_cols);
  const test::Diff dc = test::compare_codes(want.codes.data, got.codes.data, opt.format);
  const test::Diff ds = test::compare_floats(want.scales.data, got.scales.data);
  CHECK_MESSAGE(dc.ok(), dc.count, " codes differ; first: ", dc.first_desc);
  CHECK_MESSAGE(ds.ok(), ds.count, " scales differ; first: ", ds.first_desc);
}

struct Case {
  std::vector<std::int64_t> shape;
  std::vector<std::int32_t> offs;
};

// Shapes per recipe for block B: ragged M (a partial last block, and M < B), K not a multiple of 4
// where the recipe allows it (the kernels' element-by-element paths), E > 1 for weights, empty experts for the K-grouped recipes.
std::vector<Case> cases_for(Recipe r, int B) {
  if (is_weight(r)) return {{{3, 2 * B, 3 * B}, {}}, {{1, B, B}, {}}};
  if (is_kgrouped(r)) {
    return {{{3 * B, 160}, {B, B, 3 * B, 3 * B}},  // experts 1 and 3 empty
            {{2 * B, 131}, {0, 2 * B}},            // expert 0 empty; D odd
            {{0, 64}, {0, 0}}};                    // no tokens at all
  }
  if (r == Recipe::act_lhs) return {{{3 * B + 17, 2 * B}, {}}, {{5, B}, {}}, {{0, B}, {}}};
  // and one where rows and columns allow the kernels' vector paths (M % 16 == 0, K % 8 == 0) with
  // a partial last row block and a partial last 128-column block
  return {{{3 * B + 17, 2 * B + 4}, {}}, {{5, 2 * B + 3}, {}}, {{2 * B, 131}, {}}, {{3 * B + 48, 2 * B + 8}, {}}};
}

TEST_CASE("every GPU quantizer is bitwise the CPU's: recipes x blocks x pow2 x formats x input dtypes") {
  const std::uint64_t seed = test::seed_for(501);
  CAPTURE(seed);
  int n = 0;
  for (Recipe r : kernels::kAllRecipes) {
    for (int B : {64, 128, 256}) {
      for (const Case& c : cases_for(r, B)) {
        const Dist dist = static_cast<Dist>(n % 4);
        TensorF x = test::random_tensor(c.shape, seed + static_cast<std::uint64_t>(n), kTensorA, dist);
        ++n;
        zero_blocks(x, B);
        for (bool pow2 : {false, true}) {
          for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
            for (bool bf16_in : {false, true}) {
              CAPTURE(std::string(dist_name(dist)));
              check_recipe(r, x, c.offs, QuantOptions{B, pow2, f}, bf16_in);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("GPU quantizers at torchao's test shapes (4096 x 1024 and 1024 x 4096) are bitwise the CPU's") {
  const std::uint64_t seed = test::seed_for(502);
  CAPTURE(seed);
  const TensorF a = test::random_tensor({4096, 1024}, seed, kTensorA, Dist::outlier_channels);
  const std::vector<std::int32_t> offs{1024, 1024, 3072, 4096};
  for (Recipe r : {Recipe::act_lhs, Recipe::act_rhs, Recipe::act_lhs_t, Recipe::kgrouped_lhs, Recipe::kgrouped_rhs}) {
    check_recipe(r, a, offs, QuantOptions{}, false);
  }
  const TensorF w = test::random_tensor({2, 1024, 2048}, seed, kTensorW, Dist::student_t3);
  check_recipe(Recipe::weight_fwd, w, {}, QuantOptions{}, true);
  check_recipe(Recipe::weight_dgrad, w, {}, QuantOptions{}, true);
}

TEST_CASE("the 1x128 quantizer's grid-stride loop (more groups than one grid covers) is bitwise the CPU's") {
  // quant_rowwise launches at most 65536 blocks x 8 warps x 2 groups = 2^20 groups per sweep.
  const std::uint64_t seed = test::seed_for(504);
  CAPTURE(seed);
  const TensorF x = test::random_tensor({5000, 16384}, seed, kTensorA, Dist::uniform);  // 1.28M groups of 64
  check_recipe(Recipe::act_lhs, x, {}, QuantOptions{64, true, Fp8Format::e4m3}, true);
}

TEST_CASE("GPU quantizers on non-finite input: same scales and codes up to the sign of a NaN") {
  // Non-finite blocks are reported, not hidden (reference/SPEC.md 3.3); x86 and the GPU propagate NaN
  // signs differently, so a NaN code or scale matches any NaN (gpu_compare.hpp).
  const std::uint64_t seed = test::seed_for(503);
  CAPTURE(seed);
  TensorF x = test::random_tensor({300, 256}, seed, kTensorA);
  x(3, 5) = std::numeric_limits<float>::quiet_NaN();
  x(150, 7) = std::numeric_limits<float>::infinity();
  x(299, 200) = -std::numeric_limits<float>::infinity();
  x(40, 130) = -std::numeric_limits<float>::quiet_NaN();
  for (Recipe r : {Recipe::act_lhs, Recipe::act_rhs, Recipe::act_lhs_t}) {
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) check_recipe(r, x, {}, QuantOptions{128, false, f}, false);
  }
  TensorF w = test::random_tensor({2, 256, 256}, seed, kTensorW);
  w(1, 10, 20) = std::numeric_limits<float>::quiet_NaN();
  w(0, 200, 3) = std::numeric_limits<float>::infinity();
  for (Recipe r : {Recipe::weight_fwd, Recipe::weight_dgrad}) check_recipe(r, w, {}, QuantOptions{}, false);
}

TEST_CASE("GPU quantizers reject what the CPU rejects, naming the dim") {
  kernels::DeviceBuffer<float> d(std::size_t{1000 * 100});
  const QuantOptions opt;
  CHECK_THROWS_WITH_AS(kernels::quantize<float>(Recipe::act_lhs, d.get(), {1000, 100}, {}, opt),
                       doctest::Contains("K (the quantized dim of the 1x128 recipe) = 100"), Error);
  const std::vector<std::int32_t> offs{100, 1000};
  CHECK_THROWS_WITH_AS(kernels::quantize<float>(Recipe::kgrouped_lhs, d.get(), {1000, 100}, offs, opt),
                       doctest::Contains("expert 0 has 100 tokens"), Error);
  CHECK_THROWS_WITH_AS(kernels::quantize<float>(Recipe::act_rhs, d.get(), {1000, 100}, {}, QuantOptions{96}),
                       doctest::Contains("block size 96"), Error);
  // the kernels move 16-byte vectors: an offset pointer is refused, not read misaligned
  CHECK_THROWS_WITH_AS(kernels::quantize<float>(Recipe::act_rhs, d.get() + 1, {999, 100}, {}, opt),
                       doctest::Contains("must be 16-byte aligned"), Error);
}

}  // namespace
