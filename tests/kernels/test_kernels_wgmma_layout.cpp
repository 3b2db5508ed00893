// Host-side index math and data of the wgmma probe (kernels/wgmma_probe.hpp), no GPU needed
// (STYLE.md: index math that runs without a GPU): the accumulator fragment map, the shared-memory
// layout read back through the descriptor's fields as the PTX ISA defines them, an emulation of the
// probe kernel's data movement, and the input classes. Label kernels: runs everywhere CUDA compiles.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kernels/wgmma_probe.hpp"
#include "reference/tensor_core.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;
namespace wg = fp8moe::kernels::wgmma;

// The descriptor's fields, decoded (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format").
struct Desc {
  std::uint32_t start, lbo, sbo, base_offset, swizzle;
};
Desc decode(std::uint64_t d) {
  return {static_cast<std::uint32_t>(d & 0x3fffu) << 4, static_cast<std::uint32_t>((d >> 16) & 0x3fffu) << 4,
          static_cast<std::uint32_t>((d >> 32) & 0x3fffu) << 4, static_cast<std::uint32_t>((d >> 49) & 7u),
          static_cast<std::uint32_t>(d >> 62)};
}
// Byte address of element (row, k) of a K-major FP8 operand, no swizzle, as the PTX ISA's canonical
// layout ((8,m),(T,2k)):((1T,SBO),(1,LBO)) with T = 16 reads it from a descriptor.
std::uint32_t canonical_address(const Desc& d, int row, int k) {
  return d.start + static_cast<std::uint32_t>(row % 8) * 16u + static_cast<std::uint32_t>(row / 8) * d.sbo +
         static_cast<std::uint32_t>(k % 16) + static_cast<std::uint32_t>(k / 16) * d.lbo;
}

TEST_CASE("wgmma D fragment: the PTX ISA's m64nNk32 f32 layout, a bijection onto 64 x N") {
  // Spot values read off PTX ISA Figure 149/153 (and CUTLASS CLayout_64xN).
  CHECK(wg::d_fragment(0, 0).row == 0);
  CHECK(wg::d_fragment(0, 0).col == 0);
  CHECK(wg::d_fragment(0, 1).col == 1);
  CHECK(wg::d_fragment(0, 2).row == 8);
  CHECK(wg::d_fragment(0, 2).col == 0);
  CHECK(wg::d_fragment(0, 4).row == 0);
  CHECK(wg::d_fragment(0, 4).col == 8);
  CHECK(wg::d_fragment(1, 0).col == 2);
  CHECK(wg::d_fragment(3, 1).col == 7);
  CHECK(wg::d_fragment(4, 0).row == 1);
  CHECK(wg::d_fragment(31, 3).row == 15);
  CHECK(wg::d_fragment(31, 3).col == 7);
  CHECK(wg::d_fragment(32, 0).row == 16);
  CHECK(wg::d_fragment(127, 127).row == 63);
  CHECK(wg::d_fragment(127, 127).col == 255);
  for (int n : {8, 16, 64, 128, 256}) {
    CAPTURE(n);
    std::vector<int> hit(static_cast<std::size_t>(64 * n));
    for (int t = 0; t < wg::kThreads; ++t) {
      for (int i = 0; i < n / 2; ++i) {
        const wg::FragPos p = wg::d_fragment(t, i);
        REQUIRE(p.row >= 0);
        REQUIRE(p.row < 64);
        REQUIRE(p.col >= 0);
        REQUIRE(p.col < n);
        ++hit[static_cast<std::size_t>(p.row * n + p.col)];
        // CUTLASS CLayout_64xN: (thread, value) -> m + 64 n with ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512))
        const int mn = 128 * (t % 4) + (t / 4) % 8 + 16 * (t / 32) + 64 * (i % 2) + 8 * ((i / 2) % 2) + 512 * (i / 4);
        CHECK(mn % 64 == p.row);
        CHECK(mn / 64 == p.col);
        if (i % 2 == 0) {  // the kernel moves registers 2j, 2j+1 as one float2: same row, next column
          CHECK(wg::d_fragment(t, i + 1).row == p.row);
          CHECK(wg::d_fragment(t, i + 1).col == p.col + 1);
        }
      }
    }
    for (int h : hit) REQUIRE(h == 1);
  }
}

