// `fp8moe quantize`, run as a subprocess: its codes and scales equal reference/'s quantizers bit
// for bit, and every bad input gives exit code 2, one line naming the problem, and no output file.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>

#include "reference/quantize.hpp"
#include "results/h5.hpp"
#include "results/h5_test_util.hpp"
#include "support/run_cli.hpp"
#include "support/test_support.hpp"

using namespace fp8moe;
using fp8moe::test::TempDir;

namespace {

using test::quote;
using test::Run;

Run run_cli(const std::string& args) { return test::run_cli("quantize", args); }

bool exists(const std::string& path) { return std::filesystem::exists(path); }

enum class Storage { f32, bf16, f16 };

// Writes `x` as dataset `name` of `path` the way a PyTorch user would store that dtype.
void write_input(const std::string& path, const std::string& name, const TensorF& x, Storage storage) {
  {
    h5::File f = exists(path) ? h5::File::open(path, true) : h5::File::create(path);
    if (storage == Storage::f32) f.write(name, x);
    if (storage == Storage::bf16) {
      Tensor<std::uint16_t> bits(x.shape);
      for (std::size_t i = 0; i < x.numel(); ++i) {
        bits.data[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x.data[i]) >> 16);  // bf16 values
      }
      f.write(name, bits).set_attr("dtype", "bfloat16");
    }
    f.close();
  }
  if (storage == Storage::f16) {
    // Random finite halves: the reference below is fed what the CLI reads (read_f32), as always.
    auto bits = test::random_u16(x.numel(), std::bit_cast<std::uint32_t>(x.data[0]));
    for (auto& b : bits) b &= 0xbbff;  // exponent field <= 15: finite, |x| < 2
    const hid_t half = test::make_half_type();
    test::write_raw(path, name, half, std::vector<hsize_t>(x.shape.begin(), x.shape.end()), bits.data());
    H5Tclose(half);
  }
}

// What the CLI computes, from reference/ directly (the 3-D 1x128 case flattens the leading dims).
Quantized expected(const std::string& recipe, const TensorF& x, const QuantOptions& opt) {
  if (recipe == "1x128" && x.rank() == 3) {
    TensorF flat;
    flat.shape = {x.dim(0) * x.dim(1), x.dim(2)};
    flat.data = x.data;
    Quantized q = quantize_act_lhs(flat, opt);
    q.scales.shape = {x.dim(0), x.dim(1), q.scales.dim(1)};
    q.codes.shape = x.shape;
    return q;
  }
  if (recipe == "1x128") return quantize_act_lhs(x, opt);
  if (recipe == "128x1") return quantize_act_rhs(x, opt);
  return x.rank() == 2 ? quantize_weight(x, opt) : quantize_grouped_weight(x, WeightOrientation::fwd, opt);
}

// Exit code 2, one line "fp8moe quantize: error: ..." containing every piece, and no output.
void check_error(const Run& r, const std::vector<std::string>& pieces, const std::string& out) {
  INFO("output: " << r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);
  CHECK(r.output.rfind("fp8moe quantize: error: ", 0) == 0);
  for (const std::string& p : pieces) CHECK_MESSAGE(r.output.find(p) != std::string::npos, "missing: " << p);
  CHECK_FALSE(exists(out));
  CHECK_FALSE(exists(out + ".tmp"));
}

}  // namespace

