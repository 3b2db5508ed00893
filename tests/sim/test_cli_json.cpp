// Machine-readable output (issue 20 items 1-2): `--format json` of report, compare, gate, list and
// info parses, carries the cases table's column names and its numbers exactly (checked against
// the HDF5 file itself), and CSV does too; `list` filters and counts its rejections.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <map>
#include <sstream>
#include <tuple>
#include <string>

#include "results/store.hpp"
#include "support/cli_files.hpp"
#include "support/run_cli.hpp"

using fp8moe::test::has;
using fp8moe::test::quote;
using fp8moe::test::scratch;
using fp8moe::test::Run;
using json = nlohmann::ordered_json;

namespace {

const std::string kSmall = FP8MOE_SWEEP_SCENARIOS "/small.ini";

Run cli(const std::string& cmd, const std::string& args) { return fp8moe::test::run_cli(cmd, args, /*stderr_too=*/false); }

const std::string& small_run() {
  static const std::string path = [] {
    const std::string p = scratch("json_small.h5");
    const Run r = fp8moe::test::run_cli("sweep", quote(kSmall) + " --out " + quote(p) + " -q");
    INFO(r.output);
    REQUIRE(r.rc == 0);
    return p;
  }();
  return path;
}

json parse(const Run& r) {
  CAPTURE(r.output.substr(0, 3000));
  json j;
  REQUIRE_NOTHROW(j = json::parse(r.output));
  return j;
}

// A JSON value against the double the HDF5 table holds: bit for bit, "inf"/"-inf"/"nan" for the
// non-finite ones.
void check_double(const json& v, double want, const std::string& what) {
  INFO(what << " = " << v.dump() << ", the file holds " << want);
  if (std::isnan(want)) {
    CHECK(v == "nan");
  } else if (std::isinf(want)) {
    CHECK(v == (want > 0 ? "inf" : "-inf"));
  } else {
    REQUIRE(v.is_number());
    CHECK(v.get<double>() == want);
  }
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (const char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == sep && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

TEST_CASE("report --format json: every column under its own name, numbers exactly as the file holds them") {
  const auto rows = fp8moe::results::read_cases(fp8moe::results::open_sweep(small_run()));
  REQUIRE(rows.size() > 30);
  const Run r = cli("report", quote(small_run()) + " --format json");
  REQUIRE(r.rc == 0);
  const json j = parse(r);
  CHECK(j["file"]["status"] == "complete");
  CHECK(j["file"]["rows"] == rows.size());
  REQUIRE(j["rows"].size() == rows.size());
  int inf_seen = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const json& o = j["rows"][i];
    REQUIRE(o.size() == fp8moe::results::case_columns().size());
    std::size_t k = 0;
    for (auto it = o.begin(); it != o.end(); ++it, ++k) CHECK(it.key() == fp8moe::results::case_columns()[k]);
    CHECK(o["case_id"] == rows[i].case_id);
    CHECK(o["seed"].get<std::uint64_t>() == rows[i].seed);
    CHECK(o["case_key"] == rows[i].case_key);
    check_double(o["sqnr_db"], rows[i].sqnr_db, "sqnr_db");
    check_double(o["sqnr_vs_single_db"], rows[i].sqnr_vs_single_db, "sqnr_vs_single_db");
    check_double(o["rel_err"], rows[i].rel_err, "rel_err");
    inf_seen += std::isinf(rows[i].sqnr_vs_single_db);
  }
  CHECK(inf_seen > 0);  // the bitwise rows: infinity as "inf"
  // --columns picks keys; --group-by gives the groups with the schema's metric names.
  const json c = parse(cli("report", quote(small_run()) + " --format json --columns pass,sqnr_db"));
  CHECK(c["rows"][0].size() == 2);
  const json g = parse(cli("report", quote(small_run()) + " --format json --group-by level,pass"));
  REQUIRE(g["groups"].size() >= 3);
  for (const char* key : {"level", "pass", "rows", "min_sqnr_db", "median_sqnr_db", "max_sqnr_db", "bitwise_rows"}) {
    CHECK(g["groups"][0].contains(key));
  }
  CHECK(g["groups"][0]["rows"].is_number_integer());
}

TEST_CASE("report --format csv: the schema's column names, full precision") {
  const auto rows = fp8moe::results::read_cases(fp8moe::results::open_sweep(small_run()));
  const Run r = cli("report", quote(small_run()) + " --format csv");
  REQUIRE(r.rc == 0);
  std::istringstream in(r.output);
  std::string head;
  std::getline(in, head);
  const auto cols = split(head, ',');
  REQUIRE(cols == fp8moe::results::case_columns());
  const auto at = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin());
  };
  std::string line;
  std::size_t i = 0;
  for (; std::getline(in, line); ++i) {
    REQUIRE(i < rows.size());
    const auto cells = split(line, ',');
    REQUIRE(cells.size() == cols.size());
    const std::string db = cells[at("sqnr_db")];
    INFO("row " << i << " sqnr_db '" << db << "'");
    if (std::isfinite(rows[i].sqnr_db)) {
      CHECK(std::strtod(db.c_str(), nullptr) == rows[i].sqnr_db);  // %.17g reads back exactly
    } else {
      CHECK(db == (rows[i].sqnr_db > 0 ? "inf" : "-inf"));
    }
    CHECK(cells[at("case_key")] == rows[i].case_key);
  }
  CHECK(i == rows.size());
}

