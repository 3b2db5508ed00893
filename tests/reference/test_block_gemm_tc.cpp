// The fast hopper-tc path (reference/block_gemm_tc.cpp) against the scalar path, which runs
// reference/tensor_core.hpp's tc_step per output element: bitwise, on fresh random data, for both
// micro-kernels (AVX2 and, where the CPU has it, AVX-512), every pass's operand layout and scale
// config, both promotion families, bf16 and fp32 outputs, blocks 64/128/256, cuBLASLt split-K
// runs, partial tiles, empty experts and adversarial codes and scales.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "reference/block_gemm_tc.hpp"
#include "reference/error.hpp"
#include "reference/gemm.hpp"
#include "support/test_support.hpp"

using namespace fp8moe;

namespace {

std::vector<TcIsa> isas() {
  std::vector<TcIsa> v{TcIsa::avx2};
  if (tc_have_avx512()) v.push_back(TcIsa::avx512);
  return v;
}
const char* isa_name(TcIsa i) { return i == TcIsa::avx2 ? "avx2" : i == TcIsa::avx512 ? "avx512" : "best"; }

GemmOptions tc_opts(Promotion p, OutDtype out, int block) {
  GemmOptions o;
  o.mode = Mode::hopper_tc;
  o.promotion = p;
  o.out = out;
  o.quant.block = block;
  return o;
}

// What a row of an operand holds (adversarial data cycles through every kind).
enum class Rows : std::uint8_t {
  uniform,       // any finite e4m3 code: zeros, subnormals, normals up to 448, both signs
  sparse,        // whole k32 steps of zeros (steps that only pass C through), the rest uniform
  subnormal,     // codes 0x00..0x07 with either sign: products at the smallest exponents
  outlier,       // the largest codes (0x78..0x7e): E at its top, other terms truncated away
  cancel,        // pairs: lhs a[k+1] = a[k], rhs b[k+1] = -b[k], so products cancel exactly
  wide,          // the largest and the smallest codes mixed: heavy truncation of small terms
};
constexpr int kRowKinds = 6;

std::uint8_t finite_code(std::mt19937_64& g) {
  for (;;) {
    const auto c = static_cast<std::uint8_t>(g());
    if ((c & 0x7fu) != 0x7fu) return c;
  }
}

// One logical row of kc codes of a given kind; `rhs` picks the sign-flipping side of `cancel`.
std::vector<std::uint8_t> make_row(Rows kind, std::int64_t kc, bool rhs, std::mt19937_64& g) {
  std::vector<std::uint8_t> r(static_cast<std::size_t>(kc));
  auto sign = [&] { return static_cast<std::uint8_t>(g() & 0x80u); };
  for (std::int64_t k = 0; k < kc; ++k) {
    std::uint8_t& c = r[static_cast<std::size_t>(k)];
    switch (kind) {
      case Rows::uniform: c = finite_code(g); break;
      case Rows::sparse: c = ((k / kTcStepK) * 0x9e37u + static_cast<std::uint64_t>(kc)) % 3 != 0 ? 0 : finite_code(g); break;
      case Rows::subnormal: c = static_cast<std::uint8_t>(sign() | (g() & 0x07u)); break;
      case Rows::outlier: c = static_cast<std::uint8_t>(sign() | (0x78u + g() % 7)); break;
      case Rows::cancel:
        if (k % 2 == 0) {
          c = finite_code(g);
        } else {
          c = rhs ? static_cast<std::uint8_t>(r[static_cast<std::size_t>(k - 1)] ^ 0x80u) : r[static_cast<std::size_t>(k - 1)];
        }
        break;
      case Rows::wide: c = static_cast<std::uint8_t>(sign() | (g() % 2 ? 0x70u + g() % 15 : g() % 16)); break;
    }
  }
  return r;
}

// A scale s_inv: ordinary (2^[-12, 4], any mantissa), or huge / tiny (2^[60, 70) / 2^(-70, -60]),
// so fl(sa*sb) and the promoted sums overflow to Inf or fall into fp32 subnormals.
float make_scale(int kind, std::mt19937_64& g) {
  const float mant = 1.0f + static_cast<float>(g() % 8388608) * 0x1p-23f;
  const int e = kind == 1 ? 60 + static_cast<int>(g() % 10) : kind == 2 ? -60 - static_cast<int>(g() % 10)
                                                                          : -12 + static_cast<int>(g() % 17);
  return std::ldexp(mant, e);
}

// One operand in its own storage: (rows, kc) codes, row-major (code(r,k) = codes[r*kc + k]) or
// transposed (codes[k*rows + r], as dgrad reads W and wgrad reads A); scales (ceil(rows/rblock),
// kc/B) row-major.
struct Operand {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  BlockOperand v;
};

Operand make_operand(std::int64_t rows, std::int64_t kc, int B, int rblock, bool transposed, bool rhs,
                     bool adversarial, std::mt19937_64& g) {
  Operand o;
  o.codes.resize(static_cast<std::size_t>(rows * kc));
  for (std::int64_t r = 0; r < rows; ++r) {
    const Rows kind = adversarial ? static_cast<Rows>((r + (rhs ? 2 : 0)) % kRowKinds) : Rows::uniform;
    // outlier columns of the rhs: every 17th row all at the top of the range
    const bool outlier_col = adversarial && rhs && r % 17 == 5;
    const std::vector<std::uint8_t> row = make_row(outlier_col ? Rows::outlier : kind, kc, rhs, g);
    for (std::int64_t k = 0; k < kc; ++k) {
      o.codes[static_cast<std::size_t>(transposed ? k * rows + r : r * kc + k)] = row[static_cast<std::size_t>(k)];
    }
  }
  const std::int64_t srows = (rows + rblock - 1) / rblock, nb = kc / B;
  o.scales.resize(static_cast<std::size_t>(std::max<std::int64_t>(srows * nb, 1)));
  for (std::int64_t s = 0; s < srows; ++s) {
    const int kind = adversarial ? static_cast<int>(s % 7 == 3) + 2 * static_cast<int>(s % 7 == 5) : 0;
    for (std::int64_t b = 0; b < nb; ++b) o.scales[static_cast<std::size_t>(s * nb + b)] = make_scale(kind, g);
  }
  o.v = transposed ? BlockOperand{o.codes.data(), 1, rows, o.scales.data(), nb, 1, rblock, rows}
                   : BlockOperand{o.codes.data(), kc, 1, o.scales.data(), nb, 1, rblock, rows};
  return o;
}

std::string bits_of(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (fp32 bits 0x%08x)", v, f32_bits(static_cast<float>(v)));
  return buf;
}

// Bitwise comparison of two (rows, cols) outputs; the first mismatch, described, or "".
std::string first_mismatch(const std::vector<double>& fast, const std::vector<double>& slow, std::int64_t cols) {
  for (std::size_t i = 0; i < fast.size(); ++i) {
    if (std::memcmp(&fast[i], &slow[i], sizeof(double)) != 0) {
      return fp8moe::cat("element (", static_cast<std::int64_t>(i) / cols, ",", static_cast<std::int64_t>(i) % cols,
                         "): fast ", bits_of(fast[i]), " scalar ", bits_of(slow[i]));
    }
  }
  return "";
}

// Outputs of the kinds adversarial data must reach, so the comparison covers them (a generator
// that stopped producing them would fail here, not pass quietly).
struct Reached {
  std::int64_t zero = 0, inf = 0, subnormal = 0;
  void add(const std::vector<double>& y) {
    for (double v : y) {
      const float f = static_cast<float>(v);
      zero += f == 0.0f;
      inf += std::isinf(f);
      subnormal += std::fpclassify(f) == FP_SUBNORMAL;
    }
  }
};

// The fast path (each micro-kernel) against block_gemm_scalar on one GEMM, bitwise.
void check_tc(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, const GemmOptions& o, int splits,
              const std::string& what, Reached* reached = nullptr) {
  const std::size_t n = static_cast<std::size_t>(L.rows * R.rows);
  std::vector<double> slow(n, -1.0);
  block_gemm_scalar(L, R, kc, slow.data(), R.rows, o, splits);
  if (reached != nullptr) reached->add(slow);
  for (TcIsa isa : isas()) {
    std::vector<double> fast(n, std::nan(""));  // every element must be written
    const GemmTask t{L, R, kc, fast.data(), R.rows, splits};
    const std::vector<std::size_t> refused = block_gemm_tc(std::span<const GemmTask>(&t, 1), o, isa);
    const std::string bad = first_mismatch(fast, slow, R.rows);
    const std::string ctx = fp8moe::cat(what, " ", isa_name(isa), " ", promotion_name(o.promotion), " out ",
                                        out_dtype_name(o.out), " B ", o.quant.block, " splits ", splits, ": ", bad);
    INFO(ctx);
    CHECK(refused.empty());
    CHECK(bad.empty());
  }
}

// The three pass classes as operand layouts: fwd (W row-major, 128x128-style scales), dgrad (W
// read transposed), wgrad (both 1 x B along tokens, A read transposed): act x weight twice, then
// act x act.
struct PassLayout {
  const char* name;
  int rhs_rblock;  // 0: the block size B
  bool rhs_transposed;
};
constexpr PassLayout kLayouts[] = {{"fwd", 0, false}, {"dgrad", 0, true}, {"wgrad", 1, true}};

}  // namespace