TEST_CASE("quantize output equals reference/ bit for bit") {
  struct Case {
    const char* recipe;
    std::vector<std::int64_t> shape;
    int block;
    const char* format;
    bool pow2;
    Storage storage;
  };
  const Case cases[] = {
      {"1x128", {200, 256}, 128, "e4m3", false, Storage::f32},
      {"1x128", {3, 40, 384}, 128, "e4m3", false, Storage::bf16},
      {"1x128", {64, 128}, 64, "e5m2", true, Storage::f16},
      {"128x1", {300, 192}, 128, "e5m2", false, Storage::f32},  // ragged M: last block of 44 rows
      {"128x1", {130, 64}, 64, "e4m3", true, Storage::bf16},
      {"128x128", {256, 384}, 128, "e4m3", true, Storage::f32},
      {"128x128", {2, 128, 256}, 128, "e4m3", false, Storage::bf16},
      {"128x128", {512, 256}, 256, "e5m2", false, Storage::f32},
  };
  const std::uint64_t seed = test::seed_for(201);
  TempDir dir(seed);
  std::uint32_t id = 0;
  for (const Case& c : cases) {
    ++id;
    INFO("seed " << seed << ", recipe " << c.recipe << ", shape " << shape_str(c.shape) << ", block " << c.block
                 << ", " << c.format << (c.pow2 ? " pow2" : ""));
    const std::string in = dir.file(cat("in", id, ".h5")), out = dir.file(cat("q", id, ".h5"));
    write_input(in, "x", test::random_tensor(c.shape, seed, id), c.storage);
    const Run r = run_cli("--in " + quote(in) + " --dataset x --recipe " + c.recipe + " --block " +
                          std::to_string(c.block) + " --format " + c.format + (c.pow2 ? " --pow2-scales" : "") +
                          " --out " + quote(out) + " --threads 2");
    INFO("output: " << r.output);
    REQUIRE(r.rc == 0);
    CHECK(r.lines() == 1);
    CHECK(r.output.find(shape_str(c.shape)) != std::string::npos);
    CHECK_FALSE(exists(out + ".tmp"));

    const TensorF x = h5::File::open(in).read_f32("x");  // what the CLI saw
    QuantOptions opt;
    opt.block = c.block;
    opt.pow2_scales = c.pow2;
    opt.format = parse_format(c.format);
    const Quantized q = expected(c.recipe, x, opt);

    const h5::File f = h5::File::open(out);
    const TensorU8 codes = f.read_exact<std::uint8_t>("codes");
    const TensorF scales = f.read_exact<float>("scales");
    CHECK(codes.shape == c.shape);
    CHECK(codes.data == q.codes.data);
    CHECK(scales.shape == q.scales.shape);
    REQUIRE(scales.numel() == q.scales.numel());
    const auto bits_equal = [](float a, float b) {
      return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
    };
    CHECK(std::equal(scales.data.begin(), scales.data.end(), q.scales.data.begin(), bits_equal));
    CHECK(f.attr_string("recipe") == c.recipe);
    CHECK(f.attr_int("block") == c.block);
    CHECK(f.attr_string("format") == c.format);
    CHECK(f.attr_string("pow2_scales") == (c.pow2 ? "true" : "false"));
    CHECK(f.attr_string("source_file") == in);
    CHECK(f.attr_string("source_dataset") == "x");
    CHECK(f.attr_string("version") == FP8MOE_VERSION);
    CHECK(f.attr_string("status") == "complete");
    CHECK(f.attr_int("nonfinite_inputs") == q.stats.nonfinite_inputs);
    CHECK(f.attr_int("underflow") == q.stats.underflow);
    CHECK(f.attr_int("saturated") == q.stats.saturated);
    CHECK(f.attr_int("zero_blocks") == q.stats.zero_blocks);
  }
}

