// Blockwise FP8 GEMM on the CPU: the exact, promote-fp32 and hopper-tc modes (README.md,
// "Arithmetic modes"). The promotion and the tensor-core step are reference/tensor_core.hpp's.
//
// Both modes need the exact partial P of every 128-block. For e4m3 every code is an integer
// multiple of 2^-9 below 2^9, so a product is an integer multiple of 2^-18 below 2^36 and a
// block sum below 2^44 (B <= 256): exact in fp64 in any order. The fast path therefore decodes
// codes to fp64 "units" (value * 2^9, exact) and runs a register-blocked fp64 micro-kernel over
// one k-block at a time (GotoBLAS-style packing with kc = B), then folds P into the output tile
// with the block scales. e5m2 (units of 2^-16, products up to 2^64) and non-finite codes take
// the scalar path with int128 partials, and so do promote-fp32's cuBLASLt split-K runs. hopper-tc
// on e4m3 has its own fast path (block_gemm_tc.cpp, split-K runs included); the scalar path
// (tensor_core.hpp's step, per output element) keeps e5m2 and operands with a NaN code.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "reference/block_gemm_tc.hpp"
#include "reference/block_partial.hpp"
#include "reference/gemm.hpp"
#include "reference/tile_schedule.hpp"

namespace fp8moe {
namespace {

double i128_to_f64_scaled(__int128 p, int shift) {
  // Exact when |p| < 2^53 (always for e4m3); otherwise one rounding (e5m2, documented).
  const bool neg = p < 0;
  const unsigned __int128 m = neg ? static_cast<unsigned __int128>(-p) : static_cast<unsigned __int128>(p);
  const double hi = static_cast<double>(static_cast<std::uint64_t>(m >> 64)) * 0x1p64;
  const double d = hi + static_cast<double>(static_cast<std::uint64_t>(m));
  return std::ldexp(neg ? -d : d, -shift);
}

struct Combine {
  Mode mode;
  Promotion promo;
  ScaleConfig cfg;
  // fl(P*sa) before sb (cuBLASLt's act x act order) rather than fl(sa*sb) times P
  bool p_times_sa() const { return mode != Mode::exact && promo == Promotion::cublas && cfg == ScaleConfig::act_act; }
};

// Fold one block partial into the accumulator. acc_d for exact, acc_f for promote-fp32.
// P is given both as fp32 rounded once (pf) and as fp64 (pd).
inline void fold(const Combine& c, double pd, float pf, float sa, float sb, double& acc_d, float& acc_f) {
  if (c.mode == Mode::exact) {
    acc_d = std::fma(pd, static_cast<double>(sa) * static_cast<double>(sb), acc_d);
  } else {
    acc_f = promote(c.promo, c.cfg, pf, sa, sb, acc_f);
  }
}

inline double finish(const Combine& c, OutDtype out, double acc_d, float acc_f) {
  if (c.mode == Mode::exact) {
    if (out == OutDtype::bf16) return round_bf16(acc_d);
    if (out == OutDtype::fp32) return static_cast<double>(static_cast<float>(acc_d));
    return acc_d;
  }
  return out == OutDtype::bf16 ? static_cast<double>(round_bf16(acc_f)) : static_cast<double>(acc_f);
}

// fold() over one micro-tile row, with the mode hoisted out of the loop so each variant is a
// straight vectorizable loop. P holds exact block partials in units of 2^-18.
inline void fold_row(const Combine& c, const double* P, float sa, const float* sb, int n, double* acc_d,
                     float* acc_f) {
  constexpr double kUnit2 = 0x1p-18;  // (2^-9)^2
  // The two promoted loops are tensor_core.hpp's promote() written out per order, so each is a
  // straight loop; tests hold this path bitwise against the scalar one.
  if (c.mode == Mode::exact) {
    const double da = sa;
    for (int j = 0; j < n; ++j) acc_d[j] = std::fma(P[j] * kUnit2, da * static_cast<double>(sb[j]), acc_d[j]);
  } else if (!c.p_times_sa()) {
    for (int j = 0; j < n; ++j) acc_f[j] = std::fma(static_cast<float>(P[j] * kUnit2), sa * sb[j], acc_f[j]);
  } else {
    for (int j = 0; j < n; ++j) acc_f[j] = std::fma(static_cast<float>(P[j] * kUnit2) * sa, sb[j], acc_f[j]);
  }
}

bool have_avx512();  // run-time dispatch, defined with the kernels below

// round_bf16(double) over a row: 8 lanes at a time with AVX-512 where every lane is in bf16's
// normal range (the bit-exact RNE of reference/formats.hpp's fast branch, vectorized), the
// scalar function elsewhere.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void round_bf16_row_avx512(const double* x, int n, double* out) {
  int j = 0;
  const __m512i round = _mm512_set1_epi64((std::int64_t{1} << 44) - 1), one = _mm512_set1_epi64(1);
  const __m512i keep = _mm512_set1_epi64(~((std::int64_t{1} << 45) - 1));
  const __m512d lo = _mm512_set1_pd(0x1p-126), hi = _mm512_set1_pd(0x1p127);
  for (; j + 8 <= n; j += 8) {
    const __m512d v = _mm512_loadu_pd(x + j);
    const __m512d a = _mm512_abs_pd(v);
    const __mmask8 ok = _mm512_cmp_pd_mask(a, lo, _CMP_GE_OQ) & _mm512_cmp_pd_mask(a, hi, _CMP_LT_OQ);
    if (ok != 0xff) {
      for (int k = j; k < j + 8; ++k) out[k] = round_bf16(x[k]);
      continue;
    }
    __m512i u = _mm512_castpd_si512(v);
    u = _mm512_add_epi64(u, _mm512_add_epi64(round, _mm512_and_si512(_mm512_srli_epi64(u, 45), one)));
    _mm512_storeu_pd(out + j, _mm512_castsi512_pd(_mm512_and_si512(u, keep)));  // a bf16 value: exact
  }
  for (; j < n; ++j) out[j] = round_bf16(x[j]);
}
#endif

// finish() over a row, one straight loop per mode and dtype.
inline void finish_row(const Combine& c, OutDtype out, const double* acc_d, const float* acc_f, int n, double* C) {
  if (c.mode == Mode::exact) {
    if (out == OutDtype::bf16) {
#if defined(__x86_64__)
      if (have_avx512()) {
        round_bf16_row_avx512(acc_d, n, C);
        return;
      }
#endif
      for (int j = 0; j < n; ++j) C[j] = round_bf16(acc_d[j]);
    } else if (out == OutDtype::fp32) {
      for (int j = 0; j < n; ++j) C[j] = static_cast<float>(acc_d[j]);
    } else {
      for (int j = 0; j < n; ++j) C[j] = acc_d[j];
    }
  } else if (out == OutDtype::bf16) {
    for (int j = 0; j < n; ++j) C[j] = round_bf16(acc_f[j]);
  } else {
    for (int j = 0; j < n; ++j) C[j] = acc_f[j];
  }
}

inline float scale_of(const BlockOperand& op, std::int64_t r, std::int64_t b) { return op.scale(r, b); }

void check_combine_mode(const GemmOptions& opt) {
  if (opt.mode != Mode::exact && !is_promoted(opt.mode)) {
    fail("block_gemm computes the exact, promote-fp32 and hopper-tc modes, not ", mode_name(opt.mode));
  }
}

// ---------------------------------------------------------------------------------------------
// Fast e4m3 path.
// Micro-tiles: 6 x 8 fp64 accumulators in AVX2 registers, or 6 x 16 in AVX-512 registers when
// the CPU has it (dispatched at run time: the binary itself targets x86-64-v3).
constexpr int kMR = 6, kNRMax = 16, kMR512 = 12, kMRMax = 12;
constexpr int kMC = 96, kNC = 256;  // macro-tile held in the accumulators

struct UnitsLut {
  std::array<double, 256> v;
  UnitsLut() {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      v[c] = fp8_is_finite(code, Fp8Format::e4m3) ? static_cast<double>(fp8_units(code, Fp8Format::e4m3))
                                                  : static_cast<double>(fp8_decode(code, Fp8Format::e4m3));
    }
  }
};
const UnitsLut& units_lut() {
  static const UnitsLut lut;
  return lut;
}

