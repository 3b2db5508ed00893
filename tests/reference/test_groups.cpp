// Token-group padding and offset validation of reference/groups.cpp (reference/SPEC.md 5, torchao
// moe_training utils), against expectations worked out by hand and a per-row oracle written here.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/groups.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;
using I32 = std::vector<std::int32_t>;

// Expected row -> expert map, one row at a time: expert e owns rows [start_e, start_e + size_e).
std::vector<std::int32_t> expected_row_expert(const I32& starts, const I32& sizes, std::int64_t rows) {
  std::vector<std::int32_t> re(static_cast<std::size_t>(rows), -1);
  for (std::size_t e = 0; e < sizes.size(); ++e) {
    for (std::int32_t r = 0; r < sizes[e]; ++r) re[static_cast<std::size_t>(starts[e] + r)] = static_cast<std::int32_t>(e);
  }
  return re;
}

TEST_CASE("pad_groups: the SPEC.md 5.2 example offs [129,384,500]") {
  const I32 offs = {129, 384, 500};
  const PaddedGroups p = pad_groups(offs, 128);
  // sizes 129, 255, 116 -> padded 256, 256, 128 -> ends 256, 512, 640; starts 0, 256, 512;
  // rows = ceil((500 + 3*128) / 128) * 128 = ceil(884/128) * 128 = 7 * 128 = 896.
  CHECK(p.sizes == I32{129, 255, 116});
  CHECK(p.padded_ends == I32{256, 512, 640});
  CHECK(p.padded_starts == I32{0, 256, 512});
  CHECK(p.rows == 896);
  CHECK(p.row_expert == expected_row_expert({0, 256, 512}, {129, 255, 116}, 896));
  CHECK(p.row_expert[128] == 0);
  CHECK(p.row_expert[129] == -1);
  CHECK(p.row_expert[255] == -1);
  CHECK(p.row_expert[256] == 1);
  CHECK(p.row_expert[510] == 1);
  CHECK(p.row_expert[511] == -1);
  CHECK(p.row_expert[627] == 2);
  CHECK(p.row_expert[628] == -1);
  CHECK(p.row_expert[895] == -1);
  CHECK(group_sizes(offs) == I32{129, 255, 116});
}

TEST_CASE("pad_groups: empty experts stay empty") {
  const I32 offs = {0, 128, 128, 300};
  const PaddedGroups p = pad_groups(offs, 128);
  // sizes 0, 128, 0, 172 -> padded 0, 128, 0, 256 -> ends 0, 128, 128, 384; starts 0, 0, 128, 128;
  // rows = ceil((300 + 4*128) / 128) * 128 = ceil(812/128) * 128 = 896.
  CHECK(p.sizes == I32{0, 128, 0, 172});
  CHECK(p.padded_ends == I32{0, 128, 128, 384});
  CHECK(p.padded_starts == I32{0, 0, 128, 128});
  CHECK(p.rows == 896);
  CHECK(p.row_expert == expected_row_expert({0, 0, 128, 128}, {0, 128, 0, 172}, 896));
  CHECK_NOTHROW(check_offsets(offs, 300));
}

TEST_CASE("pad_groups on random offsets, blocks 64, 128, 256") {
  const std::uint64_t seed = test::seed_for(21);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int B = 64 << (trial % 3);
    const int E = 1 + static_cast<int>(rng() % 9);
    I32 offs, sizes, pad_ends, pad_starts;
    std::int32_t tokens = 0, end = 0;
    for (int e = 0; e < E; ++e) {
      const auto s = static_cast<std::int32_t>(rng() % 4 == 0 ? 0 : rng() % 700);  // a quarter empty
      tokens += s;
      offs.push_back(tokens);
      sizes.push_back(s);
      const std::int32_t padded = s % B == 0 ? s : s + (B - s % B);
      pad_starts.push_back(end);
      end += padded;
      pad_ends.push_back(end);
    }
    std::int64_t rows = tokens + static_cast<std::int64_t>(E) * B;
    if (rows % B) rows += B - rows % B;
    CAPTURE(trial);
    CAPTURE(B);
    const PaddedGroups p = pad_groups(offs, B);
    CHECK(p.sizes == sizes);
    CHECK(p.padded_ends == pad_ends);
    CHECK(p.padded_starts == pad_starts);
    CHECK(p.rows == rows);
    CHECK(p.rows >= end);  // the buffer holds every padded group
    CHECK(p.row_expert == expected_row_expert(pad_starts, sizes, rows));
  }
}

