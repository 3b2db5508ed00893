// `fp8moe bench` (and fp8moe-bench-kernels where CUDA is built), run as a subprocess: bad options
// are one line with exit code 2; without a CUDA device it says so and exits 77 (without CUDA in
// the build: exit 2 naming the fix), writing no file; with a device (a GPU machine) the quantizer
// table runs and the file ends complete.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "kernels/bench/bench.hpp"
#include "results/h5.hpp"
#include "results/h5_test_util.hpp"
#include "support/run_cli.hpp"

using namespace fp8moe;
using test::quote;

namespace {
test::Run bench(const std::string& args) { return test::run_cli("bench", args); }

// An existing --h5 file is refused without --force (exit 2, naming the fix) and left as it was.
template <class Front>
void check_existing_file_kept(const std::string& out, Front run) {
  std::ofstream(out) << "not mine";
  const test::Run r = run("--no-gemm --h5 " + quote(out));
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.output.find("pass --force") != std::string::npos);
  std::ifstream in(out);
  std::string kept;
  std::getline(in, kept);
  CHECK(kept == "not mine");
}
}  // namespace

TEST_CASE("fp8moe bench: option errors are one line, exit 2, and write nothing") {
  test::TempDir dir(1);
  const std::string out = dir.file("b.h5");
  test::Run r = bench("--no-quant --no-gemm --h5 " + quote(out));
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);
  CHECK(r.output.find("leaves nothing to bench") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));

  r = bench("--no-gemm --cutlass-tune");
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);
  CHECK(r.output.find("drop --no-gemm") != std::string::npos);
  r = bench("--no-gemm --cutlass-only co/ov");  // a filtered tune is a tune
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.output.find("drop --no-gemm") != std::string::npos);

  for (const char* bad : {"--runs 0", "--runs 100001", "--warmup -1"}) {
    r = bench(std::string("--no-quant ") + bad + " --h5 " + quote(out));
    CAPTURE(bad);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(r.output.find(std::string(bad).substr(0, std::string(bad).find(' '))) != std::string::npos);
    CHECK(r.output.find("is out of range") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  }
  r = bench("--runs three");
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);

  check_existing_file_kept(out, bench);
}

#ifdef FP8MOE_TEST_HAVE_CUTLASS
TEST_CASE("fp8moe bench: a --cutlass-only filter that names no configuration is refused before anything runs") {
  // Refused with or without a device (this machine may have none: the refusal comes first, where
  // a valid filter would exit 77), by both front ends. A filter that names some passes that check
  // (the next one, on --runs, refuses instead: nothing is timed on a GPU machine either).
  test::TempDir dir(1);
  const std::string out = dir.file("t.h5");
  const auto check = [&](const test::Run& r, const char* prefix) {
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(r.output.find(prefix) == 0);
    CHECK(r.output.find("'zz/none' names no CUTLASS configuration") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  };
  check(bench("--no-quant --cutlass-only zz/none --h5 " + quote(out)), "fp8moe bench: error: ");
#ifdef FP8MOE_BENCH_KERNELS_BIN
  check(test::run_program(FP8MOE_BENCH_KERNELS_BIN, "--no-quant --cutlass-only zz/none --h5 " + quote(out)),
        "fp8moe-bench-kernels: ");
#endif
  for (const char* named : {"co/ov", "pp/cl/M1", "n192"}) {
    const test::Run r = bench(std::string("--no-quant --cutlass-only ") + named + " --runs 0");
    CAPTURE(named);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.output.find("--runs 0 is out of range") != std::string::npos);
  }
}
#endif

#ifdef FP8MOE_BENCH_KERNELS_BIN
TEST_CASE("fp8moe-bench-kernels: the same option errors, one line and exit 2, nothing written") {
  test::TempDir dir(1);
  const std::string out = dir.file("k.h5");
  for (const char* bad : {"--runs 0", "--runs 100001", "--warmup -1", "--runs three", "--no-quant --no-gemm",
                          "--no-gemm --cutlass-tune"}) {
    const test::Run r = test::run_program(FP8MOE_BENCH_KERNELS_BIN, std::string(bad) + " --h5 " + quote(out));
    CAPTURE(bad);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(r.output.find("fp8moe-bench-kernels: ") == 0);
    CHECK_FALSE(std::filesystem::exists(out));
  }
  check_existing_file_kept(out,
                           [](const std::string& args) { return test::run_program(FP8MOE_BENCH_KERNELS_BIN, args); });
}
#endif