// P (kMR x NR) = lp (kc x kMR, k-major) . rp (kc x NR, k-major); exact for e4m3 units.
constexpr int kNR = 8;
void micro_kernel_avx2(const double* __restrict lp, const double* __restrict rp, int kc, double* __restrict P) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256d c00 = _mm256_setzero_pd(), c01 = _mm256_setzero_pd(), c10 = _mm256_setzero_pd(),
          c11 = _mm256_setzero_pd(), c20 = _mm256_setzero_pd(), c21 = _mm256_setzero_pd(),
          c30 = _mm256_setzero_pd(), c31 = _mm256_setzero_pd(), c40 = _mm256_setzero_pd(),
          c41 = _mm256_setzero_pd(), c50 = _mm256_setzero_pd(), c51 = _mm256_setzero_pd();
  for (int k = 0; k < kc; ++k) {
    const __m256d b0 = _mm256_load_pd(rp + k * kNR), b1 = _mm256_load_pd(rp + k * kNR + 4);
    const double* a = lp + k * kMR;
    __m256d ai = _mm256_broadcast_sd(a + 0);
    c00 = _mm256_fmadd_pd(ai, b0, c00);
    c01 = _mm256_fmadd_pd(ai, b1, c01);
    ai = _mm256_broadcast_sd(a + 1);
    c10 = _mm256_fmadd_pd(ai, b0, c10);
    c11 = _mm256_fmadd_pd(ai, b1, c11);
    ai = _mm256_broadcast_sd(a + 2);
    c20 = _mm256_fmadd_pd(ai, b0, c20);
    c21 = _mm256_fmadd_pd(ai, b1, c21);
    ai = _mm256_broadcast_sd(a + 3);
    c30 = _mm256_fmadd_pd(ai, b0, c30);
    c31 = _mm256_fmadd_pd(ai, b1, c31);
    ai = _mm256_broadcast_sd(a + 4);
    c40 = _mm256_fmadd_pd(ai, b0, c40);
    c41 = _mm256_fmadd_pd(ai, b1, c41);
    ai = _mm256_broadcast_sd(a + 5);
    c50 = _mm256_fmadd_pd(ai, b0, c50);
    c51 = _mm256_fmadd_pd(ai, b1, c51);
  }
  _mm256_storeu_pd(P + 0, c00);
  _mm256_storeu_pd(P + 4, c01);
  _mm256_storeu_pd(P + 8, c10);
  _mm256_storeu_pd(P + 12, c11);
  _mm256_storeu_pd(P + 16, c20);
  _mm256_storeu_pd(P + 20, c21);
  _mm256_storeu_pd(P + 24, c30);
  _mm256_storeu_pd(P + 28, c31);
  _mm256_storeu_pd(P + 32, c40);
  _mm256_storeu_pd(P + 36, c41);
  _mm256_storeu_pd(P + 40, c50);
  _mm256_storeu_pd(P + 44, c51);
