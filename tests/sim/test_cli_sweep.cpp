// fp8moe sweep / list / report / compare / gate / merge, run as subprocesses on small scenario
// files (issue 4 items 1-2, 5-6, 8; issue 7 item 5). Bad input: one message naming the file and
// line where there is one, exit 2, and no result file (or one marked failed).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "results/h5.hpp"
#include "support/cli_files.hpp"
#include "support/run_cli.hpp"

using fp8moe::test::has;
using fp8moe::test::quote;
using fp8moe::test::scratch;
using fp8moe::test::write_file;
using fp8moe::test::Run;

namespace {

namespace fs = std::filesystem;

// The scratch folder (support/cli_files.hpp).
const std::string kDir = fp8moe::test::work_dir();
const std::string kSmall = FP8MOE_SWEEP_SCENARIOS "/small.ini";
const std::string kStrict = FP8MOE_SWEEP_SCENARIOS "/gates_strict.ini";

Run cli(const std::string& cmd, const std::string& args) { return fp8moe::test::run_cli(cmd, args); }
// One small sweep shared by the report/compare/gate cases (run once per process).
const std::string& small_run() {
  static const std::string path = [] {
    const std::string p = scratch("small.h5");
    const Run r = cli("sweep", quote(kSmall) + " --out " + quote(p) + " -q");
    INFO(r.output);
    REQUIRE(r.rc == 0);
    return p;
  }();
  return path;
}

// The op cases of small.ini with other seeds: another sweep (other scenario text, other values).
const std::string& other_seed_run() {
  static const std::string path = [] {
    const std::string ini = write_file("other_seed.ini", "[defaults]\nmode = torchao-emulated, promote-fp32:cublas\nseed = 3..4\n"
                                                    "[scenario.op]\nlevel = op\nmesh = tp=2\noffs = 129,384,500\nn = 256\n"
                                                    "k = 256\npass = all\nplacements = direct\n");
    const std::string p = scratch("other_seed.h5");
    const Run r = cli("sweep", quote(ini) + " --out " + quote(p) + " -q");
    INFO(r.output);
    REQUIRE(r.rc == 0);
    return p;
  }();
  return path;
}

// A bad scenario: exit 2, one line naming file:line and the fix, and no result file.
void bad_scenario(const char* what, const std::string& text, const std::string& expect) {
  const std::string ini = write_file(std::string(what) + ".ini", text);
  const std::string out = scratch(std::string(what) + ".h5");
  const Run r = cli("sweep", quote(ini) + " --out " + quote(out));
  CAPTURE(what);
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(r.lines() == 1);
  CHECK(has(r, expect));
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".tmp"));
}

}  // namespace

TEST_CASE("bad input: unknown key with the nearest valid key") {
  bad_scenario("unknown_key", "[scenario.a]\nlevel = op\nmesh = tp=2\nexpets = 2\n",
               "unknown_key.ini:4: unknown key 'expets' (did you mean 'experts'?)");
  bad_scenario("unknown_section", "[scenaro.a]\nlevel = op\n", "unknown_section.ini:1:");
}

TEST_CASE("bad input: a bad value lists the allowed values") {
  bad_scenario("bad_mode", "[scenario.a]\nlevel = op\nmode = fp4\n",
               "bad_mode.ini:3: mode = fp4: unknown mode 'fp4': use hp64, bf16, exact, torchao-emulated, promote-fp32 or hopper-tc");
  bad_scenario("bad_pad", "[scenario.a]\nlevel = op\npad = maybe\n", "bad_pad.ini:3: pad = maybe: use auto, on or off");
  bad_scenario("bad_seed", "[scenario.a]\nlevel = op\nseed = 5..2\n", "bad_seed.ini:3:");
}

TEST_CASE("bad input: an invalid mesh string") {
  bad_scenario("bad_mesh", "[scenario.a]\nlevel = op\nmesh = dp2\n", "bad_mesh.ini:3: mesh = dp2: bad mesh entry 'dp2'");
  bad_scenario("bad_mesh_size", "[scenario.a]\nlevel = op\nmesh = tp=0\n", "bad_mesh_size.ini:3:");
}

TEST_CASE("bad input: a plan the mesh cannot hold") {
  bad_scenario("bad_plan", "[scenario.a]\nlevel = layer\nmesh = dp=2\nplan = tp\noffs = 256,512\n",
               "bad_plan.ini:4: plan = tp: no mesh of this scenario can hold it");
}