TEST_CASE("hopper-tc fast path equals tc_step bitwise: every pass, promotion, dtype and block") {
  const std::uint64_t seed = test::seed_for(301);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  // 150 x 200: partial micro-tiles (12/6 rows, 16/8 columns) and a partial second macro-tile row.
  const std::int64_t M = 150, N = 200;
  Reached reached;
  for (int B : {64, 128, 256}) {
    const std::int64_t K = 3 * static_cast<std::int64_t>(B);
    for (const PassLayout& pl : kLayouts) {
      for (bool adversarial : {false, true}) {
        const int rb = pl.rhs_rblock == 0 ? B : pl.rhs_rblock;
        const Operand L = make_operand(M, K, B, 1, false, false, adversarial, g);
        const Operand R = make_operand(N, K, B, rb, pl.rhs_transposed, true, adversarial, g);
        for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
          for (OutDtype od : {OutDtype::bf16, OutDtype::fp32}) {
            check_tc(L.v, R.v, K, tc_opts(p, od, B), 1, fp8moe::cat(pl.name, adversarial ? " adversarial" : " uniform"),
                     adversarial ? &reached : nullptr);
          }
        }
      }
    }
  }
  // exact zeros (cancelling rows), Inf (huge x huge scales), fp32 subnormals (tiny x tiny)
  CHECK(reached.zero > 0);
  CHECK(reached.inf > 0);
  CHECK(reached.subnormal > 0);
}