#else
  // portable fallback (no AVX2/FMA in this build): same exact sums
  for (int i = 0; i < kMR * kNR; ++i) P[i] = 0.0;
  for (int k = 0; k < kc; ++k) {
    for (int i = 0; i < kMR; ++i) {
      for (int j = 0; j < kNR; ++j) P[i * kNR + j] = std::fma(lp[k * kMR + i], rp[k * kNR + j], P[i * kNR + j]);
    }
  }
#endif
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void micro_kernel_avx512(const double* __restrict lp,
                                                            const double* __restrict rp, int kc,
                                                            double* __restrict P) {
  __m512d c[kMR512][2];
  for (int i = 0; i < kMR512; ++i) c[i][0] = c[i][1] = _mm512_setzero_pd();
  for (int k = 0; k < kc; ++k) {
    const __m512d b0 = _mm512_load_pd(rp + k * 16), b1 = _mm512_load_pd(rp + k * 16 + 8);
    const double* a = lp + k * kMR512;
#pragma GCC unroll 12
    for (int i = 0; i < kMR512; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
      c[i][0] = _mm512_fmadd_pd(ai, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_pd(ai, b1, c[i][1]);
    }
  }
  for (int i = 0; i < kMR512; ++i) {
    _mm512_storeu_pd(P + i * 16, c[i][0]);
    _mm512_storeu_pd(P + i * 16 + 8, c[i][1]);
  }
}
// GCC 12's own AVX-512 conversion intrinsics trip -Wmaybe-uninitialized (their pass-through
// operand is deliberately undefined).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same product with the fold into the accumulators done in registers, for full 12 x 16
// tiles: the arithmetic of fold_row() operation for operation (so results are bitwise equal),
// 8 or 16 lanes wide. kind: 0 exact (acc_d), 1 fl(sa*sb) order, 2 fl(P*sa) order (acc_f); ld: accumulator row
// stride; sa (12) and sb (16): the rows' and columns' scales for this block.
__attribute__((target("avx512f,avx512dq"))) void micro_kernel_avx512_fold(const double* __restrict lp,
                                                                 const double* __restrict rp, int kc, int kind,
                                                                 const float* sa, const float* sb, double* acc_d,
                                                                 float* acc_f, std::int64_t ld) {
  __m512d c[kMR512][2];
  for (int i = 0; i < kMR512; ++i) c[i][0] = c[i][1] = _mm512_setzero_pd();
  for (int k = 0; k < kc; ++k) {
    const __m512d b0 = _mm512_load_pd(rp + k * 16), b1 = _mm512_load_pd(rp + k * 16 + 8);
    const double* a = lp + k * kMR512;
#pragma GCC unroll 12
    for (int i = 0; i < kMR512; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
      c[i][0] = _mm512_fmadd_pd(ai, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_pd(ai, b1, c[i][1]);
    }
  }
  const __m512d unit2 = _mm512_set1_pd(0x1p-18);
  const __m512 sbf = _mm512_loadu_ps(sb);
  if (kind == 0) {
    const __m512d sb0 = _mm512_cvtps_pd(_mm256_loadu_ps(sb)), sb1 = _mm512_cvtps_pd(_mm256_loadu_ps(sb + 8));
#pragma GCC unroll 12
    for (int i = 0; i < kMR512; ++i) {
      const __m512d da = _mm512_set1_pd(static_cast<double>(sa[i]));
      double* row = acc_d + i * ld;
      _mm512_storeu_pd(row, _mm512_fmadd_pd(_mm512_mul_pd(c[i][0], unit2), _mm512_mul_pd(da, sb0), _mm512_loadu_pd(row)));
      _mm512_storeu_pd(row + 8,
                       _mm512_fmadd_pd(_mm512_mul_pd(c[i][1], unit2), _mm512_mul_pd(da, sb1), _mm512_loadu_pd(row + 8)));
    }
    return;
  }
#pragma GCC unroll 12
  for (int i = 0; i < kMR512; ++i) {
    const __m512 pf = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_mul_pd(c[i][0], unit2))),
                                         _mm512_cvtpd_ps(_mm512_mul_pd(c[i][1], unit2)), 1);
    const __m512 fa = _mm512_set1_ps(sa[i]);
    float* row = acc_f + i * ld;
    const __m512 acc = _mm512_loadu_ps(row);
    _mm512_storeu_ps(row, kind == 1 ? _mm512_fmadd_ps(pf, _mm512_mul_ps(fa, sbf), acc)
                                    : _mm512_fmadd_ps(_mm512_mul_ps(pf, fa), sbf, acc));
  }
}
#pragma GCC diagnostic pop

