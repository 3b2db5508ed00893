// Size and work limits of the CLI (issue 16 defects 3 and 4), one test case per class: integer
// overflow (world size, memory estimate, int32 token offsets), silent truncation of integer keys
// and flags, hangs on huge meshes and token counts, the memory estimate of run and gemm, the
// scenario file size and the number of expanded cases. Each asserts exit code 2, the message's
// key words, that no result file is left, and a bounded time: every command runs under
// `timeout` (these used to hang, segfault or run a different case), and CTest has a TIMEOUT.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/cli_files.hpp"
#include "support/run_cli.hpp"

using fp8moe::test::has;
using fp8moe::test::quote;
using fp8moe::test::scratch;
using fp8moe::test::write_file;
using fp8moe::test::TimedRun;

namespace {

namespace fs = std::filesystem;

// A refusal is a check of sizes before any work: seconds even on a loaded CI machine with
// sanitizers; the commands it replaces ran for hours or until memory ran out.
constexpr double kPrompt = 10.0;
constexpr int kKillAfter = 60;

// A scratch output path, its PATH.tmp from an earlier case removed too.
std::string out_path(const std::string& name) {
  const std::string p = scratch(name);
  fs::remove(p + ".tmp");
  return p;
}

// `fp8moe COMMAND ARGS` is refused: exit 2, one line holding every key word, promptly.
TimedRun refused(const std::string& command, const std::string& args, std::initializer_list<const char*> words) {
  const TimedRun r = fp8moe::test::run_cli_within(kKillAfter, command, args);
  CAPTURE(command);
  CAPTURE(args);
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);
  for (const char* w : words) CHECK_MESSAGE(has(r, w), "missing: ", w);
  CHECK(r.seconds < kPrompt);
  return r;
}

// A scenario refused by `list` and by `sweep`, which leaves no result file.
void refused_scenario(const std::string& name, const std::string& text, std::initializer_list<const char*> words) {
  const std::string ini = write_file(name + ".ini", text);
  refused("list", quote(ini), words);
  const std::string out = out_path(name + ".h5");
  refused("sweep", quote(ini) + " --out " + quote(out), words);
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".tmp"));
}

}  // namespace

TEST_CASE("overflow: a mesh whose world size wraps an int is refused when listed, not run") {
  // dp x tp = 2^32 was an int product of 0: listed as runnable, then run/sweep segfaulted.
  refused_scenario("world", "[scenario.a]\nlevel = op\nmesh = dp=65536,tp=65536\n",
                   {"world.ini:3", "dp=65536,tp=65536", "more ranks than the limit 65536"});
  refused("run", "--mesh dp=65536,tp=65536", {"more ranks than the limit 65536"});
  refused("run", "--mesh tp=4294967298", {"tp=4294967298", "exceeds the limit of 65536 ranks"});
}

TEST_CASE("overflow: a memory estimate beyond 64 bits is refused naming it, not run until bad_alloc") {
  refused_scenario("estimate", "[scenario.a]\nlevel = op\nmode = hp64\nn = 1099511627776\nk = 1099511627776\n",
                   {"estimate.ini:1", "the memory estimate", "beyond 64 bits"});
  const std::string save = out_path("estimate_gemm.h5");
  refused("gemm", "--n 1099511627776 --k 1099511627776 --modes hp64 --save " + quote(save),
          {"the memory estimate", "beyond 64 bits", "--n"});
  CHECK_FALSE(fs::exists(save));
  refused("run", "--level op --n 1099511627776 --k 1099511627776 --mode hp64", {"the memory estimate", "beyond 64 bits"});
}

TEST_CASE("overflow: token counts whose int32 offsets would wrap are refused with the estimate") {
  // Balanced routing computes the offsets without a per-token loop: they wrapped at 2^31.
  refused_scenario("offsets", "[scenario.a]\nlevel = op\nmode = hp64\nn = 1\nk = 1\ntokens = 4294967552\n",
                   {"offsets.ini:1", "tokens = 4294967552", "int32 token offsets", "would need about"});
  refused("gemm", "--tokens 2147483648 --routing balanced --modes hp64 --n 1 --k 1",
          {"tokens = 2147483648", "limit 2147483647", "int32 token offsets"});
  // Padding adds up to a block per expert: the padded rows must fit int32 too.
  refused("gemm", "--tokens 2147483000 --experts 8 --routing balanced", {"padded token rows", "2147484024", "limit 2147483647"});
  refused("run", "--level op --tokens 2147483648 --mode hp64", {"int32 token offsets"});
}

