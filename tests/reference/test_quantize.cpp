// The blockwise quantizers of reference/quantize.cpp (reference/SPEC.md 3.1, 4.1) against the plain
// oracle of quant_oracle.hpp: codes and scales bitwise, statistics exactly, on fresh random data.
// Shapes follow torchao's blockwise_fp8_training quantizer tests (1x128 lhs on 4096x1024 and
// 4096x16384, blocks 128 and 256, bf16 and fp32 inputs) plus the moe_training layouts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "reference/quantize.hpp"
#include "support/test_support.hpp"
#include "quant_oracle.hpp"

namespace {

using namespace fp8moe;
namespace orc = fp8moe::oracle;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::string fmt_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

// Input flavours: bf16-valued (datagen rounds to bf16) or full fp32 (random low 16 bits added).
enum class Dtype { bf16, fp32 };

// x with its 16 low mantissa bits filled from a keyed hash of (seed, index): fp32 data that is not
// bf16-representable (the value changes by less than one bf16 ulp).
TensorF with_fp32_bits(TensorF x, std::uint64_t seed) {
  const std::int64_t n = static_cast<std::int64_t>(x.numel());
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t z = seed ^ (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i + 1));
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 29;
    std::uint32_t u = bits_of(x.data[static_cast<std::size_t>(i)]);
    u |= static_cast<std::uint32_t>(z) & 0xffffu;
    std::memcpy(&x.data[static_cast<std::size_t>(i)], &u, sizeof u);
  }
  return x;
}

TensorF random_input(std::vector<std::int64_t> shape, std::uint64_t seed, std::uint32_t id, Dtype dt) {
  TensorF x = test::random_tensor(std::move(shape), seed, id);
  return dt == Dtype::fp32 ? with_fp32_bits(std::move(x), seed) : x;
}

orc::Options oracle_opts(const QuantOptions& o) { return orc::Options{o.block, o.pow2_scales, o.format}; }

bool is_nan_code(std::uint8_t c, Fp8Format f) {
  return f == Fp8Format::e4m3 ? (c & 0x7f) == 0x7f : (c & 0x7f) > 0x7c;
}

// Codes bitwise (a NaN code matches any NaN code: the sign of a NaN product is not IEEE-defined),
// scales bitwise (NaN matches NaN), shapes and statistics exactly.
void check_same(const Quantized& q, const orc::Result& o, Fp8Format f) {
  REQUIRE(q.codes.shape == o.code_shape);
  REQUIRE(q.scales.shape == o.scale_shape);
  std::int64_t bad_codes = 0, first_code = -1;
  for (std::size_t i = 0; i < o.codes.size(); ++i) {
    const std::uint8_t a = q.codes.data[i], b = o.codes[i];
    if (a == b || (is_nan_code(a, f) && is_nan_code(b, f))) continue;
    if (bad_codes++ == 0) first_code = static_cast<std::int64_t>(i);
  }
  if (bad_codes) {
    const auto i = static_cast<std::size_t>(first_code);
    const std::string where = "first bad code at flat index " + std::to_string(first_code) + ": got " +
                              std::to_string(q.codes.data[i]) + ", oracle " + std::to_string(o.codes[i]);
    CAPTURE(where);
    CHECK(bad_codes == 0);
  }
  std::int64_t bad_scales = 0, first_scale = -1;
  for (std::size_t i = 0; i < o.scales.size(); ++i) {
    const float a = q.scales.data[i], b = o.scales[i];
    if (bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b))) continue;
    if (bad_scales++ == 0) first_scale = static_cast<std::int64_t>(i);
  }
  if (bad_scales) {
    const auto i = static_cast<std::size_t>(first_scale);
    char where[160];
    std::snprintf(where, sizeof where, "first bad scale at flat index %lld: got %a, oracle %a",
                  static_cast<long long>(first_scale), q.scales.data[i], o.scales[i]);
    CAPTURE(where);
    CHECK(bad_scales == 0);
  }
  CHECK(q.stats.elements == o.stats.elements);
  CHECK(q.stats.nonfinite_inputs == o.stats.nonfinite);
  CHECK(q.stats.underflow == o.stats.underflow);
  CHECK(q.stats.saturated == o.stats.saturated);
  CHECK(q.stats.zero_blocks == o.stats.zero_blocks);
}