bool have_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return yes;
}
#else
bool have_avx512() { return false; }
void micro_kernel_avx512(const double*, const double*, int, double*) {}
void micro_kernel_avx512_fold(const double*, const double*, int, int, const float*, const float*, double*, float*,
                              std::int64_t) {}
#endif

// A whole operand decoded once into micro-panels of fp64 units: for k-block b and panel p
// (mr rows), a (B x mr) k-major slab at data[(b * panels + p) * B * mr]; rows past `rows` are
// zero. scales[b * rows + r] is the s_inv of row r in block b.
struct Packed {
  int mr = 0;
  std::int64_t panels = 0;
  std::vector<double> storage;
  double* data = nullptr;  // 64-byte aligned view into storage
  std::vector<float> scales;
};

// Allocation, by one thread before the parallel region.
void alloc_packed(const BlockOperand& op, std::int64_t nkb, int B, int mr, Packed& out) {
  out.mr = mr;
  out.panels = (op.rows + mr - 1) / mr;
  const std::size_t need = static_cast<std::size_t>(nkb * out.panels * B * mr) + 8;
  if (out.storage.size() < need) out.storage.resize(need);
  out.data = out.storage.data();
  while (reinterpret_cast<std::uintptr_t>(out.data) % 64 != 0) ++out.data;
  out.scales.resize(static_cast<std::size_t>(nkb * op.rows));
}