TEST_CASE("hopper-tc fast path equals the scalar path with cuBLASLt's split-K runs") {
  const std::uint64_t seed = test::seed_for(302);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  // 52 blocks of 128: q = 4 * ceil(52 / (4 S)) leaves a short last run and, for S >= 8, empty
  // trailing runs; blocks of 64 the same with 104 blocks.
  const std::int64_t M = 30, N = 40;
  for (int B : {128, 64}) {
    const std::int64_t K = 52 * 128;
    for (const PassLayout& pl : {kLayouts[0], kLayouts[2]}) {
      const int rb = pl.rhs_rblock == 0 ? B : pl.rhs_rblock;
      const Operand L = make_operand(M, K, B, 1, false, false, true, g);
      const Operand R = make_operand(N, K, B, rb, pl.rhs_transposed, true, true, g);
      for (int s : {1, 2, 3, 4, 6, 8, 11, 12}) {
        for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
          for (OutDtype od : {OutDtype::bf16, OutDtype::fp32}) check_tc(L.v, R.v, K, tc_opts(p, od, B), s, pl.name);
        }
      }
    }
  }
}

TEST_CASE("hopper-tc batches: many macro-tiles, empty experts, and a NaN operand routed to the scalar path") {
  const std::uint64_t seed = test::seed_for(303);
  CAPTURE(seed);
  std::mt19937_64 g(seed);
  const int B = 128;
  // expert 0: 200 x 300 (3 row macro-tiles, 2 column tiles, all partial); expert 1: no tokens in
  // wgrad (kc = 0: the output is +0); expert 2: a NaN code; expert 3: 1 x 17.
  const Operand L0 = make_operand(200, 512, B, 1, false, false, true, g);
  const Operand R0 = make_operand(300, 512, B, 1, true, true, true, g);
  const Operand L1 = make_operand(20, 0, B, 1, false, false, false, g);
  const Operand R1 = make_operand(24, 0, B, 1, true, true, false, g);
  Operand L2 = make_operand(40, 256, B, 1, false, false, false, g);
  const Operand R2 = make_operand(33, 256, B, 1, true, true, false, g);
  L2.codes[static_cast<std::size_t>(7 * 256 + 200)] = 0xff;  // NaN, row 7, k = 200
  const Operand L3 = make_operand(1, 384, B, 1, false, false, true, g);
  const Operand R3 = make_operand(17, 384, B, 1, true, true, true, g);
  const std::vector<std::pair<const Operand*, const Operand*>> ops{{&L0, &R0}, {&L1, &R1}, {&L2, &R2}, {&L3, &R3}};
  for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
    const GemmOptions o = tc_opts(p, OutDtype::fp32, B);
    std::vector<std::vector<double>> batch(ops.size()), direct(ops.size()), slow(ops.size());
    std::vector<GemmTask> tasks, direct_tasks;
    for (std::size_t e = 0; e < ops.size(); ++e) {
      const BlockOperand& L = ops[e].first->v;
      const BlockOperand& R = ops[e].second->v;
      const std::int64_t kc = static_cast<std::int64_t>(ops[e].first->codes.size()) / L.rows;
      batch[e].assign(static_cast<std::size_t>(L.rows * R.rows), std::nan(""));
      direct[e] = batch[e];
      slow[e].assign(batch[e].size(), -1.0);
      tasks.push_back({L, R, kc, batch[e].data(), R.rows, e == 0 ? 3 : 1});
      direct_tasks.push_back({L, R, kc, direct[e].data(), R.rows, e == 0 ? 3 : 1});
      block_gemm_scalar(L, R, kc, slow[e].data(), R.rows, o, e == 0 ? 3 : 1);
    }
    block_gemm_batch(tasks, o);
    const std::vector<std::size_t> refused = block_gemm_tc(direct_tasks, o);
    CHECK(refused == std::vector<std::size_t>{2});
    CHECK(std::isnan(direct[2][0]));  // a refused task's output is left alone
    for (std::size_t e = 0; e < ops.size(); ++e) {
      const std::string bad = first_mismatch(batch[e], slow[e], ops[e].second->v.rows);
      const std::string ctx = fp8moe::cat("expert ", e, " ", promotion_name(p), ": ", bad);
      INFO(ctx);
      CHECK(bad.empty());
      if (e != 2) CHECK(first_mismatch(direct[e], slow[e], ops[e].second->v.rows).empty());
    }
    // the NaN reaches exactly row 7 of expert 2; the empty expert is +0
    for (std::int64_t j = 0; j < 33; ++j) CHECK(std::isnan(batch[2][static_cast<std::size_t>(7 * 33 + j)]));
    CHECK(!std::isnan(batch[2][static_cast<std::size_t>(6 * 33)]));
    CHECK(std::signbit(batch[1][0]) == false);
    CHECK(batch[1][0] == 0.0);
  }
  // e5m2 is the scalar path's alone: the fast path refuses it, block_gemm routes it there
  GemmOptions o5 = tc_opts(Promotion::cublas, OutDtype::fp32, B);
  o5.quant.format = Fp8Format::e5m2;
  std::vector<double> y5(static_cast<std::size_t>(40 * 33), std::nan("")), s5(y5.size());
  const GemmTask t5{L2.v, R2.v, 256, y5.data(), 33, 1};
  CHECK_THROWS_AS((void)block_gemm_tc(std::span<const GemmTask>(&t5, 1), o5), Error);
  block_gemm(L2.v, R2.v, 256, y5.data(), 33, o5);
  block_gemm_scalar(L2.v, R2.v, 256, s5.data(), 33, o5);
  CHECK(first_mismatch(y5, s5, 33).empty());
}

