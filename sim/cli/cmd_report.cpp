// `fp8moe report`, `fp8moe compare` and `fp8moe gate`: reading sweep files (results/store.hpp).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "reference/error.hpp"
#include "results/store.hpp"
#include "scenarios/scenario.hpp"
#include "sim/cli/command.hpp"
#include "sim/sweep/gate.hpp"
#include "sim/sweep/json_out.hpp"
#include "sim/sweep/table.hpp"

namespace fp8moe::cli {

using results::CaseRow;
using sim::format_db;

namespace {

struct Run {
  std::string path, status, status_message;
  std::int64_t cases_total = 0, cases_done = 0;
  std::string git_sha, started, version;
  std::vector<CaseRow> rows;
};

Run load(const std::string& path) {
  const h5::File f = results::open_sweep(path);
  Run r;
  r.path = path;
  // Status and provenance may be unreadable (a disk that filled up while they were rewritten):
  // the rows up to rows_committed are what counts, so those attributes never refuse a file.
  r.status = results::sweep_status(f);
  r.status_message = results::attr_text_or(f, "status_message", "");
  r.git_sha = results::attr_text_or(f, "git_sha", "unknown");
  r.started = results::attr_text_or(f, "started_utc", "");
  r.version = results::attr_text_or(f, "tool_version", "");
  r.rows = results::read_cases(f);
  r.cases_total = f.attr_int("cases_total").value_or(0);
  std::set<std::int64_t> ids;
  for (const CaseRow& row : r.rows) ids.insert(row.case_id);
  r.cases_done = static_cast<std::int64_t>(ids.size());
  return r;
}

std::string describe(const Run& r) {
  return fmt::format("{}: status {}{}, {} rows from {} cases, fp8moe {} at {}, started {}", r.path, r.status,
                     r.status_message.empty() ? "" : " (" + r.status_message + ")", r.rows.size(), r.cases_done,
                     r.version, r.git_sha.substr(0, 12), r.started);
}

// The file's facts under their attribute names (json output).
sim::Json describe_json(const Run& r) {
  return sim::Json{{"path", r.path},
                   {"status", r.status},
                   {"status_message", r.status_message},
                   {"rows", r.rows.size()},
                   {"cases_done", r.cases_done},
                   {"cases_total", r.cases_total},
                   {"tool_version", r.version},
                   {"git_sha", r.git_sha},
                   {"started_utc", r.started}};
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& x : scenarios::split_values(s, false)) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int cmd_report(const Args& args) {
  po::options_description desc("fp8moe report options");
  desc.add_options()("help,h", "show this help")
      ("file", po::value<std::string>(), "a sweep result file")
      ("format", po::value<std::string>()->default_value("table"), "table, markdown, csv or json (csv and json: every "
       "column of the cases table under its own name, full precision)")
      ("group-by", po::value<std::string>()->default_value(""), "summarise per group of these columns, e.g. plan,pass")
      ("columns", po::value<std::string>()->default_value(""), "rows: show these columns of the cases table instead");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse(args, desc, vm,
             "usage: fp8moe report FILE [--format table|markdown|csv|json] [--group-by KEYS | --columns NAMES]", &pos)) {
    return 0;
  }
  if (!vm.count("file")) fail("give the sweep file to report on: fp8moe report FILE");
  const sim::TableFormat tf = sim::parse_table_format(vm["format"].as<std::string>());
  const bool json = tf == sim::TableFormat::json;
  const Run run = load(vm["file"].as<std::string>());
  if (!json && tf != sim::TableFormat::csv) fmt::print("# {}\n", describe(run));
  const std::vector<std::string> keys = split_commas(vm["group-by"].as<std::string>());
  if (keys.empty()) {
    std::vector<sim::Column> cols;
    const auto names = split_commas(vm["columns"].as<std::string>());
    if (!names.empty()) {
      for (const auto& n : names) cols.push_back(sim::field_column(n));
    } else if (tf == sim::TableFormat::csv || json) {
      cols = sim::all_field_columns();
    } else {
      cols = sim::sweep_columns();
    }
    if (json) {
      sim::print_json({{"file", describe_json(run)}, {"rows", sim::Json::parse(sim::format_rows(run.rows, cols, tf))}});
    } else {
      fmt::print("{}", sim::format_rows(run.rows, cols, tf));
    }
    return 0;
  }
  for (const auto& k : keys) (void)sim::field_column(k);  // unknown names fail here
  std::map<std::vector<std::string>, std::vector<const CaseRow*>> groups;
  for (const CaseRow& r : run.rows) {
    std::vector<std::string> g;
    for (const auto& k : keys) g.push_back(results::column_text(r, k).value_or(""));
    groups[g].push_back(&r);
  }
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> head = keys;
  for (const char* h : {"rows", "min_sqnr_db", "median_sqnr_db", "max_sqnr_db", "min_sqnr_vs_single_db", "bitwise_rows",
                        "not_ok"}) {
    head.emplace_back(h);
  }
  cells.push_back(head);
  for (const auto& [g, rows] : groups) {
    std::vector<double> db, single;
    int bitwise = 0, bad = 0;
    for (const CaseRow* r : rows) {
      db.push_back(r->sqnr_db);
      single.push_back(r->sqnr_vs_single_db);
      if (std::isinf(r->sqnr_vs_single_db) && r->sqnr_vs_single_db > 0) ++bitwise;
      if (r->status != "ok") ++bad;
    }
    std::vector<std::string> row = g;
    row.push_back(std::to_string(rows.size()));
    row.push_back(sim::format_number(*std::min_element(db.begin(), db.end()), tf));
    row.push_back(sim::format_number(median(db), tf));
    row.push_back(sim::format_number(*std::max_element(db.begin(), db.end()), tf));
    row.push_back(sim::format_number(*std::min_element(single.begin(), single.end()), tf));
    row.push_back(std::to_string(bitwise));
    row.push_back(std::to_string(bad));
    cells.push_back(std::move(row));
  }
  std::vector<bool> numeric(keys.size(), false);
  numeric.resize(head.size(), true);
  if (json) {
    sim::print_json({{"file", describe_json(run)}, {"group_by", keys}, {"groups", sim::cells_json(cells, numeric)}});
  } else {
    fmt::print("{}", sim::format_cells(cells, tf, numeric));
  }
  return 0;
}

namespace {

// cmd_compare in phases: match B's rows to A's, judge each pair, print, then --identical.

// One matched pair's verdict.
struct PairVerdict {
  double delta = 0;      // B - A in dB (0 when both are infinite)
  bool bit_a = false, bit_b = false;  // bitwise the single device
  bool identical = false;             // every metric the same
  std::string verdict;                // same, changed, better, REGRESSION
};

PairVerdict judge(const CaseRow& ra, const CaseRow& rb, double thr) {
  PairVerdict v;
  v.bit_a = std::isinf(ra.sqnr_vs_single_db) && ra.sqnr_vs_single_db > 0;
  v.bit_b = std::isinf(rb.sqnr_vs_single_db) && rb.sqnr_vs_single_db > 0;
  v.delta = (std::isinf(ra.sqnr_db) && std::isinf(rb.sqnr_db)) ? 0.0 : rb.sqnr_db - ra.sqnr_db;
  // Every metric the same (NaN equal to NaN: an error row that errs alike is unchanged).
  auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  v.identical = same(ra.sqnr_db, rb.sqnr_db) && same(ra.sqnr_vs_single_db, rb.sqnr_vs_single_db) &&
                same(ra.bitwise_equal_frac, rb.bitwise_equal_frac) && same(ra.rel_err, rb.rel_err) &&
                same(ra.max_abs_err, rb.max_abs_err) && same(ra.max_ulp, rb.max_ulp) && ra.status == rb.status &&
                ra.comm_bytes == rb.comm_bytes;
  if (!(v.delta >= -thr) || (v.bit_a && !v.bit_b)) {
    v.verdict = "REGRESSION";
  } else if (v.delta > thr) {
    v.verdict = "better";
  } else {
    v.verdict = v.identical ? "same" : "changed";
  }
  return v;
}

struct Comparison {
  std::vector<std::vector<std::string>> cells{{"case_id", "scenario", "mesh", "plan", "pass", "tensor", "mode", "sqnr_db_a",
                                               "sqnr_db_b", "delta_db", "sqnr_vs_single_db_a", "sqnr_vs_single_db_b",
                                               "bitwise", "verdict"}};
  int matched = 0, only_a = 0, only_b = 0, worse = 0, better = 0, lost = 0, gained = 0, changed = 0;
};

// B's rows matched to A's by case identity (and backend, when both ran the same backends).
Comparison compare_runs(const Run& a, const Run& b, double thr, bool all, sim::TableFormat tf) {
  std::set<std::string> backends_a, backends_b;
  for (const CaseRow& r : a.rows) backends_a.insert(r.backend);
  for (const CaseRow& r : b.rows) backends_b.insert(r.backend);
  const bool by_backend = backends_a == backends_b;
  std::map<std::string, const CaseRow*> in_b;
  for (const CaseRow& r : b.rows) in_b[sim::row_identity(r, by_backend)] = &r;
  Comparison c;
  std::set<std::string> seen;
  for (const CaseRow& ra : a.rows) {
    const auto it = in_b.find(sim::row_identity(ra, by_backend));
    if (it == in_b.end()) {
      ++c.only_a;
      continue;
    }
    seen.insert(it->first);
    const CaseRow& rb = *it->second;
    ++c.matched;
    const PairVerdict v = judge(ra, rb, thr);
    c.lost += v.bit_a && !v.bit_b;
    c.gained += !v.bit_a && v.bit_b;
    c.changed += !v.identical;
    c.worse += v.verdict == "REGRESSION";
    c.better += v.verdict == "better";
    if (!all && v.verdict == "same") continue;
    const std::string bitwise = v.bit_a == v.bit_b ? (v.bit_a ? "kept" : "-") : (v.bit_a ? "LOST" : "gained");
    c.cells.push_back({std::to_string(ra.case_id), ra.scenario, ra.mesh, ra.level == "op" ? ra.placements : ra.plan,
                       ra.pass, ra.tensor, ra.mode, sim::format_number(ra.sqnr_db, tf), sim::format_number(rb.sqnr_db, tf),
                       sim::format_number(v.delta, tf), sim::format_number(ra.sqnr_vs_single_db, tf),
                       sim::format_number(rb.sqnr_vs_single_db, tf), bitwise, v.verdict});
  }
  c.only_b = static_cast<int>(b.rows.size()) - static_cast<int>(seen.size());
  return c;
}

}  // namespace

int cmd_compare(const Args& args) {
  po::options_description desc("fp8moe compare options");
  desc.add_options()("help,h", "show this help")
      ("files", po::value<std::vector<std::string>>()->multitoken(), "two sweep files: A (before) and B (after)")
      ("format", po::value<std::string>()->default_value("table"), "table, markdown, csv or json")
      ("threshold", po::value<double>()->default_value(0.5), "a drop of more than this many dB is a regression")
      ("all", po::bool_switch(), "list every matched row, not only the changed ones")
      ("identical", po::bool_switch(), "exit 1 unless every row of B is in A with identical metrics (B may be a "
       "subset: a GPU or real-mesh run of the cases it can hold)");
  po::positional_options_description pos;
  pos.add("files", 2);
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe compare A.h5 B.h5 [--threshold DB] [--format table|markdown|csv|json] [--all] [--identical]", &pos)) {
    return 0;
  }
  const auto files = vm.count("files") ? vm["files"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (files.size() != 2) fail("give two sweep files: fp8moe compare A.h5 B.h5");
  const sim::TableFormat tf = sim::parse_table_format(vm["format"].as<std::string>());
  const double thr = vm["threshold"].as<double>();
  // NaN compares false with every drop, a negative threshold counts identical rows as regressions.
  if (!std::isfinite(thr) || thr < 0) fail("--threshold ", thr, ": give a finite number of dB >= 0, e.g. --threshold 0.5");
  const Run a = load(files[0]), b = load(files[1]);
  const Comparison c = compare_runs(a, b, thr, vm["all"].as<bool>(), tf);
  const bool want_identical = vm["identical"].as<bool>();
  const bool identical = !(c.changed || c.only_b || c.matched == 0);
  const std::vector<bool> numeric{true, false, false, false, false, false, false, true, true, true, true, true, false, false};
  if (tf == sim::TableFormat::json) {
    sim::Json j{{"a", describe_json(a)}, {"b", describe_json(b)}, {"threshold_db", thr},
                {"rows", sim::cells_json(c.cells, numeric)},
                {"summary", {{"matched", c.matched}, {"identical", c.matched - c.changed}, {"only_a", c.only_a},
                             {"only_b", c.only_b}, {"regressions", c.worse}, {"better", c.better},
                             {"bitwise_lost", c.lost}, {"bitwise_gained", c.gained}}}};
    if (want_identical) j["identical"] = identical;
    sim::print_json(j);
    return want_identical && !identical ? 1 : 0;
  }
  if (tf != sim::TableFormat::csv) fmt::print("# A = {}\n# B = {}\n", describe(a), describe(b));
  if (c.cells.size() > 1) fmt::print("{}", sim::format_cells(c.cells, tf, numeric));
  if (tf != sim::TableFormat::csv) {
    fmt::print("# compare: {} rows matched ({} identical), {} only in A, {} only in B; {} regressions (> {} dB or "
               "bitwise lost), {} better; bitwise lost {}, gained {}\n",
               c.matched, c.matched - c.changed, c.only_a, c.only_b, c.worse, thr, c.better, c.lost, c.gained);
  }
  if (!want_identical) return 0;
  if (!identical) {
    fmt::print(stderr, "compare --identical: {} of {} matched rows differ, {} rows only in B: not identical\n", c.changed,
               c.matched, c.only_b);
    return 1;
  }
  fmt::print("# compare --identical: every row of B ({}) is in A with identical metrics{}\n", c.matched,
             c.only_a ? fmt::format(" ({} rows of A are not in B)", c.only_a) : std::string());
  return 0;
}

int cmd_gate(const Args& args) {
  po::options_description desc("fp8moe gate options");
  desc.add_options()("help,h", "show this help")
      ("file", po::value<std::string>(), "a sweep result file")
      ("gates", po::value<std::string>(), "a gates file (default: the built-in scenarios/gates.ini)")
      ("baseline", po::value<std::string>(), "a baseline sweep file: no row may drop more than --max-drop dB")
      ("max-drop", po::value<double>()->default_value(0.5), "allowed drop against the baseline, dB")
      ("format", po::value<std::string>()->default_value("table"), "table or json");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe gate FILE [--gates FILE] [--baseline FILE] [--max-drop DB] [--format table|json]",
             &pos)) {
    return 0;
  }
  if (!vm.count("file")) fail("give the sweep file to gate: fp8moe gate FILE");
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "json") fail("--format ", format, ": use table or json");
  const bool json = format == "json";
  std::vector<sim::Gate> gates;
  if (vm.count("gates")) {
    const std::string path = vm["gates"].as<std::string>();
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot read gates file '", path, "': check the path (the shipped one is scenarios/gates.ini)");
    std::ostringstream ss;
    ss << in.rdbuf();
    gates = sim::parse_gates(ss.str(), path);
  } else {
    gates = sim::parse_gates(scenarios::embedded_default_gates(), "gates.ini");
  }
  const double max_drop = vm["max-drop"].as<double>();
  if (!(max_drop >= 0)) fail("--max-drop must be >= 0 dB, got ", max_drop);
  const Run run = load(vm["file"].as<std::string>());
  std::optional<Run> base;
  if (vm.count("baseline")) base = load(vm["baseline"].as<std::string>());
  sim::GateReport rep = sim::check_gates(run.rows, gates);
  if (base) sim::check_baseline(run.rows, base->rows, max_drop, rep);
  sim::check_identities(run.rows, base ? &base->rows : nullptr, gates, rep);
  const bool incomplete = run.status != "complete";
  const bool ok = rep.failures.empty() && !incomplete;
  const std::string incomplete_why =
      incomplete ? fmt::format("the sweep is {} ({} of {} cases): finish it with fp8moe sweep --resume {}", run.status,
                               run.cases_done, run.cases_total, run.path)
                 : std::string();
  if (json) {
    sim::Json failures = sim::Json::array();
    for (const sim::GateFailure& f : rep.failures) {
      failures.push_back({{"gate", f.gate}, {"row", sim::row_label(*f.row)}, {"case_id", f.row->case_id},
                          {"pass", f.row->pass}, {"tensor", f.row->tensor}, {"mode", f.row->mode},
                          {"sqnr_db", sim::json_number(f.row->sqnr_db)}, {"message", f.message}});
    }
    if (incomplete) failures.push_back({{"gate", "status"}, {"message", incomplete_why}});
    sim::Json j{{"file", describe_json(run)}, {"rows", rep.rows}, {"rows_gated", rep.rows_gated},
                {"checks", rep.checks}, {"gates", gates.size()}, {"failures", failures}, {"pass", ok}};
    if (base) j["baseline"] = {{"path", base->path}, {"max_drop_db", max_drop}};
    sim::print_json(j);
    return ok ? 0 : 1;
  }
  fmt::print("# gate {}\n", describe(run));
  for (const sim::GateFailure& f : rep.failures) {
    fmt::print("FAIL {}: {}: {}\n", f.gate, sim::row_label(*f.row), f.message);
  }
  if (incomplete) fmt::print("FAIL status: {}\n", incomplete_why);
  fmt::print("# gate: {} rows, {} under a gate, {} checks against {} gates{}: {} failures -> {}\n", rep.rows,
             rep.rows_gated, rep.checks, gates.size(),
             base ? fmt::format(" and the baseline {} (max drop {} dB)", base->path, max_drop) : std::string(),
             rep.failures.size() + (incomplete ? 1 : 0), ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace fp8moe::cli
