// `fp8moe gemm`, run as a subprocess: the default case meets its floors, --save and --inputs
// round-trip bit for bit and agree with reference/ in-process, and every bad input is one line
// with exit code 2 and no output file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "reference/gemm.hpp"
#include "results/h5.hpp"
#include "results/h5_test_util.hpp"
#include "support/run_cli.hpp"
#include "support/test_support.hpp"

using namespace fp8moe;
using test::quote;
using test::Run;
using test::TempDir;

namespace {

Run gemm(const std::string& args) { return test::run_cli("gemm", args); }

void expect_error(const Run& r, std::initializer_list<const char*> needles) {
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);
  for (const char* n : needles) CHECK(r.output.find(n) != std::string::npos);
}

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (std::size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("the built-in default: every pass and mode, all quantized modes above torchao's floors") {
  const Run r = gemm("");
  CAPTURE(r.output);
  REQUIRE(r.rc == 0);
  CHECK(r.output.find("offs=[129,384,500]") != std::string::npos);
  CHECK(r.output.find("padding=on") != std::string::npos);
  for (const char* pass : {"\nfwd ", "\ndgrad ", "\nwgrad "}) CHECK(count(r.output, pass) == 8);
  CHECK(count(r.output, "ok (floor") == 18);
  CHECK(count(r.output, "hopper-tc:cublas") == 3);
  CHECK(r.output.find("BELOW") == std::string::npos);
  CHECK(r.output.find("nan") == std::string::npos);
}

TEST_CASE("hopper-tc:cublas outside cuBLASLt's options is refused before any work: a bare hopper-tc keeps deepgemm") {
  expect_error(gemm("--block 64 --modes hopper-tc:cublas"), {"hopper-tc:cublas", "block 64", "hopper-tc:deepgemm"});
  expect_error(gemm("--format e5m2 --modes exact,hopper-tc/cublas"), {"e5m2", "format e4m3"});
  const Run r = gemm("--block 64 --pass fwd --modes hopper-tc");
  CAPTURE(r.output);
  CHECK(r.rc == 0);
  CHECK(count(r.output, "\nfwd ") == 1);  // one row: the deepgemm family's
  CHECK(r.output.find("\nfwd    hopper-tc:deepgemm ") != std::string::npos);
  CHECK(r.output.find("left out") != std::string::npos);  // the note names the family dropped
}

TEST_CASE("--save writes every mode's outputs: --inputs on that file reproduces them bitwise") {
  const std::uint64_t seed = test::seed_for(401);
  CAPTURE(seed);
  TempDir dir(seed);
  const std::string f1 = dir.file("run1.h5"), f2 = dir.file("run2.h5");
  const Run r1 = gemm("--routing zipf:1.1 --empty 1 --experts 4 --tokens 700 --n 128 --k 256 --dist student-t --seed " +
                      std::to_string(seed % 100000) + " --save " + quote(f1));
  CAPTURE(r1.output);
  REQUIRE(r1.rc == 0);
  const Run r2 = gemm("--inputs " + quote(f1) + " --save " + quote(f2));
  CAPTURE(r2.output);
  REQUIRE(r2.rc == 0);
  const h5::File a = h5::File::open(f1), b = h5::File::open(f2);
  CHECK(a.attr_string("status") == std::optional<std::string>("complete"));
  for (const char* g : {"hp64", "bf16", "exact", "torchao-emulated", "promote-fp32:deepgemm", "promote-fp32:cublas"}) {
    CAPTURE(g);
    REQUIRE(a.is_group(g));
    for (const char* t : {"out", "grad_A", "grad_W"}) {
      const TensorF x = a.open_group(g).read_f32(t), y = b.open_group(g).read_f32(t);
      REQUIRE(x.shape == y.shape);
      CHECK(std::memcmp(x.ptr(), y.ptr(), x.numel() * sizeof(float)) == 0);
    }
  }
  // the offsets routed expert 1 nothing and the output rows match the token count
  const Tensor<std::int32_t> offs = a.read_i32("offs");
  CHECK(offs.data[1] == offs.data[0]);
  CHECK(a.open_group("hp64").shape("out") == std::vector<std::int64_t>{700, 128});
}

TEST_CASE("--inputs from a PyTorch-style file (bf16 as uint16, offs attribute) matches reference/ in-process") {
  const std::uint64_t seed = test::seed_for(402);
  CAPTURE(seed);
  TempDir dir(seed);
  const std::string in = dir.file("mine.h5"), out = dir.file("out.h5");
  const std::vector<std::int32_t> offs{100, 100, 356};
  const TensorF A = test::random_tensor({356, 256}, seed, kTensorA, Dist::outlier_channels);
  const TensorF W = test::random_tensor({3, 128, 256}, seed, kTensorW);
  const TensorF G = test::random_tensor({356, 128}, seed, kTensorGradOut);
  {
    h5::File f = h5::File::create(in);
    h5::Group g = f.create_group("acts");
    Tensor<std::uint16_t> bits(A.shape);
    for (std::size_t i = 0; i < A.numel(); ++i) bits.data[i] = bf16_bits_rne(A.data[i]);
    g.write("A", bits).set_attr("dtype", "bfloat16");
    g.write("W", W);
    g.write("grad_out", G);
    g.set_attr("offs", offs);
    f.close();
  }
  const Run r = gemm("--inputs " + quote(in + ":acts") + " --modes promote-fp32:cublas,exact --save " + quote(out));
  CAPTURE(r.output);
  REQUIRE(r.rc == 0);
  GemmOptions o;
  o.mode = Mode::promote_fp32;
  o.promotion = Promotion::cublas;
  o.pad = true;  // ragged groups: auto padding
  const TensorD fwd = grouped_fwd(A, W, offs, o), wg = grouped_wgrad(G, A, offs, o);
  const h5::File f = h5::File::open(out);
  const TensorF y = f.open_group("promote-fp32:cublas").read_f32("out");
  const TensorF dw = f.open_group("promote-fp32:cublas").read_f32("grad_W");
  for (std::size_t i = 0; i < y.numel(); ++i) REQUIRE(static_cast<double>(y.data[i]) == fwd.data[i]);
  for (std::size_t i = 0; i < dw.numel(); ++i) REQUIRE(static_cast<double>(dw.data[i]) == wg.data[i]);
}

TEST_CASE("bad input: one line, exit 2, the value and the fix, no output file") {
  TempDir dir(test::seed_for(403));
  const std::string out = dir.file("never.h5");
  const std::string save = " --save " + quote(out);
  expect_error(gemm("--offs 300,200" + save), {"offs[1] = 200", "must not decrease"});
  expect_error(gemm("--offs 100,-5" + save), {"offs[1] = -5"});
  expect_error(gemm("--offs 100,200 --tokens 300" + save), {"300"});
  // The same checks and sentences as a scenario file's keys, the flag named (sim/sweep/expand.cpp).
  expect_error(gemm("--k 200" + save), {"--k: k = 200", "multiple of the quantization block 128"});
  expect_error(gemm("--n 100 --k 256" + save), {"--n: n = 100"});
  expect_error(gemm("--offs 129,256 --pad off" + save), {"offs 129,256", "not multiples of the block 128", "pad = on or auto"});
  expect_error(gemm("--modes exact,fp4" + save), {"unknown mode 'fp4'", "promote-fp32"});
  expect_error(gemm("--format e3m4" + save), {"unknown FP8 format 'e3m4'", "e4m3 or e5m2"});
  expect_error(gemm("--block 100" + save), {"block size 100", "64, 128 or 256"});
  expect_error(gemm("--routing zipf:abc" + save), {"zipf:abc"});
  expect_error(gemm("--offs 128,256 --routing uniform" + save), {"either --offs or --routing"});
  expect_error(gemm("--inputs " + quote(dir.file("missing.h5")) + save), {"no such file"});
  expect_error(gemm("--bogus-flag"), {"bogus-flag"});
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
}

TEST_CASE("a NaN in --inputs is counted and refused, or propagated on request") {
  const std::uint64_t seed = test::seed_for(404);
  CAPTURE(seed);
  TempDir dir(seed);
  const std::string in = dir.file("nan.h5");
  TensorF A = test::random_tensor({256, 128}, seed, kTensorA);
  A(3, 7) = NAN;
  A(9, 1) = INFINITY;
  {
    h5::File f = h5::File::create(in);
    f.write("A", A);
    f.write("W", test::random_tensor({2, 128, 128}, seed, kTensorW));
    Tensor<std::int32_t> o({2});
    o.data = {128, 256};
    f.write("offs", o);
    f.close();
  }
  expect_error(gemm("--inputs " + quote(in)), {"A has 2 non-finite value(s)", "flat index 391", "--allow-nonfinite"});
  const Run r = gemm("--inputs " + quote(in) + " --allow-nonfinite --pass fwd");
  CAPTURE(r.output);
  CHECK(r.rc == 0);
  CHECK(r.output.find("warning: A has 2 non-finite") != std::string::npos);
  CHECK(r.output.find("nan") != std::string::npos);  // metrics are NaN, never a number
}