TEST_CASE("oracle self-check: decoded code tables") {
  const orc::CodeTable e4 = orc::code_table(Fp8Format::e4m3), e5 = orc::code_table(Fp8Format::e5m2);
  CHECK(e4.max_code == 0x7e);
  CHECK(e4.max_value == 448.0);
  CHECK(e4.value[1] == std::ldexp(1.0, -9));
  CHECK(e4.value[8] == std::ldexp(1.0, -6));
  CHECK(e5.max_code == 0x7b);
  CHECK(e5.max_value == 57344.0);
  CHECK(e5.value[1] == std::ldexp(1.0, -16));
  for (const auto* t : {&e4, &e5}) {
    for (std::size_t i = 1; i < t->value.size(); ++i) CHECK(t->value[i] > t->value[i - 1]);
  }
  CHECK(orc::encode(464.0f, e4) == 0x7e);     // tie to the even code
  CHECK(orc::encode(0x3p-10f, e4) == 0x02);   // subnormal tie to even
  CHECK(orc::encode(-0x1p-10f, e4) == 0x80);  // tie to zero keeps the sign
}

TEST_CASE("1x128 lhs: torchao shapes, blocks 128 and 256, bf16 and fp32 inputs") {
  struct Shape {
    std::int64_t M, K;
  };
  std::uint32_t id = 0;
  for (Shape s : {Shape{4096, 1024}, Shape{512, 2048}, Shape{4096, 16384}}) {
    const std::uint64_t seed = test::seed_for(100 + id++);
    const TensorF x_bf16 = test::random_tensor({s.M, s.K}, seed, 1);  // generated once per shape
    for (Dtype dt : {Dtype::bf16, Dtype::fp32}) {
      const TensorF x = dt == Dtype::bf16 ? x_bf16 : with_fp32_bits(x_bf16, seed);
      for (int block : {128, 256}) {
        CAPTURE(seed);
        CAPTURE(s.M);
        CAPTURE(s.K);
        CAPTURE(block);
        const std::string dtype = dt == Dtype::bf16 ? "bf16" : "fp32";
        CAPTURE(dtype);
        const QuantOptions opt{block, false, Fp8Format::e4m3};
        const Quantized q = quantize_act_lhs(x, opt);
        CHECK(q.recipe == Recipe::act_lhs);
        CHECK(q.layout.block_rows == 1);
        CHECK(q.layout.block_cols == block);
        check_same(q, orc::act_lhs(x.data, s.M, s.K, oracle_opts(opt)), opt.format);
      }
    }
  }
}

TEST_CASE("an all-zero block takes the 1e-12 floor") {
  const std::uint64_t seed = test::seed_for(200);
  CAPTURE(seed);
  TensorF x = test::random_tensor({256, 512}, seed, 1);
  for (std::int64_t c = 128; c < 256; ++c) x(3, c) = 0.0f;  // row 3, block 1
  for (std::int64_t c = 384; c < 512; ++c) x(7, c) = -0.0f;  // row 7, block 3: negative zeros
  const QuantOptions opt;
  const Quantized q = quantize_act_lhs(x, opt);
  check_same(q, orc::act_lhs(x.data, 256, 512, oracle_opts(opt)), opt.format);
  CHECK(q.stats.zero_blocks == 2);
  // s_inv = 1 / fl32(448 / 1e-12f), the formula's value, not 1e-12/448.
  const float s_inv = 1.0f / static_cast<float>(448.0 / static_cast<double>(1e-12f));
  CHECK(bits_of(q.scales(3, 1)) == bits_of(s_inv));
  for (std::int64_t c = 128; c < 256; ++c) CHECK(q.codes(3, c) == 0x00);
  for (std::int64_t c = 384; c < 512; ++c) CHECK(q.codes(7, c) == 0x80);

  // a zero 128x1 column block of the rhs recipe, and a zero 128x128 weight tile
  TensorF y = test::random_tensor({300, 256}, seed, 2);
  for (std::int64_t r = 256; r < 300; ++r) y(r, 17) = 0.0f;  // the short last block of column 17
  const Quantized qr = quantize_act_rhs(y, opt);
  check_same(qr, orc::act_rhs(y.data, 300, 256, oracle_opts(opt)), opt.format);
  CHECK(qr.stats.zero_blocks == 1);
  CHECK(bits_of(qr.scales(2, 17)) == bits_of(s_inv));
  TensorF w = test::random_tensor({256, 384}, seed, 3);
  for (std::int64_t r = 128; r < 256; ++r) {
    for (std::int64_t c = 256; c < 384; ++c) w(r, c) = 0.0f;
  }
  const Quantized qw = quantize_weight(w, opt);
  check_same(qw, orc::weight(w.ptr(), 256, 384, oracle_opts(opt)), opt.format);
  CHECK(qw.stats.zero_blocks == 1);
  CHECK(bits_of(qw.scales(1, 2)) == bits_of(s_inv));
}