// Filling, work-shared among the threads of the enclosing parallel region, without a barrier:
// the caller places one after packing every operand.
void pack_operand(const BlockOperand& op, std::int64_t nkb, int B, int mr, Packed& out) {
  const auto& lut = units_lut().v;
#pragma omp for collapse(2) schedule(static) nowait
  for (std::int64_t b = 0; b < nkb; ++b) {
    for (std::int64_t p = 0; p < out.panels; ++p) {
      double* d = out.data + (b * out.panels + p) * B * mr;
      // Row sources of this panel; rows past the operand read a zero code (value 0).
      static const std::uint8_t kZero[1] = {0};
      const std::uint8_t* src[kMRMax > kNRMax ? kMRMax : kNRMax];
      std::int64_t step[kMRMax > kNRMax ? kMRMax : kNRMax];
      for (int i = 0; i < mr; ++i) {
        const std::int64_t r = p * mr + i;
        const bool live = r < op.rows;
        src[i] = live ? op.codes + r * op.rs + b * B * op.ks : kZero;
        step[i] = live ? op.ks : 0;
        if (live) out.scales[static_cast<std::size_t>(b * op.rows + r)] = scale_of(op, r, b);
      }
      // k outer, rows inner: the packed slab is written sequentially.
      for (int k = 0; k < B; ++k) {
        for (int i = 0; i < mr; ++i) d[k * mr + i] = lut[src[i][k * step[i]]];
      }
    }
  }
}