TEST_CASE("bad input: dims that break a block rule without padding") {
  bad_scenario("bad_k", "[scenario.a]\nlevel = op\nmesh = tp=2\noffs = 128,256\nk = 200\n",
               "k = 200 is not a multiple of the quantization block 128");
  bad_scenario("bad_groups", "[scenario.a]\nlevel = op\nmesh = tp=2\noffs = 100,200\npad = off\n",
               "pad = off but the token groups (offs 100,200) are not multiples of the block 128");
}

TEST_CASE("bad input: a case whose memory estimate exceeds the machine") {
  bad_scenario("too_big", "[scenario.a]\nlevel = layer\nexperts = 8\ntokens = 4000000\ndim = 7168\nhidden = 2048\n",
               "GiB available");
}

TEST_CASE("bad input: unreadable or foreign HDF5 files for report, compare, gate and resume") {
  const std::string junk = write_file("junk.h5", "not an HDF5 file at all\n");
  const std::string foreign = scratch("foreign.h5");
  {
    auto f = fp8moe::h5::File::create(foreign);
    f.set_attr("format", "something-else");
  }
  const std::string missing = kDir + "/no_such_file.h5";
  for (const std::string& file : {junk, foreign, missing}) {
    for (const std::string& cmd : {"report " + quote(file), "compare " + quote(file) + " " + quote(small_run()),
                                   "compare " + quote(small_run()) + " " + quote(file), "gate " + quote(file),
                                   "sweep --resume " + quote(file)}) {
      const auto sp = cmd.find(' ');
      const Run r = cli(cmd.substr(0, sp), cmd.substr(sp + 1));
      CAPTURE(cmd);
      CAPTURE(r.output);
      CHECK(r.rc == 2);
      CHECK(r.lines() == 1);
      CHECK(has(r, file));
    }
  }
  // The foreign file is left as it was by the failed resume.
  CHECK(fp8moe::h5::File::open(foreign).attr_string("format").value_or("") == "something-else");
}

TEST_CASE("an existing result needs --force or --resume, and --resume takes nothing else") {
  const Run r = cli("sweep", quote(kSmall) + " --out " + quote(small_run()));
  CAPTURE(r.output);
  CHECK(r.rc == 2);
  CHECK(has(r, "exists: finish it with --resume"));
  const Run r2 = cli("sweep", "--resume " + quote(small_run()) + " --only op");
  CHECK(r2.rc == 2);
  CHECK(has(r2, "--resume takes its scenarios and options from the file"));
  const Run r3 = cli("sweep", quote(kSmall) + " --shard 3/3");
  CHECK(r3.rc == 2);
  CHECK(has(r3, "give I/N with 0 <= I < N"));
  const Run r4 = cli("sweep", quote(kSmall) + " --mesh grid");
  CHECK(r4.rc == 2);
  CHECK(has(r4, "unknown --runtime 'grid'"));
}

TEST_CASE("list shows every expanded case, runnable and rejected with the reason") {
  const Run r = cli("list", quote(kSmall));
  CAPTURE(r.output);
  REQUIRE(r.rc == 0);
  CHECK(has(r, "# 120 cases: 44 to run, 76 rejected"));
  CHECK(has(r, "rejected"));
  CHECK(has(r, "level=op mesh=tp=2 pass=fwd"));
  const Run only = cli("list", quote(kSmall) + " --only 'lay*'");
  REQUIRE(only.rc == 0);
  CHECK_FALSE(has(only, "level=op"));
}

TEST_CASE("scenarios/production.ini runs on cuda-fastest: cuda-cutlass where built, else cuda-cublaslt") {
  const Run r = cli("list", quote(std::string(FP8MOE_SCENARIOS_DIR) + "/production.ini"));
  CAPTURE(r.output);
  if (r.rc == 2) {  // a build without CUDA: one line naming what the alias needs
    CHECK(has(r, "'cuda-fastest' is this build's fastest tensor-core backend"));
    return;
  }
  REQUIRE(r.rc == 0);
  const bool cutlass = has(r, "backend=cuda-cutlass");
  CHECK((cutlass || has(r, "backend=cuda-cublaslt")));
  CHECK_FALSE((cutlass && has(r, "backend=cuda-cublaslt")));
  CHECK_FALSE(has(r, "cuda-fastest"));
  // --backend takes the alias too
  const Run o = cli("list", quote(kSmall) + " --only op --backend cuda-fastest");
  CAPTURE(o.output);
  CHECK(o.rc == 0);
  CHECK(has(o, cutlass ? " cuda-cutlass " : " cuda-cublaslt "));
  CHECK_FALSE(has(o, "cuda-fastest"));
}

