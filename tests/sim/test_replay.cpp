// Replay of user tensors under placements (issue 18 item 1): the scenario key `inputs` and
// `fp8moe run --inputs / --save`. The oracle is fp8moe's own generated-data runs: the same
// tensors given through a file must give bitwise the same rows, under every placement and plan;
// keys that contradict the file, routing next to it and non-finite tensors are refused, naming
// both values, the dataset and the fix.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "reference/datagen.hpp"
#include "reference/error.hpp"
#include "results/h5.hpp"
#include "scenarios/scenario.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/sweep/expand.hpp"
#include "sim/sweep/run_case.hpp"
#include "support/cli_files.hpp"
#include "support/run_cli.hpp"
#include "support/test_support.hpp"

using namespace fp8moe;
using results::CaseRow;

namespace {

scenarios::Expansion expand_text(const std::string& text) {
  return scenarios::expand({scenarios::parse_scenario_text(text, "replay.ini")});
}

void write_offs(h5::Group& g, const std::vector<std::int32_t>& offs, bool as_dataset) {
  if (!as_dataset) {
    g.set_attr("offs", offs);
    return;
  }
  Tensor<std::int32_t> o({static_cast<std::int64_t>(offs.size())});
  o.data = offs;
  (void)g.write("offs", o);
}

std::string offs_text(const std::vector<std::int32_t>& offs) {
  std::string s;
  for (std::size_t i = 0; i < offs.size(); ++i) s += (i ? "," : "") + std::to_string(offs[i]);
  return s;
}

// Every metric of two runs' rows equal (NaN equal to NaN), the keys differing by the inputs only.
void require_same_rows(const scenarios::Expansion& gen, const scenarios::Expansion& given) {
  REQUIRE(gen.cases.size() == given.cases.size());
  REQUIRE(gen.runnable > 0);
  int compared = 0;
  for (std::size_t i = 0; i < gen.cases.size(); ++i) {
    const scenarios::Case& a = gen.cases[i];
    const scenarios::Case& b = given.cases[i];
    CAPTURE(a.key());
    CAPTURE(b.key());
    REQUIRE(a.rejected == b.rejected);
    CHECK(b.key().find(" inputs=") != std::string::npos);
    if (!a.rejected.empty()) continue;
    const auto ra = sim::run_case(a, false), rb = sim::run_case(b, false);
    REQUIRE(ra.rows.size() == rb.rows.size());
    for (std::size_t j = 0; j < ra.rows.size(); ++j) {
      const CaseRow &x = ra.rows[j], &y = rb.rows[j];
      CAPTURE(x.tensor);
      CAPTURE(y.message);
      REQUIRE(x.status == "ok");
      CHECK(y.status == x.status);
      CHECK(y.tensor == x.tensor);
      for (const auto& [name, u, v] :
           {std::tuple{"sqnr_db", x.sqnr_db, y.sqnr_db}, std::tuple{"sqnr_vs_single_db", x.sqnr_vs_single_db, y.sqnr_vs_single_db},
            std::tuple{"rel_err", x.rel_err, y.rel_err}, std::tuple{"max_abs_err", x.max_abs_err, y.max_abs_err},
            std::tuple{"max_ulp", x.max_ulp, y.max_ulp}, std::tuple{"bitwise_equal_frac", x.bitwise_equal_frac, y.bitwise_equal_frac},
            std::tuple{"underflow_frac", x.underflow_frac, y.underflow_frac}}) {
        CAPTURE(name);
        CHECK((u == v || (std::isnan(u) && std::isnan(v))));
      }
      CHECK(y.comm_bytes == x.comm_bytes);
      ++compared;
    }
  }
  CHECK(compared > 0);
}

}  // namespace