TEST_CASE("pad_rows / unpad_rows round trip is lossless and pad rows are zero") {
  const std::uint64_t seed = test::seed_for(22);
  CAPTURE(seed);
  const std::vector<I32> cases = {{129, 384, 500}, {0, 128, 128, 300}, {1, 2, 3}, {256}, {0, 0, 77}};
  std::uint32_t id = 1;
  for (const I32& offs : cases) {
    const std::int64_t M = offs.back(), C = 96;
    CAPTURE(M);
    const TensorF x = test::random_tensor({M, C}, seed, id++);
    const PaddedGroups p = pad_groups(offs, 128);
    const TensorF padded = pad_rows(x, offs, p);
    REQUIRE(padded.shape == std::vector<std::int64_t>{p.rows, C});
    // every padded row is either a copy of its token's row or zero
    std::int64_t bad = 0;
    for (std::int64_t r = 0; r < p.rows; ++r) {
      const std::int32_t e = p.row_expert[static_cast<std::size_t>(r)];
      const std::int64_t src = e < 0 ? -1 : (e == 0 ? 0 : offs[static_cast<std::size_t>(e) - 1]) + (r - p.padded_starts[static_cast<std::size_t>(e)]);
      for (std::int64_t c = 0; c < C; ++c) {
        const float want = src < 0 ? 0.0f : x(src, c);
        bad += padded(r, c) != want;
      }
    }
    CHECK(bad == 0);
    const TensorF back = unpad_rows(padded, offs, p);
    REQUIRE(back.shape == x.shape);
    CHECK(back.data == x.data);
    // unpad works on any element type (codes are unpadded too)
    TensorU8 codes({p.rows, 3});
    for (std::size_t i = 0; i < codes.numel(); ++i) codes.data[i] = static_cast<std::uint8_t>(i * 37);
    const TensorU8 cu = unpad_rows(codes, offs, p);
    REQUIRE(cu.shape == std::vector<std::int64_t>{M, 3});
    for (std::size_t e = 0, start = 0; e < offs.size(); start = static_cast<std::size_t>(offs[e]), ++e) {
      for (std::int64_t r = 0; r < offs[e] - static_cast<std::int64_t>(start); ++r) {
        CHECK(cu(static_cast<std::int64_t>(start) + r, 2) == codes(p.padded_starts[e] + r, 2));
      }
    }
  }
}

std::string error_of(const I32& offs, std::int64_t M) {
  try {
    check_offsets(offs, M);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("check_offsets: errors name the offending index and value") {
  CHECK_NOTHROW(check_offsets(I32{129, 384, 500}, 500));
  CHECK_NOTHROW(check_offsets(I32{0, 0, 0}, 0));

  const std::string dec = error_of({128, 100, 300}, 300);
  CAPTURE(dec);
  CHECK(dec.find("offs[1]") != std::string::npos);
  CHECK(dec.find("100") != std::string::npos);
  CHECK(dec.find("128") != std::string::npos);

  const std::string neg = error_of({-5, 300}, 300);
  CAPTURE(neg);
  CHECK(neg.find("offs[0]") != std::string::npos);
  CHECK(neg.find("-5") != std::string::npos);
  CHECK(neg.find("negative") != std::string::npos);

  const std::string big = error_of({128, 400}, 300);
  CAPTURE(big);
  CHECK(big.find("offs[1]") != std::string::npos);
  CHECK(big.find("400") != std::string::npos);
  CHECK(big.find("300") != std::string::npos);

  const std::string last = error_of({128, 256}, 300);
  CAPTURE(last);
  CHECK(last.find("256") != std::string::npos);
  CHECK(last.find("300") != std::string::npos);

  CHECK(error_of({}, 0) != "(no error)");
}

}  // namespace