TEST_CASE("128x1 rhs with ragged M, transposed lhs, 128x128 weight") {
  const QuantOptions opt;
  for (std::int64_t M : {300, 512, 128, 77}) {
    const std::uint64_t seed = test::seed_for(300 + static_cast<std::uint64_t>(M));
    CAPTURE(seed);
    CAPTURE(M);
    const TensorF x = random_input({M, 384}, seed, 1, Dtype::fp32);
    const Quantized r = quantize_act_rhs(x, opt);
    CHECK(r.recipe == Recipe::act_rhs);
    CHECK(r.scales.shape == std::vector<std::int64_t>{(M + 127) / 128, 384});
    check_same(r, orc::act_rhs(x.data, M, 384, oracle_opts(opt)), opt.format);
    const Quantized t = quantize_act_lhs_t(x, opt);
    CHECK(t.recipe == Recipe::act_lhs_t);
    check_same(t, orc::act_lhs_t(x.data, M, 384, oracle_opts(opt)), opt.format);
  }
  const std::uint64_t seed = test::seed_for(310);
  CAPTURE(seed);
  const TensorF w = random_input({512, 768}, seed, 2, Dtype::bf16);
  const Quantized q = quantize_weight(w, opt);
  CHECK(q.recipe == Recipe::weight_fwd);
  check_same(q, orc::weight(w.ptr(), 512, 768, oracle_opts(opt)), opt.format);
}

TEST_CASE("options: block 64 and 256, pow2 scales, e5m2") {
  const QuantOptions variants[] = {
      {64, false, Fp8Format::e4m3}, {256, false, Fp8Format::e4m3}, {128, true, Fp8Format::e4m3},
      {128, false, Fp8Format::e5m2}, {64, true, Fp8Format::e5m2},   {256, true, Fp8Format::e5m2},
  };
  std::uint32_t v = 0;
  for (const QuantOptions& opt : variants) {
    const std::uint64_t seed = test::seed_for(400 + v++);
    CAPTURE(seed);
    CAPTURE(opt.block);
    CAPTURE(opt.pow2_scales);
    const std::string fmt = fmt_name(opt.format);
    CAPTURE(fmt);
    const orc::Options o = oracle_opts(opt);
    const TensorF x = random_input({300, 1024}, seed, 1, Dtype::fp32);
    const TensorF w = random_input({512, 768}, seed, 2, Dtype::bf16);
    const TensorF x256 = random_input({256, 1024}, seed, 3, Dtype::bf16);
    check_same(quantize_act_lhs(x, opt), orc::act_lhs(x.data, 300, 1024, o), opt.format);
    check_same(quantize_act_rhs(x, opt), orc::act_rhs(x.data, 300, 1024, o), opt.format);
    check_same(quantize_act_lhs_t(x256, opt), orc::act_lhs_t(x256.data, 256, 1024, o), opt.format);
    check_same(quantize_act_lhs_t(x, opt), orc::act_lhs_t(x.data, 300, 1024, o), opt.format);  // ragged M
    const Quantized qw = quantize_weight(w, opt);
    check_same(qw, orc::weight(w.ptr(), 512, 768, o), opt.format);
    if (opt.pow2_scales) {
      // power-of-two scales make s_inv exact: a power of two itself
      for (float s : qw.scales.data) {
        int e = 0;
        CHECK(std::frexp(s, &e) == 0.5f);
      }
    }
  }
}