TEST_CASE("op replay: the generated tensors given as inputs give bitwise the generated rows, every placement") {
  const std::uint64_t seed = test::seed_for(181) % 100000;
  INFO("seed ", seed);
  // Ragged groups and an empty expert; K and N of two blocks.
  const std::vector<std::int32_t> offs{100, 100, 384};
  const std::int64_t M = 384, N = 256, K = 256, E = 3;
  for (const bool with_grad : {true, false}) {
    CAPTURE(with_grad);
    const std::string file = test::scratch(with_grad ? "op.h5" : "op_no_grad.h5");
    {
      h5::File f = h5::File::create(file);
      (void)f.write("A", generate({M, K}, Dist::student_t3, seed, kTensorA));
      (void)f.write("W", generate({E, N, K}, Dist::student_t3, seed, kTensorW));
      if (with_grad) (void)f.write("grad_out", generate({M, N}, Dist::student_t3, seed, kTensorGradOut));
      write_offs(f, offs, with_grad);
      f.close();
    }
    const std::string common = "level = op\nmesh = tp=2\nmesh = dp=2\npass = all\nplacements = all\nmode = promote-fp32:cublas, "
                               "hopper-tc:deepgemm, exact, bf16\ndist = student-t\nseed = " + std::to_string(seed) + "\n";
    const auto gen = expand_text("[scenario.r]\n" + common + "offs = " + offs_text(offs) + "\nn = 256\nk = 256\n");
    const auto given = expand_text("[scenario.r]\n" + common + "inputs = " + file + "\n");
    require_same_rows(gen, given);
  }
}

TEST_CASE("layer replay: the generated layer inputs given as a file give bitwise the generated rows, every plan") {
  const std::uint64_t seed = test::seed_for(182) % 100000;
  INFO("seed ", seed);
  const std::vector<std::int32_t> offs{130, 300, 512};
  sim::CaseSpec spec;
  spec.experts = 3;
  spec.tokens = 512;
  spec.dim = 256;
  spec.hidden = 384;
  spec.offs = offs;
  spec.seed = seed;
  const sim::LayerInputs in = sim::layer_inputs(spec);
  const std::string file = test::scratch("layer.h5");
  {
    h5::File f = h5::File::create(file);
    h5::Group g = f.create_group("run1");
    (void)g.write("x", in.x);
    (void)g.write("w1", in.W1);
    (void)g.write("w3", in.W3);
    (void)g.write("w2", in.W2);
    (void)g.write("grad_y", in.dy);
    write_offs(g, offs, true);
    f.close();
  }
  const std::string common = "level = layer\nmesh = dp=2\nmesh = tp=2\nmesh = ep=2\nplan = all\nlr = 0.25\n"
                             "mode = promote-fp32:cublas, torchao-emulated\nseed = " + std::to_string(seed) + "\n";
  const auto gen = expand_text("[scenario.l]\n" + common + "offs = " + offs_text(offs) + "\ndim = 256\nhidden = 384\n");
  const auto given = expand_text("[scenario.l]\n" + common + "inputs = " + file + ":run1\n");
  require_same_rows(gen, given);
}

