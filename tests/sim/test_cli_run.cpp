// `fp8moe run`, run as a subprocess: an op-level scenario the spec promises bitwise reports it,
// a misaligned shard is flagged, a layer plan runs, --list enumerates, and bad input is one line.
#include <doctest/doctest.h>

#include "support/run_cli.hpp"

using fp8moe::test::Run;

namespace {

Run run(const std::string& args) { return fp8moe::test::run_cli("run", args); }

bool has(const Run& r, const char* s) { return r.output.find(s) != std::string::npos; }

}  // namespace

TEST_CASE("op level: W sharded on N over tp=2 is bitwise single device: N = 384 moves blocks") {
  const Run ok = run("--level op --mesh tp=2 --pass fwd --rhs 'S(1)' --n 256 --seed 3");
  CAPTURE(ok.output);
  REQUIRE(ok.rc == 0);
  CHECK(has(ok, "tp:out-feature"));
  CHECK(has(ok, "     inf     1.0000"));  // sqnr_single inf, bitwise 1.0000
  CHECK(has(ok, "# block_aligned: true"));
  const Run mis = run("--level op --mesh tp=2 --pass fwd --rhs 'S(1)' --n 384 --seed 3");
  CAPTURE(mis.output);
  REQUIRE(mis.rc == 0);
  CHECK(has(mis, "# block_aligned: false"));
  CHECK(has(mis, "not a multiple of the 128x128 block"));
}

TEST_CASE("layer level: fsdp+tp on dp=2,tp=2 reports every tensor and its partial sums") {
  const Run r = run("--level layer --mesh dp=2,tp=2 --plan fsdp+tp --tokens 512 --offs 258,512 --lr 0.1");
  CAPTURE(r.output);
  REQUIRE(r.rc == 0);
  for (const char* t : {" y ", " dx ", " dw1 ", " dw2 ", " dw3 ", " w1_new "}) CHECK(has(r, t));
  CHECK(has(r, "# partial sums:"));
  CHECK_FALSE(has(r, "nan"));
}

TEST_CASE("--list enumerates valid and rejected scenarios with reasons") {
  const Run op = run("--level op --mesh tp=2 --list");
  CAPTURE(op.output);
  REQUIRE(op.rc == 0);
  CHECK(has(op, "# fwd on mesh tp=2: 3 direct, 3 by redistribution, 6 rejected"));
  CHECK(has(op, "use the dp plan"));
  const Run layer = run("--level layer --mesh tp=2 --list");
  REQUIRE(layer.rc == 0);
  CHECK(has(layer, "tp       valid"));
  CHECK(has(layer, "rejected"));
}

TEST_CASE("bad input: one line, exit 2") {
  for (const char* args : {"--mesh dp2", "--level op --mesh tp=2 --rhs 'S(0)'", "--level layer --mesh tp=2 --plan fsdp",
                           "--level op --mesh tp=2 --rhs 'S(1),R'", "--mode fp4", "--reduce-order random",
                           "--level cluster"}) {
    const Run r = run(args);
    CAPTURE(args);
    CAPTURE(r.output);
    CHECK(r.rc == 2);
    CHECK(r.lines() == 1);
  }
}

TEST_CASE("--backend cuda-cublaslt without --mode runs hopper-tc:cublas, the mode that models it") {
  // On a GPU machine the case runs; here it gets as far as the backend (no CUDA device), past the
  // expansion that refuses any other mode for cuBLASLt.
  const Run r = run("--level op --mesh tp=2 --rhs 'S(1)' --backend cuda-cublaslt");
  CAPTURE(r.output);
  CHECK_FALSE(has(r, "use mode hopper-tc:cublas"));
  if (r.rc == 0) {
    CHECK(has(r, "mode hopper-tc:cublas"));
  } else {
    CHECK(r.rc == 2);
    CHECK(has(r, "cuda-cublaslt"));
  }
  const Run other = run("--level op --mesh tp=2 --rhs 'S(1)' --backend cuda-cublaslt --mode promote-fp32:cublas");
  CAPTURE(other.output);
  CHECK(other.rc == 2);
  if (has(other, "unknown backend 'cuda-cublaslt'")) {
    // A build without CUDA (the sanitizer build) knows no cuBLASLt backend: both runs say so.
    CHECK(has(r, "unknown backend 'cuda-cublaslt'"));
  } else {
    CHECK(has(other, "use mode hopper-tc:cublas"));
  }
}