TEST_CASE("wgmma shared-memory layout: the descriptor's canonical K-major no-swizzle reading finds every element") {
  for (int rows : {8, 64, 128, 256}) {
    CAPTURE(rows);
    const std::uint32_t start = 0x1400;  // any 16-byte-aligned shared address
    const std::uint64_t desc = wg::make_desc(start, wg::operand_lbo(rows), wg::operand_sbo(rows), false);
    const Desc d = decode(desc);
    CHECK(d.start == start);
    CHECK(d.lbo == wg::operand_lbo(rows));
    CHECK(d.sbo == wg::operand_sbo(rows));
    CHECK(d.base_offset == 0);
    CHECK(d.swizzle == 0);
    CHECK((desc & 0x0001c000c000c000ull) == 0);  // the reserved bits 14-15, 30-31, 46-48 are zero
    std::set<std::uint32_t> seen;
    for (int r = 0; r < rows; ++r) {
      for (int k = 0; k < wg::kK; ++k) {
        const std::uint32_t off = wg::smem_offset(r, k, rows);
        REQUIRE(off < static_cast<std::uint32_t>(rows * wg::kK));
        seen.insert(off);
        CHECK(start + off == canonical_address(d, r, k));
        // 16-byte runs along k are contiguous (the kernel stages them as one uint4)
        CHECK(off == wg::smem_offset(r, 16 * (k / 16), rows) + static_cast<std::uint32_t>(k % 16));
      }
    }
    CHECK(seen.size() == static_cast<std::size_t>(rows * wg::kK));
    const Desc s = decode(wg::make_desc(start, wg::operand_lbo(rows), wg::operand_sbo(rows), true));
    CHECK(s.lbo == wg::operand_sbo(rows));
    CHECK(s.sbo == wg::operand_lbo(rows));
  }
}