TEST_CASE("inputs fix the shape: a contradicting key names both values, a restating one is accepted") {
  const std::string file = test::scratch("shape.h5");
  {
    h5::File f = h5::File::create(file);
    (void)f.write("A", generate({256, 128}, Dist::normal, 1, kTensorA));
    (void)f.write("W", generate({2, 384, 128}, Dist::normal, 1, kTensorW));
    write_offs(f, {128, 256}, true);
    f.close();
  }
  const std::string head = "[scenario.s]\nlevel = op\nmesh = 1\ninputs = " + file + "\n";
  for (const auto& [line, want] : std::vector<std::pair<std::string, std::string>>{
           {"experts = 3", "replay.ini:5: experts = 3 contradicts inputs = "},
           {"tokens = 300", "whose tensors give tokens 256"},
           {"n = 256", "whose tensors give n 384"},
           {"k = 256", "whose tensors give k 128"},
           {"offs = 100,256", "whose offs are 128,256"},
           {"routing = zipf:1.2", "routing = zipf:1.2 does not apply with inputs = "}}) {
    CAPTURE(line);
    const std::string e = test::error_of([&] { (void)expand_text(head + line + "\n"); });
    CHECK(e.find(want) != std::string::npos);
    CAPTURE(e);
  }
  const auto ok = expand_text(head + "experts = 2\ntokens = 256\nn = 384\nk = 128\npass = fwd\n");
  REQUIRE(ok.cases.size() == 1);
  CHECK(ok.cases[0].n == 384);
  CHECK(ok.cases[0].k == 128);
  CHECK(ok.cases[0].offs == std::vector<std::int32_t>{128, 256});
  // The level's tensors must be there.
  CHECK(test::error_of([&] { (void)expand_text(head + "pass = dgrad\n"); }).empty());
  CHECK(test::error_of([&] { (void)expand_text("[scenario.s]\nlevel = layer\nmesh = 1\nplan = single\ninputs = " + file + "\n"); })
            .find("has no layer-level tensors (x, w1, w3 and w2)") != std::string::npos);
  CHECK(test::error_of([&] { (void)expand_text("[scenario.s]\ninputs = " + test::scratch("missing.h5") + "\n"); }).find("missing.h5") !=
        std::string::npos);
}

TEST_CASE("a non-finite input is refused naming the dataset, or propagated with --allow-nonfinite") {
  const std::string file = test::scratch("nan.h5");
  {
    TensorF W = generate({2, 128, 128}, Dist::normal, 3, kTensorW);
    W(1, 5, 7) = NAN;
    h5::File f = h5::File::create(file);
    (void)f.write("A", generate({256, 128}, Dist::normal, 3, kTensorA));
    (void)f.write("W", W);
    write_offs(f, {128, 256}, true);
    f.close();
  }
  // In a sweep: an error row naming the dataset.
  const auto ex = expand_text("[scenario.n]\nlevel = op\nmesh = 1\npass = fwd\ninputs = " + file + "\n");
  REQUIRE(ex.cases.size() == 1);
  const auto r = sim::run_case(ex.cases[0], false);
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0].status == "error");
  CHECK(r.rows[0].message.find("W has 1 non-finite value(s), the first at flat index 17031") != std::string::npos);
  // fp8moe run: exit 2, or NaN metrics with --allow-nonfinite.
  const test::Run refused = test::run_cli("run", "--level op --mesh 1 --inputs " + test::quote(file));
  CHECK(refused.rc == 2);
  CHECK(test::has(refused, "--allow-nonfinite"));
  const test::Run allowed = test::run_cli("run", "--level op --mesh 1 --inputs " + test::quote(file) + " --allow-nonfinite");
  CAPTURE(allowed.output);
  CHECK(allowed.rc == 0);
  CHECK(test::has(allowed, "nan"));
}

TEST_CASE("fp8moe run --save writes inputs and results that --inputs replays to the same report") {
  const std::uint64_t seed = test::seed_for(183) % 100000;
  INFO("seed ", seed);
  const std::string saved = test::scratch("saved.h5");
  const std::string args = "--level op --mesh dp=2,tp=2 --pass dgrad --lhs 'R,S(1)' --rhs 'R,S(1)' --tokens 300 --experts 3 "
                           "--routing zipf:1.1 --seed " + std::to_string(seed);
  const test::Run first = test::run_cli("run", args + " --save " + test::quote(saved));
  CAPTURE(first.output);
  REQUIRE(first.rc == 0);
  const h5::File f = h5::File::open(saved);
  CHECK(f.attr_string("status").value_or("") == "complete");
  CHECK(f.attr_string("mesh").value_or("") == "dp=2,tp=2");
  CHECK(f.exists("grad_out"));
  CHECK(f.exists("W"));
  // The contraction sharded over tp: each rank's partial under ranks/<r>/, the sum as grad_A.
  CHECK(f.exists("promote-fp32:cublas/grad_A"));
  for (int r = 0; r < 4; ++r) CHECK(f.exists("promote-fp32:cublas/ranks/" + std::to_string(r) + "/grad_A"));
  // dgrad reads grad_out and W: the file replays that pass.
  const test::Run again = test::run_cli("run", "--level op --mesh dp=2,tp=2 --pass dgrad --lhs 'R,S(1)' --rhs 'R,S(1)' --inputs " +
                                                   test::quote(saved));
  CAPTURE(again.output);
  REQUIRE(again.rc == 0);
  const auto table = [](const std::string& out) { return out.substr(out.find("pass    tensor")); };
  CHECK(table(again.output) == table(first.output.substr(0, first.output.find("# saved"))));
  // It holds no A: the fwd pass cannot run on it, and says which tensors it reads.
  const test::Run fwd = test::run_cli("run", "--level op --mesh 1 --pass fwd --inputs " + test::quote(saved));
  CHECK(fwd.rc == 2);
  CHECK(test::has(fwd, "fwd reads A and W"));
  // Never over the inputs file itself.
  const test::Run self = test::run_cli("run", "--level op --mesh 1 --pass dgrad --inputs " + test::quote(saved) + " --save " +
                                                  test::quote(saved) + " --force");
  CHECK(self.rc == 2);
  CHECK(test::has(self, "is the input file"));
}