// Every task of a batch (usually the experts of one grouped pass) in one parallel region: the
// operands are packed, then the macro-tiles of all tasks are shared out dynamically, so small
// experts keep every thread busy and no expert waits at its own barrier.
void block_gemm_fast(std::span<const GemmTask> tasks, const GemmOptions& opt) {
  const bool wide = have_avx512();
  const int nr = wide ? 16 : kNR, mr = wide ? kMR512 : kMR;
  auto kernel = wide ? micro_kernel_avx512 : micro_kernel_avx2;
  const int B = opt.quant.block;
  const std::size_t n = tasks.size();
  const TileSchedule sched = plan_tiles(tasks, kMC, kNC, nr);
  const std::int64_t nc_tile = sched.nc_tile;
  // Per calling thread and reused across calls: large first-touch allocations per GEMM cost
  // page faults comparable to the arithmetic of a small expert.
  thread_local std::vector<Packed> tl_lp, tl_rp;
  std::vector<Packed>& lp = tl_lp;  // the calling thread's buffers, shared with the team below
  std::vector<Packed>& rp = tl_rp;
  if (lp.size() < n) lp.resize(n);
  if (rp.size() < n) rp.resize(n);
  for (std::size_t t = 0; t < n; ++t) {
    alloc_packed(tasks[t].L, tasks[t].kc / B, B, mr, lp[t]);
    alloc_packed(tasks[t].R, tasks[t].kc / B, B, nr, rp[t]);
  }
  (void)units_lut();  // built before the threads start
#pragma omp parallel
  {
    for (std::size_t t = 0; t < n; ++t) {  // work-shared packing; one barrier at the end
      pack_operand(tasks[t].L, tasks[t].kc / B, B, mr, lp[t]);
      pack_operand(tasks[t].R, tasks[t].kc / B, B, nr, rp[t]);
    }
#pragma omp barrier
    std::vector<double> acc_d(static_cast<std::size_t>(kMC * nc_tile));
    std::vector<float> acc_f(static_cast<std::size_t>(kMC * nc_tile));
    alignas(64) double P[kMRMax * kNRMax];
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t tile = 0; tile < sched.tiles(); ++tile) {
      const std::size_t t = sched.task_of(tile);
      const GemmTask& g = tasks[t];
      const Combine cmb{opt.mode, opt.promotion, scale_config(g.L, g.R)};
      const int kind = opt.mode == Mode::exact ? 0 : cmb.p_times_sa() ? 2 : 1;
      const Packed& l = lp[t];
      const Packed& r = rp[t];
      const std::int64_t nkb = g.kc / B;
      const std::int64_t i0 = sched.row0(t, tile), j0 = sched.col0(t, tile);
      const int mc = static_cast<int>(std::min<std::int64_t>(kMC, g.L.rows - i0));
      const int nc = static_cast<int>(std::min<std::int64_t>(nc_tile, g.R.rows - j0));
      std::fill(acc_d.begin(), acc_d.end(), 0.0);
      std::fill(acc_f.begin(), acc_f.end(), 0.0f);
      for (std::int64_t b = 0; b < nkb; ++b) {
        const float* sl = l.scales.data() + b * g.L.rows + i0;
        const float* sr = r.scales.data() + b * g.R.rows + j0;
        for (int pj = 0; pj * nr < nc; ++pj) {
          const double* rpanel = r.data + (b * r.panels + j0 / nr + pj) * B * nr;
          for (int pi = 0; pi * mr < mc; ++pi) {
            const double* lpanel = l.data + (b * l.panels + i0 / mr + pi) * B * mr;
            if (wide && mc - pi * mr >= mr && nc - pj * nr >= nr) {
              const std::int64_t off = static_cast<std::int64_t>(pi) * mr * nc_tile + pj * nr;
              micro_kernel_avx512_fold(lpanel, rpanel, B, kind, sl + pi * mr, sr + pj * nr, acc_d.data() + off,
                                       acc_f.data() + off, nc_tile);
              continue;
            }
            kernel(lpanel, rpanel, B, P);
            const int rows = std::min(mr, mc - pi * mr), ncols = std::min(nr, nc - pj * nr);
            for (int i = 0; i < rows; ++i) {
              const int rr = pi * mr + i;
              const std::int64_t off = rr * nc_tile + pj * nr;
              fold_row(cmb, P + i * nr, sl[rr], sr + pj * nr, ncols, acc_d.data() + off, acc_f.data() + off);
            }
          }
        }
      }
      for (int i = 0; i < mc; ++i) {
        finish_row(cmb, opt.out, acc_d.data() + i * nc_tile, acc_f.data() + i * nc_tile, nc,
                   g.C + (i0 + i) * g.ldc + j0);
      }
    }
  }
}

}  // namespace