TEST_CASE("grouped weight: per-expert dense quantization, dgrad is its transpose") {
  const std::int64_t E = 3, N = 256, K = 384, tiles = (N / 128) * (K / 128);
  const std::uint64_t seed = test::seed_for(500);
  CAPTURE(seed);
  const TensorF w = random_input({E, N, K}, seed, 2, Dtype::bf16);
  for (bool pow2 : {false, true}) {
    CAPTURE(pow2);
    const QuantOptions opt{128, pow2, Fp8Format::e4m3};
    const Quantized fwd = quantize_grouped_weight(w, WeightOrientation::fwd, opt);
    const Quantized dgr = quantize_grouped_weight(w, WeightOrientation::dgrad, opt);
    REQUIRE(fwd.codes.shape == std::vector<std::int64_t>{E, N, K});
    REQUIRE(fwd.scales.shape == std::vector<std::int64_t>{E, N / 128, K / 128});
    REQUIRE(dgr.codes.shape == std::vector<std::int64_t>{E, K, N});
    REQUIRE(dgr.scales.shape == std::vector<std::int64_t>{E, K / 128, N / 128});
    orc::Stats total;
    for (std::int64_t e = 0; e < E; ++e) {
      CAPTURE(e);
      const orc::Result o = orc::weight(w.ptr() + e * N * K, N, K, oracle_opts(opt));
      total.add(o.stats);
      const std::vector<std::uint8_t> ot = orc::transpose(o.codes, N, K);
      const std::vector<float> st = orc::transpose(o.scales, N / 128, K / 128);
      CHECK(std::memcmp(fwd.codes.ptr() + e * N * K, o.codes.data(), o.codes.size()) == 0);
      CHECK(std::memcmp(fwd.scales.ptr() + e * tiles, o.scales.data(), o.scales.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(dgr.codes.ptr() + e * N * K, ot.data(), ot.size()) == 0);
      CHECK(std::memcmp(dgr.scales.ptr() + e * tiles, st.data(), st.size() * sizeof(float)) == 0);
      // and the dense 128x128 quantizer of the same expert's slice agrees
      TensorF we({N, K});
      std::memcpy(we.ptr(), w.ptr() + e * N * K, static_cast<std::size_t>(N * K) * sizeof(float));
      const Quantized d = quantize_weight(we, opt);
      CHECK(std::memcmp(d.codes.ptr(), o.codes.data(), o.codes.size()) == 0);
      CHECK(std::memcmp(d.scales.ptr(), o.scales.data(), o.scales.size() * sizeof(float)) == 0);
    }
    CHECK(fwd.stats.elements == total.elements);
    CHECK(fwd.stats.saturated == total.saturated);
    CHECK(fwd.stats.underflow == total.underflow);
    CHECK(dgr.stats.saturated == total.saturated);
  }
}

TEST_CASE("K-grouped flat lhs/rhs equal per-expert transposed-lhs / 128x1 results") {
  const std::int64_t D = 384;
  struct Case {
    std::vector<std::int32_t> offs;
    QuantOptions opt;
  };
  const Case cases[] = {
      {{256, 640, 768}, {}},
      {{256, 512, 768}, {}},
      {{128, 384, 512, 768, 1152, 1280, 1664, 2048}, {}},
      {{256, 256, 512}, {}},                                    // an empty expert
      {{256, 640, 768}, {64, false, Fp8Format::e4m3}},
      {{256, 768, 1024}, {256, true, Fp8Format::e4m3}},
      {{128, 384, 512, 768, 1152, 1280, 1664, 2048}, {128, true, Fp8Format::e5m2}},
  };
  std::uint32_t v = 0;
  for (const Case& cs : cases) {
    const std::vector<std::int32_t>& offs = cs.offs;
    const QuantOptions& opt = cs.opt;
    const std::int64_t M = offs.back(), B = opt.block;
    const std::uint64_t seed = test::seed_for(600 + v++);
    CAPTURE(seed);
    CAPTURE(M);
    CAPTURE(B);
    CAPTURE(opt.pow2_scales);
    const std::string fmt = fmt_name(opt.format);
    CAPTURE(fmt);
    const TensorF x = random_input({M, D}, seed, 1, Dtype::fp32);
    const Quantized ql = quantize_kgrouped_lhs(x, offs, opt);
    const Quantized qr = quantize_kgrouped_rhs(x, offs, opt);
    // Oracle: per expert, the (M_e, D) slice quantized on its own, placed at the expert's columns
    // (lhs codes (D, M), scales (D, M/B)) or rows (rhs codes (M, D), scales (M/B, D)).
    orc::Result ol{{D, M}, {D, M / B}, std::vector<std::uint8_t>(static_cast<std::size_t>(D * M)),
                   std::vector<float>(static_cast<std::size_t>(D * (M / B))), {}};
    orc::Result orr{{M, D}, {M / B, D}, {}, {}, {}};
    std::int64_t start = 0;
    for (std::size_t e = 0; e < offs.size(); ++e) {
      CAPTURE(e);
      const std::int64_t Me = offs[e] - start;
      const std::vector<float> slice(x.data.begin() + start * D, x.data.begin() + (start + Me) * D);
      const orc::Result lt = orc::act_lhs_t(slice, Me, D, oracle_opts(opt));  // (D, Me), (D, Me/B)
      for (std::int64_t d = 0; d < D; ++d) {
        for (std::int64_t j = 0; j < Me; ++j) ol.codes[static_cast<std::size_t>(d * M + start + j)] = lt.codes[static_cast<std::size_t>(d * Me + j)];
        for (std::int64_t j = 0; j < Me / B; ++j) ol.scales[static_cast<std::size_t>(d * (M / B) + start / B + j)] = lt.scales[static_cast<std::size_t>(d * (Me / B) + j)];
      }
      ol.stats.add(lt.stats);
      const orc::Result rr = orc::act_rhs(slice, Me, D, oracle_opts(opt));  // (Me, D), (Me/B, D)
      orr.codes.insert(orr.codes.end(), rr.codes.begin(), rr.codes.end());
      orr.scales.insert(orr.scales.end(), rr.scales.begin(), rr.scales.end());
      orr.stats.add(rr.stats);
      // the dense quantizers on the same slice agree with the flat K-grouped ones
      if (Me > 0) {
        TensorF xs({Me, D});
        xs.data = slice;
        const Quantized dl = quantize_act_lhs_t(xs, opt), dr = quantize_act_rhs(xs, opt);
        bool same_l = true;
        for (std::int64_t d = 0; d < D; ++d) {
          same_l = same_l && std::memcmp(dl.codes.ptr() + d * Me, ql.codes.ptr() + d * M + start, static_cast<std::size_t>(Me)) == 0 &&
                   std::memcmp(dl.scales.ptr() + d * (Me / B), ql.scales.ptr() + d * (M / B) + start / B, static_cast<std::size_t>(Me / B) * sizeof(float)) == 0;
        }
        CHECK(same_l);
        CHECK(std::memcmp(dr.codes.ptr(), qr.codes.ptr() + start * D, static_cast<std::size_t>(Me * D)) == 0);
        CHECK(std::memcmp(dr.scales.ptr(), qr.scales.ptr() + (start / B) * D, static_cast<std::size_t>((Me / B) * D) * sizeof(float)) == 0);
      }
      start = offs[e];
    }
    CHECK(ql.recipe == Recipe::kgrouped_lhs);
    CHECK(qr.recipe == Recipe::kgrouped_rhs);
    check_same(ql, ol, opt.format);
    check_same(qr, orr, opt.format);
  }
}

TEST_CASE("statistics: underflow and saturation counts on data with outliers") {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const std::uint64_t seed = test::seed_for(700 + static_cast<std::uint64_t>(f));
    CAPTURE(seed);
    const std::string fmt = fmt_name(f);
    CAPTURE(fmt);
    TensorF x = random_input({512, 1024}, seed, 1, Dtype::bf16);
    // One outlier in every third 1x128 block pushes its small neighbours below half the minimum
    // code: with the outlier ~2^g, |x| < 2^g * 2^-(bits of range) underflows (e4m3: 448 / 2^-10
    // ~ 2^18.8, so g = 16 catches |x| < ~0.4; e5m2: 57344 / 2^-17 ~ 2^32.8, g = 30 catches < ~0.15).
    const float gain = f == Fp8Format::e4m3 ? 0x1p16f : 0x1p30f;
    for (std::int64_t r = 0; r < 512; ++r) {
      for (std::int64_t b = r % 3; b < 8; b += 3) x(r, b * 128 + (r * 7 + b) % 128) *= gain;
    }
    const QuantOptions opt{128, false, f};
    const orc::Result o = orc::act_lhs(x.data, 512, 1024, oracle_opts(opt));
    const Quantized q = quantize_act_lhs(x, opt);
    check_same(q, o, f);
    CHECK(o.stats.underflow > 1000);    // the outlier blocks really underflow
    CHECK(o.stats.saturated >= 512 * 8);  // every block's amax element lands on +-max
    const Quantized qr = quantize_act_rhs(x, opt);
    check_same(qr, orc::act_rhs(x.data, 512, 1024, oracle_opts(opt)), f);
  }
}