TEST_CASE("the sweep table: one row per case x pass x tensor, a summary line, default gates pass") {
  const std::string out = scratch("table.h5");
  const Run r = cli("sweep", quote(kSmall) + " --only op --out " + quote(out) + " -q");
  CAPTURE(r.output);
  REQUIRE(r.rc == 0);
  CHECK(has(r, "# scenario"));
  CHECK(has(r, "sqnr_hp64 sqnr_single  bitwise  aligned status"));
  CHECK(has(r, "# summary: 36 cases run, 36 rows: 36 ok, 0 fail, 0 error"));
  CHECK_FALSE(has(r, " nan "));
  const Run g = cli("gate", quote(small_run()));
  CAPTURE(g.output);
  CHECK(g.rc == 0);
  CHECK(has(g, "-> PASS"));
}

TEST_CASE("gate fails a floor no run meets, and a baseline drop, naming case, value and floor") {
  const Run g = cli("gate", quote(small_run()) + " --gates " + quote(kStrict));
  CAPTURE(g.output);
  CHECK(g.rc == 1);
  CHECK(has(g, "FAIL impossible: case "));
  CHECK(has(g, "below the floor 200.00 dB"));
  CHECK(has(g, "-> FAIL"));
  // A baseline that is the run itself passes at --max-drop 0.
  const Run same = cli("gate", quote(small_run()) + " --baseline " + quote(small_run()) + " --max-drop 0");
  CAPTURE(same.output);
  CHECK(same.rc == 0);
}

TEST_CASE("a gate's mode in the old spelling (promote-fp32/cublas) matches the table's promote-fp32:cublas") {
  for (const char* mode : {"promote-fp32/cublas", "promote-fp32:cublas"}) {
    const std::string gates = write_file("mode_spelling.ini", std::string("[gate.unreachable]\nmode = ") + mode +
                                                                  "\nmetric = sqnr_db\nmin_db = 500\n");
    const Run g = cli("gate", quote(small_run()) + " --gates " + quote(gates));
    CAPTURE(mode);
    CAPTURE(g.output);
    CHECK(g.rc == 1);
    CHECK(has(g, "FAIL unreachable: case "));
    CHECK(has(g, " promote-fp32:cublas "));
    CHECK_FALSE(has(g, "torchao-emulated"));  // the other mode of the run is not matched
  }
}

TEST_CASE("an `expect = identical` gate holds a row to the baseline's row of the same case, and asks for one") {
  const std::string gates = write_file("identity_gates.ini",
                                  "[gate.same]\ndescription = the reference against itself\nbackend = reference\n"
                                  "mode = !hp64\nexpect = identical\n");
  const Run none = cli("gate", quote(small_run()) + " --gates " + quote(gates));
  CAPTURE(none.output);
  CHECK(none.rc == 1);
  CHECK(has(none, "is an identity against a baseline run: give --baseline"));
  const Run self = cli("gate", quote(small_run()) + " --gates " + quote(gates) + " --baseline " + quote(small_run()));
  CAPTURE(self.output);
  CHECK(self.rc == 0);
  CHECK(has(self, "-> PASS"));
  const Run other = cli("gate", quote(small_run()) + " --gates " + quote(gates) + " --baseline " + quote(other_seed_run()));
  CAPTURE(other.output);
  CHECK(other.rc == 1);
  CHECK(has(other, "no row of this case in the baseline"));
  const Run bad = cli("gate", quote(small_run()) + " --gates " +
                                  quote(write_file("bad_identity.ini", "[gate.x]\nexpect = same\n")));
  CHECK(bad.rc == 2);
  CHECK(has(bad, "expect bitwise (to the single device) or identical (to the baseline run)"));
}

TEST_CASE("report: table, csv and markdown, grouped") {
  for (const char* f : {"table", "csv", "markdown"}) {
    const Run r = cli("report", quote(small_run()) + " --format " + f);
    CAPTURE(f);
    CAPTURE(r.output.substr(0, 2000));
    REQUIRE(r.rc == 0);
    CHECK(r.lines() > 30);
  }
  CHECK(has(cli("report", quote(small_run()) + " --format markdown"), "|---"));
  const Run g = cli("report", quote(small_run()) + " --group-by level,pass");
  CAPTURE(g.output);
  REQUIRE(g.rc == 0);
  CHECK(has(g, "wgrad"));
  const Run bad = cli("report", quote(small_run()) + " --group-by flavour");
  CHECK(bad.rc == 2);
}