// The probe kernel's data movement on the host, with the PTX ISA's reading of the descriptors and
// of the fragment standing in for the hardware, tc_step standing in for the tensor core: it must
// give tc_step of row r of A and row c of B with C[r][c] at D[r][c].
TEST_CASE("wgmma probe kernel emulated on the host: staging, descriptors and fragments put every output in place") {
  for (int n : {8, 64, 256}) {
    wg::ProbeCase pc;
    pc.fa = Fp8Format::e4m3;
    pc.fb = Fp8Format::e5m2;
    pc.n = n;
    pc.seed = test::seed_for(1590 + static_cast<std::uint64_t>(n));
    CAPTURE(n);
    const std::uint64_t tile = 3;
    const wg::TileClass tc = wg::probe_tile_class(pc, tile);
    std::vector<std::uint8_t> A(64 * 32), B(static_cast<std::size_t>(n * 32));
    for (int i = 0; i < 64 * 32; ++i) A[i] = wg::probe_code(pc, tc, pc.fa, wg::kProbeTensorA, tile * 64 * 32 + i);
    for (int i = 0; i < n * 32; ++i) B[i] = wg::probe_code(pc, tc, pc.fb, wg::kProbeTensorB, tile * n * 32 + i);
    std::vector<float> C(static_cast<std::size_t>(64 * n)), D(C.size(), -1.0f);
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < n; ++c) C[r * n + c] = wg::probe_c(pc, tc, tile, r, c, &A[r * 32], &B[c * 32]);
    }
    // shared memory: A at 0x400, B after it, staged in 16-byte pieces as the kernel does
    std::vector<std::uint8_t> smem(0x400 + 64 * 32 + n * 32);
    const std::uint32_t a0 = 0x400, b0 = 0x400 + 64 * 32;
    for (int q = 0; q < 64 * 2; ++q) {
      for (int j = 0; j < 16; ++j) smem[a0 + wg::smem_offset(q / 2, 16 * (q % 2), 64) + j] = A[q * 16 + j];
    }
    for (int q = 0; q < n * 2; ++q) {
      for (int j = 0; j < 16; ++j) smem[b0 + wg::smem_offset(q / 2, 16 * (q % 2), n) + j] = B[q * 16 + j];
    }
    const Desc da = decode(wg::make_desc(a0, wg::operand_lbo(64), wg::operand_sbo(64), false));
    const Desc db = decode(wg::make_desc(b0, wg::operand_lbo(n), wg::operand_sbo(n), false));
    for (int t = 0; t < wg::kThreads; ++t) {
      for (int i = 0; i < n / 2; ++i) {
        const wg::FragPos p = wg::d_fragment(t, i);
        const float acc = C[p.row * n + p.col];  // the register loaded from C
        std::uint8_t ar[32], bc[32];
        for (int k = 0; k < 32; ++k) {
          ar[k] = smem[canonical_address(da, p.row, k)];
          bc[k] = smem[canonical_address(db, p.col, k)];
        }
        D[p.row * n + p.col] = tc_step(ar, 1, pc.fa, bc, 1, pc.fb, 32, acc);
      }
    }
    int bad = 0;
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < n; ++c) {
        const float want = tc_step(&A[r * 32], 1, pc.fa, &B[c * 32], 1, pc.fb, 32, C[r * n + c]);
        bad += f32_bits(want) != f32_bits(D[r * n + c]);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("wgmma probe inputs: classes, finite codes where promised, C in its class's range") {
  for (Fp8Format fa : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (Fp8Format fb : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      wg::ProbeCase pc;
      pc.fa = fa;
      pc.fb = fb;
      pc.n = 8;
      pc.seed = test::seed_for(1595);
      const std::string pair = std::string(wg::probe_format_name(fa)) + " x " + wg::probe_format_name(fb);
      CAPTURE(pair);
      std::vector<int> code_seen(wg::kCodeClasses), c_seen(wg::kCClasses);
      std::set<int> all_codes;
      int nonfinite_tiles = 0, finite_tiles = 0, cancel_small = 0, cancel_total = 0, model_nan = 0;
      for (std::uint64_t tile = 0; tile < 400; ++tile) {
        const wg::TileClass tc = wg::probe_tile_class(pc, tile);
        ++code_seen[static_cast<int>(tc.codes)];
        ++c_seen[static_cast<int>(tc.c)];
        const bool finite = wg::code_class_finite(tc.codes);
        (finite ? finite_tiles : nonfinite_tiles)++;
        if (finite) CHECK(tc.c != wg::CClass::nonfinite);
        std::vector<std::uint8_t> A(64 * 32), B(8 * 32);
        for (int i = 0; i < 64 * 32; ++i) A[i] = wg::probe_code(pc, tc, fa, wg::kProbeTensorA, tile * 64 * 32 + i);
        for (int i = 0; i < 8 * 32; ++i) B[i] = wg::probe_code(pc, tc, fb, wg::kProbeTensorB, tile * 8 * 32 + i);
        for (int i = 0; i < 64 * 32; ++i) {
          if (finite) REQUIRE(fp8_is_finite(A[i], fa));
          if (tc.codes == wg::CodeClass::all) all_codes.insert(A[i]);
        }
        for (int i = 0; i < 8 * 32; ++i) {
          if (finite) REQUIRE(fp8_is_finite(B[i], fb));
        }
        for (int r = 0; r < 64; r += 7) {
          for (int c = 0; c < 8; ++c) {
            const float cv = wg::probe_c(pc, tc, tile, r, c, &A[r * 32], &B[c * 32]);
            const std::uint32_t u = f32_bits(cv);
            const float m = tc_step(&A[r * 32], 1, fa, &B[c * 32], 1, fb, 32, cv);
            model_nan += m != m;
            if (tc.c != wg::CClass::nonfinite) REQUIRE((u & 0x7f800000u) != 0x7f800000u);
            if (tc.c == wg::CClass::nonfinite) REQUIRE((u & 0x7f800000u) == 0x7f800000u);
            if (tc.c == wg::CClass::zero) REQUIRE((u & 0x7fffffffu) == 0);
            if (tc.c == wg::CClass::subnormal) REQUIRE((u & 0x7f800000u) == 0);
            if (tc.c == wg::CClass::subnormal) REQUIRE((u & 0x7fffffu) != 0);
            if (tc.c == wg::CClass::huge) REQUIRE((u & 0x7f800000u) >= (253u << 23));
            if (tc.c == wg::CClass::cancel && finite) {
              // the result lands near zero: far below the largest product
              const wg::ProductScale ps = wg::product_scale(&A[r * 32], fa, &B[c * 32], fb);
              ++cancel_total;
              cancel_small += std::fabs(m) <= std::ldexp(1.0, ps.max_exp - 1);  // 33 truncations of < 2^(E-13), E <= max_exp + 6
            }
          }
        }
      }
      for (int i = 0; i < wg::kCodeClasses; ++i) CHECK(code_seen[i] > 0);
      for (int i = 0; i < wg::kCClasses; ++i) CHECK(c_seen[i] > 0);
      CHECK(finite_tiles > nonfinite_tiles);  // most tiles finite (11 in 16 expected)
      CHECK(all_codes.size() == 256);
      CHECK(model_nan > 0);
      CHECK(cancel_total > 0);
      CHECK(cancel_small == cancel_total);
    }
  }
}

}  // namespace