TEST_CASE("bad options and inputs: exit 2, one line, no output file") {
  const std::uint64_t seed = test::seed_for(202);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string in = dir.file("in.h5"), out = dir.file("out.h5");
  write_input(in, "A", test::random_tensor({256, 256}, seed, 1), Storage::f32);
  write_input(in, "ragged_k", test::random_tensor({4, 200}, seed, 2), Storage::f32);
  write_input(in, "ragged_n", test::random_tensor({200, 128}, seed, 3), Storage::f32);
  write_input(in, "W3", test::random_tensor({2, 128, 128}, seed, 4), Storage::f32);
  const std::string io = " --out " + quote(out);

  check_error(run_cli("--in " + quote(in) + " --dataset A --recipe 64x64" + io),
              {"unknown recipe '64x64'", "1x128, 128x1 or 128x128"}, out);
  check_error(run_cli("--in " + quote(in) + " --dataset A --recipe 1x128 --format e3m4" + io),
              {"unknown FP8 format 'e3m4'", "e4m3 or e5m2"}, out);
  check_error(run_cli("--in " + quote(in) + " --dataset A --recipe 1x128 --block 96" + io),
              {"block size 96", "64, 128 or 256"}, out);
  const std::string missing = dir.file("missing.h5");
  check_error(run_cli("--in " + quote(missing) + " --dataset A --recipe 1x128" + io),
              {"no such file '" + missing + "'"}, out);
  check_error(run_cli("--in " + quote(in) + " --dataset B --recipe 1x128" + io),
              {"cannot open dataset 'B' in '" + in + "': no such dataset (datasets here: A, W3, ragged_k, ragged_n)"},
              out);
  // The dim, its value and the fix.
  check_error(run_cli("--in " + quote(in) + " --dataset ragged_k --recipe 1x128" + io),
              {"dataset 'ragged_k'", "K", "= 200", "multiple of the quantization block 128", "pad K"}, out);
  check_error(run_cli("--in " + quote(in) + " --dataset ragged_n --recipe 128x128" + io),
              {"N (weight rows) = 200", "multiple of the quantization block 128"}, out);
  check_error(run_cli("--in " + quote(in) + " --dataset W3 --recipe 128x1" + io),
              {"recipe 128x1 takes a 2-D (M,K) tensor", "(2,128,128)"}, out);
  check_error(run_cli("--in " + quote(in) + " --dataset A --recipe 1x128"), {"'--out' is required"}, out);
  // An output in a missing directory is refused before anything is read, and leaves nothing behind.
  const std::string bad_out = dir.file("no/such/dir/out.h5");
  check_error(run_cli("--in " + quote(in) + " --dataset A --recipe 1x128 --out " + quote(bad_out)),
              {"the directory '" + dir.file("no/such/dir") + "' of --out '" + bad_out + "' does not exist"}, bad_out);
}

TEST_CASE("non-finite inputs are refused unless --allow-nonfinite, and counted") {
  const std::uint64_t seed = test::seed_for(203);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string in = dir.file("in.h5"), out = dir.file("out.h5");
  TensorF x = test::random_tensor({128, 256}, seed, 1);
  std::mt19937_64 rng(seed);
  const std::int64_t a = static_cast<std::int64_t>(rng() % x.numel()), b = static_cast<std::int64_t>(rng() % x.numel());
  x.data[static_cast<std::size_t>(a)] = std::numeric_limits<float>::quiet_NaN();
  x.data[static_cast<std::size_t>(b)] = -std::numeric_limits<float>::infinity();
  const std::int64_t count = a == b ? 1 : 2, first = std::min(a, b);
  write_input(in, "x", x, Storage::f32);
  const std::string first_idx = cat("[", first / 256, ",", first % 256, "]");

  const std::string args = "--in " + quote(in) + " --dataset x --recipe 1x128 --out " + quote(out);
  check_error(run_cli(args), {cat(count, " non-finite value(s)"), cat("first at ", first_idx),
                              "pass --allow-nonfinite to quantize anyway"},
              out);

  // Something already at OUT survives a failed run untouched.
  write_input(out, "keep", test::random_tensor({1, 128}, seed, 2), Storage::f32);
  CHECK(run_cli(args).rc == 2);
  CHECK(h5::File::open(out).is_dataset("keep"));
  std::filesystem::remove(out);

  const Run r = run_cli(args + " --allow-nonfinite");
  INFO("output: " << r.output);
  REQUIRE(r.rc == 0);
  CHECK(r.lines() == 1);
  CHECK(r.output.find("non-finite " + std::to_string(count)) != std::string::npos);
  const h5::File f = h5::File::open(out);
  CHECK(f.attr_int("nonfinite_inputs") == count);
  QuantOptions opt;
  const Quantized q = quantize_act_lhs(x, opt);
  CHECK(f.read_exact<std::uint8_t>("codes").data == q.codes.data);
}