TEST_CASE("non-finite inputs: NaN and Inf blocks follow the formula and are counted") {
  const std::uint64_t seed = test::seed_for(800);
  CAPTURE(seed);
  TensorF x = random_input({4, 512}, seed, 1, Dtype::fp32);
  x(1, 130) = std::numeric_limits<float>::quiet_NaN();  // row 1, block 1
  x(2, 300) = std::numeric_limits<float>::infinity();   // row 2, block 2
  x(3, 5) = -std::numeric_limits<float>::infinity();    // row 3, block 0
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const std::string fmt = fmt_name(f);
    CAPTURE(fmt);
    const QuantOptions opt{128, false, f};
    const Quantized q = quantize_act_lhs(x, opt);
    check_same(q, orc::act_lhs(x.data, 4, 512, oracle_opts(opt)), f);
    CHECK(q.stats.nonfinite_inputs == 3);
    // NaN block: amax NaN -> scale NaN -> every code NaN.
    CHECK(std::isnan(q.scales(1, 1)));
    for (std::int64_t c = 128; c < 256; ++c) CHECK(is_nan_code(q.codes(1, c), f));
    // Inf block: amax Inf -> multiplier 0, s_inv = 1/0 = Inf; finite x * 0 = 0, Inf * 0 = NaN.
    CHECK(q.scales(2, 2) == std::numeric_limits<float>::infinity());
    CHECK(is_nan_code(q.codes(2, 300), f));
    CHECK((q.codes(2, 301) & 0x7f) == 0);
    CHECK(is_nan_code(q.codes(3, 5), f));
    // neighbouring blocks are untouched
    CHECK(std::isfinite(q.scales(1, 0)));
    CHECK(std::isfinite(q.scales(1, 2)));
  }
}