TEST_CASE("truncation: integer keys and flags are read in 64 bits and range-checked, not narrowed") {
  // experts = 2^32+2 ran as 2 and block = 2^32+128 as 128.
  refused_scenario("experts", "[scenario.a]\nlevel = op\nexperts = 4294967298\n",
                   {"experts.ini:3", "experts = 4294967298", "exceeds the limit 65536"});
  refused_scenario("block", "[scenario.a]\nlevel = op\nblock = 4294967424\n",
                   {"block.ini:3", "block = 4294967424", "exceeds the limit 2147483647"});
  refused_scenario("seed", "[scenario.a]\nlevel = op\nseed = 99999999999999999999\n", {"seed.ini:3", "beyond 64 bits"});
  refused("gemm", "--experts 4294967298", {"--experts 4294967298", "exceeds the limit 65536"});
  refused("gemm", "--block 4294967424", {"--block 4294967424", "exceeds the limit 2147483647"});
  refused("run", "--experts 4294967298", {"--experts 4294967298", "exceeds the limit 65536"});
  refused("run", "--block 4294967424", {"--block 4294967424", "exceeds the limit"});
  const std::string q = out_path("block_quantize.h5");
  refused("quantize", "--in x.h5 --dataset A --recipe 1x128 --block 4294967424 --out " + quote(q),
          {"--block 4294967424", "exceeds the limit 2147483647"});
  CHECK_FALSE(fs::exists(q));
  refused("bench-cpu", "--reps 4294967297", {"--reps 4294967297", "exceeds the limit 1000"});
  // Boost's lexical_cast wraps "-1" to 2^64 - 1 for an unsigned option.
  refused("gemm", "--seed -1", {"--seed -1", "not a non-negative integer"});
  refused("run", "--seed -1", {"--seed -1", "not a non-negative integer"});
}

TEST_CASE("hangs: list and gemm on a huge mesh or 10^12 routed tokens return at once with a refusal") {
  // Each of these ran for hours (a loop per rank or per token) before printing anything.
  refused_scenario("huge_mesh", "[scenario.a]\nlevel = op\nmesh = tp=100000000\n",
                   {"huge_mesh.ini:3", "tp=100000000", "exceeds the limit of 65536 ranks"});
  refused_scenario("huge_tokens", "[scenario.a]\nlevel = op\nrouting = uniform\ntokens = 1000000000000\n",
                   {"huge_tokens.ini:1", "tokens = 1000000000000", "int32 token offsets", "would need about", "PiB"});
  refused("gemm", "--tokens 1000000000000", {"tokens = 1000000000000", "int32 token offsets", "would need about"});
  // Four mesh dims enumerate 12^4 placement pairs per pass: half a minute of listing.
  refused_scenario("mesh_dims", "[scenario.a]\nlevel = op\nmesh = a=4,b=4,c=4,d=4\n", {"4 dims exceeds the limit of 3"});
}

TEST_CASE("memory: run and gemm estimate a case before they allocate and refuse what the machine cannot hold") {
  // --mesh dp=60000 holds 60000 ranks' tensors in this process (it grew past 3 GB, then on);
  // the estimate (about 800 GiB) and the machine's memory are named.
  refused("run", "--level layer --mesh dp=60000 --plan dp", {"mesh=dp=60000", "needs about", "GiB (estimate) but this machine has", "available"});
  const std::string save = out_path("memory_gemm.h5");
  refused("gemm", "--tokens 2000000000 --n 65536 --k 65536 --modes hp64 --save " + quote(save),
          {"needs about", "(estimate) but this machine has", "available", "--tokens"});
  CHECK_FALSE(fs::exists(save));
  // The sweep's own check, still naming the estimate (its message is the same sentence).
  refused_scenario("memory", "[scenario.a]\nlevel = layer\nexperts = 8\ntokens = 4000000\ndim = 7168\nhidden = 2048\n",
                   {"memory.ini:1", "needs about", "(estimate) but this machine has", "GiB available"});
}

TEST_CASE("file size: a scenario file past 16 MiB, or an endless device, is refused without reading it all") {
  refused("list", "/dev/zero", {"'/dev/zero'", "larger than the limit of 16777216 bytes"});
  const std::string out = out_path("zero.h5");
  refused("sweep", "/dev/zero --out " + quote(out), {"larger than the limit"});
  CHECK_FALSE(fs::exists(out));
  // A regular file one byte past the limit: valid text, refused for its size alone.
  std::string big = "[scenario.a]\nlevel = op\n";
  big.resize((std::size_t{16} << 20) + 1, '#');
  const std::string ini = write_file("big.ini", big);
  refused("list", quote(ini), {"big.ini", "larger than the limit of 16777216 bytes"});
}

TEST_CASE("case count: a scenario that expands past 10^6 cases is refused before the product is built") {
  // 10001 seeds x 101 values of n = 1010101 cases (2.4 GB and 20 s to list before).
  std::string n = "n = 128";
  for (int i = 2; i <= 101; ++i) n += ", " + std::to_string(128 * i);
  refused_scenario("cases", "[scenario.a]\nlevel = op\nmesh = 1\npass = fwd\nmode = hp64\nseed = 0..10000\n" + n + "\n",
                   {"cases.ini:1", "scenario a expands to more than the limit of 1000000 cases", "n 101", "seed 10001",
                    "use fewer values per axis"});
}