// A bench run to `out`: true when it measured (exit 0, the file complete, no temporary left);
// false when it could not (no device: exit 77; no CUDA in the build: exit 2), having said so and
// written no file.
namespace {
bool measured(const test::Run& r, const std::string& out) {
  CAPTURE(r.output);
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
  if (r.rc == 77 || r.rc == 2) {
    CHECK(r.output.find(r.rc == 77 ? "no CUDA device is visible" : "built without CUDA") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
    return false;
  }
  REQUIRE(r.rc == 0);
  const h5::File f = h5::File::open(out);
  CHECK(f.attr_string("status").value_or("") == "complete");
  return true;
}
}  // namespace

TEST_CASE("fp8moe bench: without a device (or CUDA) it says so and writes no file, with one the file ends complete") {
  test::TempDir dir(2);
  const std::string out = dir.file("b.h5");
  const test::Run r = bench("--no-gemm --h5 " + quote(out));
  if (measured(r, out)) CHECK(r.output.find("q/copy") != std::string::npos);
}

TEST_CASE("bench --shape: E,Me,N,K parsed whole, every broken rule named with its fix") {
  for (const kernels::BenchShape& s : kernels::default_bench_shapes()) {
    const std::string text = cat(s.E, ",", s.Me, ",", s.N, ",", s.K);
    const kernels::BenchShape p = kernels::parse_bench_shape(text);
    CAPTURE(text);
    CHECK(p.E == s.E);
    CHECK(p.Me == s.Me);
    CHECK(p.N == s.N);
    CHECK(p.K == s.K);
  }
  const kernels::BenchShape big = kernels::parse_bench_shape("4,8192,4096,28672");
  CHECK(big.K == 28672);
  // The largest shape under the element limit passes; one block more fails.
  CHECK(kernels::parse_bench_shape("1,128,128,16777088").K == 16777088);
  const struct {
    const char* text;
    const char* says;
  } bad[] = {
      {"4,8192,4096", "has 3 field(s), not 4"},
      {"4,8192,4096,7168,1", "has 5 field(s), not 4"},
      {"", "has 1 field(s), not 4"},
      {"4,8192,,7168", "field N"},
      {"4,8192,4096,7000", "K = 7000, not a multiple of 128: round it to 7040"},
      {"4,100,4096,7168", "Me = 100, not a multiple of 128: round it to 128"},
      {"0,8192,4096,7168", "field E: must be >= 1"},
      {"-4,8192,4096,7168", "field E"},
      {"four,8192,4096,7168", "field E: 'four' is not an integer"},
      {"4,8192,4096,7168.5", "field K: '7168.5' is not an integer"},
      {"1025,128,128,128", "E = 1025 experts: give 1 to 1024"},
      {"4,8192,4096,99999999999999999999", "field K"},
      {"1,128,128,16777216", "the activations (E*Me x K) 2^31 elements or more"},
      {"1024,2147483520,2147483520,2147483520", "2^31 elements or more"},  // products far past 64 bits
      {"16,131072,8192,128", "the output (E*Me x N) 2^31 elements or more"},
      {"128,128,16384,1024", "the weights (E x N x K) 2^31 elements or more"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.text);
    try {
      (void)kernels::parse_bench_shape(b.text);
      FAIL("accepted");
    } catch (const Error& e) {
      const std::string m = e.what();
      CAPTURE(m);
      CHECK(m.find(cat("--shape '", b.text, "'")) == 0);
      CHECK(m.find(b.says) != std::string::npos);
      CHECK(m.find("give E,Me,N,K") != std::string::npos);
    }
  }
}

TEST_CASE("fp8moe bench --shape: a bad shape is one line, exit 2, before anything runs or is written") {
  test::TempDir dir(1);
  const std::string out = dir.file("s.h5");
  const auto check = [&](const test::Run& r, const char* prefix, const char* says) {
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
    CHECK(r.output.find(prefix) == 0);
    CHECK(r.output.find(says) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  };
  check(bench("--no-quant --shape 4,8192,4096,7000 --h5 " + quote(out)), "fp8moe bench: error: ", "round it to 7040");
  check(bench("--no-gemm --shape 4,8192,4096,7168 --h5 " + quote(out)), "fp8moe bench: error: ", "drop --no-gemm");
#ifdef FP8MOE_BENCH_KERNELS_BIN
  check(test::run_program(FP8MOE_BENCH_KERNELS_BIN, "--no-quant --shape 4,8192 --h5 " + quote(out)), "fp8moe-bench-kernels: ",
        "has 2 field(s), not 4");
  check(test::run_program(FP8MOE_BENCH_KERNELS_BIN, "--no-gemm --shape 1,128,128,128 --h5 " + quote(out)),
        "fp8moe-bench-kernels: ", "drop --no-gemm");
#endif
}

TEST_CASE("fp8moe bench --shape: the GEMM table at the shapes asked for only (on a device), else exit 77 or 2") {
  test::TempDir dir(1);
  const std::string out = dir.file("g.h5");
  const test::Run r = bench("--no-quant --shape 2,256,384,512 --shape 1,128,128,1024 --warmup 0 --runs 2 --h5 " + quote(out));
  if (!measured(r, out)) return;
  CAPTURE(r.output);
  CHECK(r.output.find("( 2,  256,  384,  512)") != std::string::npos);
  CHECK(r.output.find("( 1,  128,  128, 1024)") != std::string::npos);
  CHECK(r.output.find("( 8, 4096, 4096, 7168)") == std::string::npos);  // no default shape
  CHECK(r.output.find("simt deepgemm") == std::string::npos);           // nor the CUDA-core rows
}