TEST_CASE("compare and gate --format json: the verdicts, and exit codes as in table form") {
  const Run same = cli("compare", quote(small_run()) + " " + quote(small_run()) + " --identical --format json");
  CHECK(same.rc == 0);
  const json s = parse(same);
  CHECK(s["summary"]["matched"] == s["a"]["rows"]);
  CHECK(s["summary"]["identical"] == s["summary"]["matched"]);
  CHECK(s["summary"]["regressions"] == 0);
  CHECK(s["identical"] == true);
  const json all = parse(cli("compare", quote(small_run()) + " " + quote(small_run()) + " --all --format json"));
  REQUIRE(all["rows"].size() == s["summary"]["matched"].get<std::size_t>());
  CHECK(all["rows"][0]["verdict"] == "same");
  CHECK(all["rows"][0]["delta_db"] == 0);

  const Run gate = cli("gate", quote(small_run()) + " --format json");
  const json g = parse(gate);
  CHECK(g["pass"] == (gate.rc == 0));
  CHECK(g["rows"] == g["file"]["rows"]);
  CHECK(g["checks"].get<int>() > 0);
  const Run strict = cli("gate", quote(small_run()) + " --format json --gates " + quote(FP8MOE_SWEEP_SCENARIOS "/gates_strict.ini"));
  const json st = parse(strict);
  CHECK(strict.rc == 1);
  CHECK(st["pass"] == false);
  REQUIRE(!st["failures"].empty());
  for (const char* key : {"gate", "row", "case_id", "pass", "tensor", "mode", "sqnr_db", "message"}) {
    CHECK(st["failures"][0].contains(key));
  }
  CHECK(cli("gate", quote(small_run()) + " --format yaml").rc == 2);
}

TEST_CASE("list: placements on every op row, rejections counted by kind, --status and --reason filters, json") {
  const Run t = fp8moe::test::run_cli("list", quote(kSmall) + " --mesh-free-text-is-not-a-flag");
  CHECK(t.rc == 2);
  const json j = parse(cli("list", quote(kSmall) + " --format json"));
  const int run = j["run"], rejected = j["rejected"];
  CHECK(run + rejected == j["cases"].get<int>());
  CHECK(j["rows"].size() == j["cases"].get<std::size_t>());
  int by_reason = 0;
  for (const json& r : j["rejections_by_reason"]) by_reason += r["cases"].get<int>();
  CHECK(by_reason == rejected);
  for (const json& r : j["rows"]) {
    if (r["level"] == "op") CHECK(r["placements"].get<std::string>().find("=[") != std::string::npos);
    CHECK((r["status"] == "run") == r["reason"].get<std::string>().empty());
  }
  const json only_rejected = parse(cli("list", quote(kSmall) + " --format json --status rejected"));
  CHECK(only_rejected["shown"] == rejected);
  for (const json& r : only_rejected["rows"]) CHECK(r["status"] == "rejected");
  const json only_run = parse(cli("list", quote(kSmall) + " --format json --status run"));
  CHECK(only_run["shown"] == run);
  if (rejected > 0) {
    const std::string some = j["rejections_by_reason"][0]["reason_kind"];
    const std::string word = some.substr(some.rfind(' ') + 1);
    const json filtered = parse(cli("list", quote(kSmall) + " --format json --reason " + quote(word)));
    CHECK(filtered["shown"].get<int>() > 0);
    for (const json& r : filtered["rows"]) CHECK(r["reason"].get<std::string>().find(word) != std::string::npos);
  }
  const Run table = fp8moe::test::run_cli("list", quote(kSmall));
  CAPTURE(table.output);
  REQUIRE(table.rc == 0);
  if (rejected > 0) CHECK(has(table, "# rejected, by kind of reason"));
  CHECK(fp8moe::test::run_cli("list", quote(kSmall) + " --status maybe").rc == 2);
}