TEST_CASE("fp8moe run --save at layer level: each rank's rows and shards reassemble the global results exactly") {
  const std::uint64_t seed = test::seed_for(184) % 100000;
  INFO("seed ", seed);
  const std::string saved = test::scratch("layer_saved.h5");
  const test::Run run = test::run_cli("run", "--level layer --mesh dp=2,tp=2 --plan fsdp+tp --tokens 512 --offs 200,512 --lr 0.1 "
                                             "--seed " + std::to_string(seed) + " --save " + test::quote(saved));
  CAPTURE(run.output);
  REQUIRE(run.rc == 0);
  const h5::File f = h5::File::open(saved);
  const h5::Group g = f.open_group("promote-fp32:cublas");
  const h5::Group ranks = g.open_group("ranks");
  REQUIRE(ranks.groups().size() == 4);
  for (const char* name : {"dw1", "dw3", "dw2", "w1_new", "w2_new"}) {
    CAPTURE(name);
    const TensorF global = g.read_f32(name);
    TensorF re(global.shape, NAN);
    for (const std::string& r : ranks.groups()) {
      const h5::Dataset d = ranks.open_group(r).open_dataset(name);
      const TensorF piece = d.read_f32();
      const auto b = *d.attr_i32_vector("box_begin");
      const auto e = *d.attr_i32_vector("box_end");
      REQUIRE(b.size() == 3);
      REQUIRE(piece.shape == std::vector<std::int64_t>{e[0] - b[0], e[1] - b[1], e[2] - b[2]});
      for (std::int64_t i = 0; i < piece.dim(0); ++i) {
        for (std::int64_t j = 0; j < piece.dim(1); ++j) {
          for (std::int64_t k = 0; k < piece.dim(2); ++k) re(b[0] + i, b[1] + j, b[2] + k) = piece(i, j, k);
        }
      }
    }
    CHECK(re.data == global.data);  // every element placed, bitwise the global one
  }
  for (const char* name : {"y", "dx"}) {
    CAPTURE(name);
    const TensorF global = g.read_f32(name);
    TensorF re(global.shape, NAN);
    for (const std::string& r : ranks.groups()) {
      const TensorF piece = ranks.open_group(r).read_f32(name);
      const Tensor<std::int64_t> rows = ranks.open_group(r).read_exact<std::int64_t>("rows");
      REQUIRE(rows.numel() == static_cast<std::size_t>(piece.dim(0)));
      for (std::size_t i = 0; i < rows.numel(); ++i) {
        std::copy_n(piece.ptr() + static_cast<std::int64_t>(i) * piece.dim(1), piece.dim(1), re.ptr() + rows.data[i] * re.dim(1));
      }
    }
    CHECK(re.data == global.data);
  }
}