TEST_CASE("dequantize is decode(code) * s_inv in fp32") {
  const std::uint64_t seed = test::seed_for(900);
  CAPTURE(seed);
  const TensorF x = random_input({300, 512}, seed, 1, Dtype::fp32);
  for (const QuantOptions& opt : {QuantOptions{}, QuantOptions{64, true, Fp8Format::e5m2}}) {
    const Quantized q = quantize_act_rhs(x, opt);
    const TensorF d = dequantize(q);
    std::int64_t bad = 0;
    for (std::int64_t r = 0; r < 300; ++r) {
      for (std::int64_t c = 0; c < 512; ++c) {
        const float want = static_cast<float>(orc::decode(q.codes(r, c), opt.format)) * q.scales(r / opt.block, c);
        bad += bits_of(d(r, c)) != bits_of(want);
      }
    }
    CHECK(bad == 0);
  }
  // 3-D codes: grouped weight in the dgrad orientation, codes (E, K, N), scales (E, K/B, N/B).
  const TensorF w = random_input({2, 128, 256}, seed, 2, Dtype::bf16);
  const Quantized g = quantize_grouped_weight(w, WeightOrientation::dgrad, QuantOptions{64, false, Fp8Format::e4m3});
  const TensorF dg = dequantize(g);
  std::int64_t bad = 0;
  for (std::int64_t e = 0; e < 2; ++e) {
    for (std::int64_t k = 0; k < 256; ++k) {
      for (std::int64_t n = 0; n < 128; ++n) {
        const float want = static_cast<float>(orc::decode(g.codes(e, k, n), Fp8Format::e4m3)) * g.scales(e, k / 64, n / 64);
        bad += bits_of(dg(e, k, n)) != bits_of(want);
      }
    }
  }
  CHECK(bad == 0);
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("errors name the dimension, the value and the fix") {
  const std::uint64_t seed = test::seed_for(1000);
  CAPTURE(seed);
  const TensorF x = test::random_tensor({4, 1000}, seed, 1);
  const std::string k = error_of([&] { quantize_act_lhs(x, QuantOptions{}); });
  CAPTURE(k);
  CHECK(k.find("K") != std::string::npos);
  CHECK(k.find("1000") != std::string::npos);
  CHECK(k.find("128") != std::string::npos);
  CHECK(k.find("pad") != std::string::npos);

  const TensorF w = test::random_tensor({200, 256}, seed, 2);
  const std::string n = error_of([&] { quantize_weight(w, QuantOptions{}); });
  CAPTURE(n);
  CHECK(n.find("N") != std::string::npos);
  CHECK(n.find("200") != std::string::npos);

  const TensorF a = test::random_tensor({384, 128}, seed, 3);
  const std::vector<std::int32_t> offs = {129, 384};
  for (const std::string& g : {error_of([&] { quantize_kgrouped_lhs(a, offs, QuantOptions{}); }),
                               error_of([&] { quantize_kgrouped_rhs(a, offs, QuantOptions{}); })}) {
    CAPTURE(g);
    CHECK(g.find("129") != std::string::npos);
    CHECK(g.find("padding") != std::string::npos);
  }
  const std::vector<std::int32_t> short_offs = {128, 256};
  const std::string m = error_of([&] { quantize_kgrouped_lhs(a, short_offs, QuantOptions{}); });
  CAPTURE(m);
  CHECK(m.find("256") != std::string::npos);
  CHECK(m.find("384") != std::string::npos);

  const std::string b = error_of([&] { quantize_act_lhs(test::random_tensor({4, 400}, seed, 4), QuantOptions{100}); });
  CAPTURE(b);
  CHECK(b.find("100") != std::string::npos);
  CHECK(b.find("64, 128 or 256") != std::string::npos);
  CHECK(error_of([] { check_quant_options(QuantOptions{100}); }) != "(no error)");
  CHECK(error_of([] { parse_format("e3m4"); }).find("e3m4") != std::string::npos);
}

}  // namespace