TEST_CASE("hopper-tc grouped passes on quantized data equal the scalar path per expert") {
  const std::uint64_t seed = test::seed_for(304);
  CAPTURE(seed);
  const std::vector<std::int32_t> offs{128, 128, 384};  // expert 1 has no tokens
  const std::int64_t M = 384, N = 256, K = 384, E = 3;
  QuantOptions qo;
  const TensorF A = test::random_tensor({M, K}, seed, kTensorA, Dist::student_t3);
  const TensorF W = test::random_tensor({E, N, K}, seed, kTensorW);
  const TensorF G = test::random_tensor({M, N}, seed, kTensorGradOut);
  const Quantized aq = quantize_act_lhs(A, qo), gq = quantize_act_lhs(G, qo);
  const Quantized wq = quantize_grouped_weight(W, WeightOrientation::fwd, qo);
  const Quantized wt = quantize_grouped_weight(W, WeightOrientation::dgrad, qo);  // (E,K,N)
  const Quantized gt = quantize_kgrouped_lhs(G, offs, qo), ar = quantize_kgrouped_rhs(A, offs, qo);
  for (Promotion p : {Promotion::deepgemm, Promotion::cublas}) {
    GemmOptions o = tc_opts(p, OutDtype::bf16, 128);
    o.split_k = {2, 1, 3};
    const TensorD fwd = grouped_fwd_q(aq, wq, offs, o), dgrad = grouped_dgrad_q(gq, wt, offs, o);
    const TensorD wgrad = grouped_wgrad_q(gt, ar, offs, o);
    std::int64_t s = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      const std::int64_t Me = offs[static_cast<std::size_t>(e)] - s;
      const int sp = o.split_k[static_cast<std::size_t>(e)];
      // the layouts of reference/quantize.hpp's table, as reference/grouped.cpp reads them
      const BlockOperand La{aq.codes.ptr() + s * K, K, 1, aq.scales.ptr() + s * (K / 128), K / 128, 1, 1, Me};
      const BlockOperand Rw{wq.codes.ptr() + e * N * K, K, 1, wq.scales.ptr() + e * (N / 128) * (K / 128), K / 128, 1, 128, N};
      const BlockOperand Lg{gq.codes.ptr() + s * N, N, 1, gq.scales.ptr() + s * (N / 128), N / 128, 1, 1, Me};
      const BlockOperand Rt{wt.codes.ptr() + e * K * N, N, 1, wt.scales.ptr() + e * (K / 128) * (N / 128), N / 128, 1, 128, K};
      const BlockOperand Lt{gt.codes.ptr() + s, M, 1, gt.scales.ptr() + s / 128, M / 128, 1, 1, N};
      const BlockOperand Ra{ar.codes.ptr() + s * K, 1, K, ar.scales.ptr() + (s / 128) * K, 1, K, 1, K};
      std::vector<double> y_f(static_cast<std::size_t>(Me * N)), y_d(static_cast<std::size_t>(Me * K)),
          y_w(static_cast<std::size_t>(N * K));
      block_gemm_scalar(La, Rw, K, y_f.data(), N, o, sp);
      block_gemm_scalar(Lg, Rt, N, y_d.data(), K, o, sp);
      block_gemm_scalar(Lt, Ra, Me, y_w.data(), K, o, sp);
      const std::string ctx = fp8moe::cat("expert ", e, " ", promotion_name(p));
      INFO(ctx);
      // an empty expert has no rows: memcmp on its null data would be undefined
      CHECK((y_f.empty() || std::memcmp(y_f.data(), fwd.ptr() + s * N, y_f.size() * sizeof(double)) == 0));
      CHECK((y_d.empty() || std::memcmp(y_d.data(), dgrad.ptr() + s * K, y_d.size() * sizeof(double)) == 0));
      CHECK(std::memcmp(y_w.data(), wgrad.ptr() + e * N * K, y_w.size() * sizeof(double)) == 0);
      s = offs[static_cast<std::size_t>(e)];
    }
  }
}