TEST_CASE("compare: a run against itself is identical, a different seed changes values") {
  const Run same = cli("compare", quote(small_run()) + " " + quote(small_run()) + " --identical");
  CAPTURE(same.output);
  CHECK(same.rc == 0);
  CHECK(has(same, "76 rows matched (76 identical)"));
  const Run diff = cli("compare", quote(small_run()) + " " + quote(other_seed_run()) + " --identical");
  CAPTURE(diff.output);
  CHECK(diff.rc == 1);
  CHECK(has(diff, "0 rows matched"));
}

TEST_CASE("--shard I/N slices are disjoint and merge into the unsharded run") {
  std::string parts;
  for (int i = 0; i < 3; ++i) {
    const std::string p = scratch("shard" + std::to_string(i) + ".h5");
    const Run r = cli("sweep", quote(kSmall) + " --shard " + std::to_string(i) + "/3 --out " + quote(p) + " -q");
    CAPTURE(r.output);
    REQUIRE(r.rc == 0);
    CHECK(has(r, "in shard " + std::to_string(i) + "/3"));
    parts += " " + quote(p);
  }
  const std::string merged = scratch("merged.h5");
  const Run m = cli("merge", quote(merged) + parts);
  CAPTURE(m.output);
  REQUIRE(m.rc == 0);
  const Run c = cli("compare", quote(small_run()) + " " + quote(merged) + " --identical");
  CAPTURE(c.output);
  CHECK(c.rc == 0);
  // Refusals: a missing shard, a repeated one, a file of another sweep; no output left behind.
  const std::string bad = scratch("bad_merge.h5");
  const Run missing = cli("merge", quote(bad) + " " + quote(kDir + "/shard0.h5") + " " + quote(kDir + "/shard1.h5"));
  CHECK(missing.rc == 2);
  CHECK(has(missing, "shards 2/3 are missing"));
  const Run twice = cli("merge", quote(bad) + " " + quote(kDir + "/shard0.h5") + " " + quote(kDir + "/shard0.h5"));
  CHECK(twice.rc == 2);
  const Run other = cli("merge", quote(bad) + " " + quote(kDir + "/shard0.h5") + " " + quote(other_seed_run()));
  CAPTURE(other.output);
  CHECK(other.rc == 2);
  CHECK(has(other, "differ in scenario_text"));
  CHECK_FALSE(fs::exists(bad));
}

TEST_CASE("--runtime mpi without MPI support, or fake under a launcher, is refused") {
  const Run r = fp8moe::test::run_cli("sweep", quote(kSmall) + " --out " + quote(scratch("launch.h5")) + " -q");
  REQUIRE(r.rc == 0);
  // Several ranks started by a launcher with --runtime fake would run N copies of the sweep.
  const std::string cmd = "env OMPI_COMM_WORLD_SIZE=4 " + quote(FP8MOE_BIN) + " sweep " + quote(kSmall) + " --out " +
                          quote(scratch("launched.h5")) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string output;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int status = pclose(p);
  CAPTURE(output);
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(output.find("started as several ranks by a launcher") != std::string::npos);
  CHECK_FALSE(fs::exists(kDir + "/launched.h5"));
}

TEST_CASE("sweep --runtime names how ranks run, --mesh (its old name) still works with a note, a shape there is named") {
  const std::string out = scratch("runtime_alias.h5");
  const Run old = cli("sweep", quote(kSmall) + " --only op --mesh fake -q --force --out " + quote(out));
  CAPTURE(old.output);
  CHECK(old.rc == 0);
  CHECK(has(old, "now spelled --runtime fake"));
  const Run now = cli("sweep", quote(kSmall) + " --only op --runtime fake --force --out " + quote(out));
  CAPTURE(now.output);
  CHECK(now.rc == 0);
  CHECK(has(now, "on --runtime fake"));
  const Run shape = cli("sweep", quote(kSmall) + " --mesh dp=2,tp=2 --out " + quote(scratch("shape.h5")));
  CHECK(shape.rc == 2);
  CHECK(has(shape, "--mesh dp=2,tp=2 is a mesh shape"));
  const Run both = cli("sweep", quote(kSmall) + " --mesh fake --runtime fake --out " + quote(scratch("both.h5")));
  CHECK(both.rc == 2);
  CHECK(has(both, "give one"));
}