namespace {

// Statistics of one operand computed from the oracle's codes and scales and the block geometry
// (rows x cols blocks of an (R, C) matrix), without reference/'s layout or scale code.
struct OracleStats {
  std::int64_t blocks = 0, empty = 0, underflow = 0, overflow = 0, nonfinite = 0, scaled = 0;
  double smin = INFINITY, smax = -INFINITY, ssum = 0, ssq = 0, amin = INFINITY, amax = -INFINITY;
};

OracleStats oracle_stats(const std::vector<float>& x, std::int64_t R, std::int64_t C, std::int64_t br, std::int64_t bc,
                         const orc::Result& o, Fp8Format f) {
  OracleStats s;
  const std::int64_t nbr = (R + br - 1) / br, nbc = (C + bc - 1) / bc;
  const double fmax = orc::code_table(f).max_value;
  for (std::int64_t i = 0; i < nbr; ++i) {
    for (std::int64_t j = 0; j < nbc; ++j) {
      ++s.blocks;
      float a = 0;
      bool nonzero = false, bad = false;
      for (std::int64_t r = i * br; r < std::min(R, (i + 1) * br); ++r) {
        for (std::int64_t c = j * bc; c < std::min(C, (j + 1) * bc); ++c) {
          const float v = x[static_cast<std::size_t>(r * C + c)];
          if (!std::isfinite(v)) {
            bad = true;
            ++s.nonfinite;
            continue;
          }
          nonzero = nonzero || v != 0.0f;
          a = std::max(a, std::fabs(v));
        }
      }
      if (!nonzero && !bad) {
        ++s.empty;
        continue;
      }
      if (bad) continue;
      const double sinv = o.scales[static_cast<std::size_t>(i * nbc + j)];
      ++s.scaled;
      s.smin = std::min(s.smin, sinv), s.smax = std::max(s.smax, sinv), s.ssum += sinv, s.ssq += sinv * sinv;
      s.amin = std::min(s.amin, static_cast<double>(a)), s.amax = std::max(s.amax, static_cast<double>(a));
      for (std::int64_t r = i * br; r < std::min(R, (i + 1) * br); ++r) {
        for (std::int64_t c = j * bc; c < std::min(C, (j + 1) * bc); ++c) {
          const float v = x[static_cast<std::size_t>(r * C + c)];
          if (std::fabs(v) / sinv > fmax * (1.0 + 0x1p-20)) ++s.overflow;
          if (v != 0.0f && orc::decode(o.codes[static_cast<std::size_t>(r * C + c)], f) == 0.0) ++s.underflow;
        }
      }
    }
  }
  return s;
}

void check_stats(const OperandStats& got, const OracleStats& want) {
  CHECK(got.blocks == want.blocks);
  CHECK(got.empty_blocks == want.empty);
  CHECK(got.scaled_blocks == want.scaled);
  CHECK(got.underflow == want.underflow);
  CHECK(got.overflow == want.overflow);
  CHECK(got.nonfinite == want.nonfinite);
  CHECK(got.scale_min == want.smin);
  CHECK(got.scale_max == want.smax);
  CHECK(got.amax_min == want.amin);
  CHECK(got.amax_max == want.amax);
  CHECK(got.dynamic_range() == want.amax / want.amin);
  const double n = static_cast<double>(want.scaled), mean = want.ssum / n;
  const double sd = std::sqrt(std::max(0.0, want.ssq / n - mean * mean));
  CHECK(got.scale_std() == doctest::Approx(sd).epsilon(1e-9));
}

}  // namespace