void block_gemm_scalar(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, double* C, std::int64_t ldc,
                       const GemmOptions& opt, int splits) {
  check_combine_mode(opt);
  const int B = opt.quant.block;
  const Fp8Format f = opt.quant.format;
  const int shift = 2 * fp8_unit_shift(f);
  const std::int64_t nkb = kc / B;
  const Combine cmb{opt.mode, opt.promotion, scale_config(L, R)};
  // cuBLASLt's split-K: runs of q blocks, each promoted from +0, added in order (tensor_core.hpp).
  const int runs = opt.mode == Mode::exact ? 1 : std::max(splits, 1);
  const std::int64_t q = split_run_blocks(nkb, runs, split_unit(cmb.cfg, opt.split_unit));
#pragma omp parallel for schedule(dynamic, 4)
  for (std::int64_t i = 0; i < L.rows; ++i) {
    for (std::int64_t j = 0; j < R.rows; ++j) {
      double acc_d = 0.0;
      float acc_f = 0.0f;
      for (int run = 0; run < runs; ++run) {
        float run_f = 0.0f;
        for (std::int64_t b = run * q; b < std::min<std::int64_t>((run + 1) * q, nkb); ++b) {
          const std::uint8_t* a_codes = L.codes + i * L.rs + b * B * L.ks;
          const std::uint8_t* w_codes = R.codes + j * R.rs + b * B * R.ks;
          if (opt.mode == Mode::hopper_tc) {
            const float pf = tc_block_partial(a_codes, L.ks, w_codes, R.ks, f, B);
            run_f = promote(cmb.promo, cmb.cfg, pf, scale_of(L, i, b), scale_of(R, j, b), run_f);
            continue;
          }
          __int128 p = 0;
          bool finite = true;
          double pnf = 0.0;  // the block in fp64 when a code is NaN or Inf: propagates them
          for (std::int64_t k = 0; k < B; ++k) {
            const std::uint8_t a = a_codes[k * L.ks], w = w_codes[k * R.ks];
            if (!fp8_is_finite(a, f) || !fp8_is_finite(w, f)) finite = false;
            if (finite) {
              p += static_cast<__int128>(fp8_units(a, f)) * fp8_units(w, f);
            }
            pnf += static_cast<double>(fp8_decode(a, f)) * static_cast<double>(fp8_decode(w, f));
          }
          const double pd = finite ? i128_to_f64_scaled(p, shift) : pnf;
          const float pf = finite ? i128_to_f32_scaled(p, shift) : static_cast<float>(pnf);
          fold(cmb, pd, pf, scale_of(L, i, b), scale_of(R, j, b), acc_d, run_f);
        }
        acc_f = split_combine(acc_f, run_f, run);
      }
      C[i * ldc + j] = finish(cmb, opt.out, acc_d, acc_f);
    }
  }
}

void block_gemm_batch(std::span<const GemmTask> tasks, const GemmOptions& opt) {
  check_combine_mode(opt);
  std::vector<GemmTask> work;
  for (const GemmTask& t : tasks) {
    if (t.kc % opt.quant.block != 0) {
      fail("block_gemm: contraction ", t.kc, " is not a multiple of the block ", opt.quant.block);
    }
    if (t.L.rows > 0 && t.R.rows > 0) work.push_back(t);
  }
  if (work.empty()) return;
  // The fast path computes exact and promote-fp32 on e4m3 without split-K runs; the hopper-tc
  // path hopper-tc on e4m3 with them (blocks of whole k32 steps, up to 256), handing back the
  // tasks with a NaN code.
  const bool e4m3 = opt.quant.format == Fp8Format::e4m3;
  const bool tc_ok = e4m3 && opt.mode == Mode::hopper_tc && opt.quant.block % kTcStepK == 0 &&
                     opt.quant.block <= kTcFastMaxBlock;
  std::vector<GemmTask> fast, tc, scalar;
  for (const GemmTask& t : work) {
    const bool split = opt.mode != Mode::exact && t.splits > 1;
    if (tc_ok) {
      tc.push_back(t);
    } else if (e4m3 && opt.mode != Mode::hopper_tc && !split) {
      fast.push_back(t);
    } else {
      scalar.push_back(t);
    }
  }
  if (!fast.empty()) block_gemm_fast(fast, opt);
  if (!tc.empty()) {
    for (std::size_t i : block_gemm_tc(tc, opt)) scalar.push_back(tc[i]);
  }
  for (const GemmTask& t : scalar) block_gemm_scalar(t.L, t.R, t.kc, t.C, t.ldc, opt, t.splits);
}

void block_gemm(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, double* C, std::int64_t ldc,
                const GemmOptions& opt) {
  const GemmTask t{L, R, kc, C, ldc};
  block_gemm_batch(std::span<const GemmTask>(&t, 1), opt);
}

}  // namespace fp8moe