TEST_CASE("info --format json: the provenance keys of a sweep file and the CUDA facts") {
  const json j = parse(cli("info", "--format json"));
  for (const char* key : {"tool_version", "git_sha", "build", "hdf5_version", "cuda"}) CHECK(j.contains(key));
  CHECK(j["cuda"].contains("built"));
  CHECK(j["cuda"]["devices"].is_array());
}

TEST_CASE("--help lists options, not the positional plumbing behind FILE") {
  for (const char* cmd : {"report", "compare", "gate", "list", "sweep", "merge"}) {
    const Run r = fp8moe::test::run_cli(cmd, "--help");
    CAPTURE(cmd);
    CAPTURE(r.output);
    CHECK(r.rc == 0);
    CHECK(has(r, "usage: fp8moe"));
    CHECK(!has(r, "--file arg"));
    CHECK(!has(r, "--files arg"));
    CHECK(has(r, "--help"));
  }
}

TEST_CASE("operand statistics in the cases table: finite in quantized rows, single-device figures every placement shares") {
  const auto rows = fp8moe::results::read_cases(fp8moe::results::open_sweep(small_run()));
  // The statistics are of the single-device quantization of the global operands: every placement
  // of one pass, seed and padding shares them, and every row of one layer case too.
  std::map<std::string, const fp8moe::results::CaseRow*> first;
  int shared = 0;
  for (const auto& r : rows) {
    CAPTURE(r.case_key);
    REQUIRE(r.status == "ok");
    for (const auto& [lo, hi, sd, range] : {std::tuple{r.lhs_scale_min, r.lhs_scale_max, r.lhs_scale_std, r.lhs_dynamic_range},
                                            std::tuple{r.rhs_scale_min, r.rhs_scale_max, r.rhs_scale_std, r.rhs_dynamic_range}}) {
      CHECK(lo > 0);
      CHECK(lo <= hi);
      CHECK(sd >= 0);
      CHECK(range >= 1);
    }
    CHECK(r.lhs_overflow == 0);  // amax scales: nothing beyond a block's range
    CHECK(r.rhs_overflow == 0);
    CHECK(r.lhs_nonfinite == 0);
    CHECK(r.rhs_nonfinite == 0);
    CHECK(r.lhs_scale_min != r.rhs_scale_min);  // two operands, two sets of blocks
    const std::string group = r.level == "op" ? r.pass + " seed=" + std::to_string(r.seed) + " pad=" + std::to_string(r.pad)
                                              : std::to_string(r.case_id);
    const auto [it, fresh] = first.emplace(group, &r);
    if (fresh) continue;
    const auto& f = *it->second;
    CHECK(r.lhs_scale_min == f.lhs_scale_min);
    CHECK(r.lhs_scale_std == f.lhs_scale_std);
    CHECK(r.rhs_scale_max == f.rhs_scale_max);
    CHECK(r.rhs_dynamic_range == f.rhs_dynamic_range);
    CHECK(r.lhs_underflow == f.lhs_underflow);
    ++shared;
  }
  CHECK(shared > 10);
}