TEST_CASE("operand statistics: scales, dynamic range, underflow, overflow, non-finite, empty blocks left out") {
  for (const bool pow2 : {false, true}) {
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      const std::uint64_t seed = test::seed_for(900 + 2 * static_cast<std::uint64_t>(f) + pow2);
      CAPTURE(seed);
      CAPTURE(pow2);
      const std::string fmt = fmt_name(f);
      CAPTURE(fmt);
      // 1x128 activations (M, K) with padding rows (all zero), an outlier per third block, one
      // NaN and one Inf; then the 128x128 tiles of a weight with one all-zero tile.
      const std::int64_t M = 384, K = 512;
      TensorF x = random_input({M, K}, seed, 1, Dtype::bf16);
      for (std::int64_t r = 300; r < M; ++r) {
        for (std::int64_t c = 0; c < K; ++c) x(r, c) = 0.0f;  // token-group padding
      }
      const float gain = f == Fp8Format::e4m3 ? 0x1p16f : 0x1p30f;
      for (std::int64_t r = 0; r < 300; r += 3) x(r, (r * 5) % K) *= gain;
      x(7, 9) = std::numeric_limits<float>::quiet_NaN();
      x(11, 200) = std::numeric_limits<float>::infinity();
      const QuantOptions opt{128, pow2, f};
      const Quantized q = quantize_act_lhs(x, opt);
      const OperandStats s = operand_stats(x, q);
      const orc::Result o = orc::act_lhs(x.data, M, K, oracle_opts(opt));
      check_stats(s, oracle_stats(x.data, M, K, 1, 128, o, f));
      CHECK(s.overflow == 0);  // every block's scale is made from its own amax
      // A scale not made from the data (a user's, four times too small for one block) leaves the
      // block's values above a quarter of its amax beyond the format's range.
      Quantized shrunk = q;
      orc::Result o_shrunk = o;
      shrunk.scales.data[5] /= 4.0f;
      o_shrunk.scales[5] /= 4.0f;
      const OperandStats so = operand_stats(x, shrunk);
      check_stats(so, oracle_stats(x.data, M, K, 1, 128, o_shrunk, f));
      CHECK(so.overflow > 0);
      CHECK(s.empty_blocks == (M - 300) * (K / 128));
      CHECK(s.nonfinite == 2);
      CHECK(s.underflow > 0);
      CHECK(s.dynamic_range() > 1e3);

      TensorF w = random_input({256, 384}, seed, 2, Dtype::bf16);
      for (std::int64_t r = 128; r < 256; ++r) {
        for (std::int64_t c = 256; c < 384; ++c) w(r, c) = 0.0f;
      }
      const Quantized qw = quantize_weight(w, opt);
      const OperandStats sw = operand_stats(w, qw);
      check_stats(sw, oracle_stats(w.data, 256, 384, 128, 128, orc::weight(w.data.data(), 256, 384, oracle_opts(opt)), f));
      CHECK(sw.empty_blocks == 1);
      // Merging two operands equals the statistics of both at once.
      OperandStats both = s;
      both.merge(sw);
      CHECK(both.blocks == s.blocks + sw.blocks);
      CHECK(both.scale_min == std::min(s.scale_min, sw.scale_min));
      CHECK(both.amax_max == std::max(s.amax_max, sw.amax_max));
    }
  }
}
