// `fp8moe rules verify TABLE`: a framework's sharding-rule table checked by execution on the fake
// mesh (sim/verify/rule_verify.hpp). Exit 0 when every strategy DTensor would choose is correct, 1 when
// one is wrong or unsafe, 2 on a malformed table or bad options.
#include <fmt/core.h>

#include <cmath>
#include <map>
#include <tuple>

#include "reference/datagen.hpp"
#include "reference/error.hpp"
#include "sim/cli/command.hpp"
#include "sim/verify/rule_verify.hpp"
#include "sim/sweep/json_out.hpp"

namespace fp8moe::cli {
namespace {

const char* kUsage =
    "usage: fp8moe rules verify TABLE [--mesh MESH]... [--offs LIST [--n N] [--k K]]... [--seed N] [--all] [--format table|json]\n"
    "  TABLE: a JSON sharding-rule table (format: scenarios/rules/README.md; examples in scenarios/rules/)";

std::string numbers(const std::vector<int>& s) {
  if (s.empty()) return "-";
  std::string out;
  for (int n : s) out += (out.empty() ? "#" : ",#") + std::to_string(n);
  return out;
}

std::string db(double v) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return "inf";
  return fmt::format("{:.1f}", v);
}

std::string passes_text(const std::vector<Pass>& ps) {
  std::string out;
  for (Pass p : ps) out += (out.empty() ? "" : " ") + std::string(pass_name(p));
  return out;
}

// Defects grouped by what chose them: (op, pass, mesh, strategy numbers, verdict).
using DefectKey = std::tuple<std::string, Pass, std::string, std::vector<int>, sim::RuleVerdict>;
std::map<DefectKey, std::vector<const sim::RuleVerifyRow*>> defects_by_strategy(const sim::RuleVerifyReport& r) {
  std::map<DefectKey, std::vector<const sim::RuleVerifyRow*>> out;
  for (const sim::RuleVerifyRow& row : r.rows) {
    if (sim::rule_verdict_is_defect(row.verdict)) out[{row.op, row.pass, row.mesh, row.strategy, row.verdict}].push_back(&row);
  }
  return out;
}

void print_table(const sim::RuleTable& t, const sim::RuleVerifyReport& r, const sim::RuleVerifyOptions& opt, bool all) {
  fmt::print("# fp8moe rules verify {}{}\n", t.path, t.source.empty() ? "" : ": " + t.source);
  std::string meshes, shapes;
  for (const std::string& m : opt.meshes) meshes += (meshes.empty() ? "" : ", ") + m;
  for (const sim::RuleShapes& s : opt.shapes) shapes += (shapes.empty() ? "" : "; ") + s.name + " (" + s.str() + ")";
  fmt::print("# meshes {}; shapes {}; seed {}\n", meshes, shapes, r.seed);
  fmt::print("# every placement of the data arguments (R or S(d) per mesh dim; scales follow their data, offsets R); "
             "the strategy DTensor would choose (no redistribution, else zero cost, else least cost); run per rank on the "
             "fake mesh; assembled as claimed; compared with one device\n");
  for (const sim::RuleOp& op : t.ops) {
    fmt::print("# op {} ({}), passes {}:\n", op.name, sim::rule_op_kind_name(op.kind), passes_text(op.passes));
    for (const sim::RuleStrategy& s : op.strategies) {
      fmt::print("#   {}{}\n", s.str(op.args), s.passes == op.passes ? "" : "  (" + passes_text(s.passes) + ")");
    }
  }
  fmt::print("{:<6} {:<10} {:<7} {:<24} {:<9} {:<36} {:<15} {:>7}  {}\n", "pass", "mesh", "shapes", "inputs", "strategy",
             "redistribution", "verdict", "sqnr_db", "detail");
  std::size_t hidden = 0;
  for (const sim::RuleVerifyRow& row : r.rows) {
    if (!all && (row.verdict == sim::RuleVerdict::correct || row.verdict == sim::RuleVerdict::correct_partial)) {
      ++hidden;
      continue;
    }
    fmt::print("{:<6} {:<10} {:<7} {:<24} {:<9} {:<36} {:<15} {:>7}  {}\n", pass_name(row.pass), row.mesh, row.shapes,
               row.inputs, numbers(row.strategy), row.redistribution, sim::rule_verdict_name(row.verdict), db(row.sqnr_db),
               row.detail);
  }
  if (hidden) fmt::print("# {} correct rows not shown (--all shows every row)\n", hidden);
  // Counts per op and pass.
  for (const sim::RuleOp& op : t.ops) {
    for (Pass p : op.passes) {
      std::map<sim::RuleVerdict, int> n;
      double low = std::numeric_limits<double>::infinity();
      for (const sim::RuleVerifyRow& row : r.rows) {
        if (row.op != op.name || row.pass != p) continue;
        ++n[row.verdict];
        if (row.verdict == sim::RuleVerdict::correct_partial) low = std::min(low, row.sqnr_db);
      }
      std::string line;
      for (const auto& [v, c] : n) {
        line += cat(line.empty() ? "" : ", ", c, " ", sim::rule_verdict_name(v),
                    v == sim::RuleVerdict::correct_partial ? cat(" (SQNR >= ", db(low), " dB)") : "");
      }
      fmt::print("# {} {}: {}\n", op.name, pass_name(p), line);
    }
  }
  const auto defects = defects_by_strategy(r);
  if (!defects.empty()) fmt::print("# defects, by the strategy DTensor chose:\n");
  for (const auto& [key, rows] : defects) {
    const auto& [op, pass, mesh, strategy, verdict] = key;
    fmt::print("#   {} {} on {}: {} chosen -> {} for {} placement(s), e.g. {}: {}\n", op, pass_name(pass), mesh,
               rows.front()->strategy_text, sim::rule_verdict_name(verdict), rows.size(), rows.front()->inputs,
               rows.front()->detail);
  }
  for (const std::string& s : r.never_chosen) fmt::print("# never chosen: {}\n", s);
  const int d = r.defects();
  fmt::print("# verdict: {}\n", d ? cat(d, " of ", r.rows.size(), " (pass, placement) cases wrong or unsafe -> exit 1")
                                  : cat("all ", r.rows.size(), " (pass, placement) cases correct -> exit 0"));
}

void print_json(const sim::RuleTable& t, const sim::RuleVerifyReport& r, const sim::RuleVerifyOptions& opt) {
  sim::Json j;
  j["table"] = t.path;
  j["source"] = t.source;
  j["seed"] = r.seed;
  j["meshes"] = opt.meshes;
  sim::Json shapes = sim::Json::array();
  for (const sim::RuleShapes& s : opt.shapes) shapes.push_back({{"name", s.name}, {"shape", s.str()}});
  j["shapes"] = shapes;
  sim::Json ops = sim::Json::array();
  for (const sim::RuleOp& op : t.ops) {
    sim::Json st = sim::Json::array();
    for (const sim::RuleStrategy& s : op.strategies) {
      std::vector<std::string> ps;
      for (Pass p : s.passes) ps.emplace_back(pass_name(p));
      st.push_back({{"number", s.number}, {"passes", ps}, {"text", s.str(op.args)}});
    }
    std::vector<std::string> ps;
    for (Pass p : op.passes) ps.emplace_back(pass_name(p));
    ops.push_back({{"name", op.name}, {"kind", sim::rule_op_kind_name(op.kind)}, {"passes", ps}, {"strategies", st}});
  }
  j["ops"] = ops;
  sim::Json rows = sim::Json::array();
  for (const sim::RuleVerifyRow& row : r.rows) {
    rows.push_back({{"op", row.op},
                    {"pass", pass_name(row.pass)},
                    {"mesh", row.mesh},
                    {"shapes", row.shapes},
                    {"inputs", row.inputs},
                    {"strategy", row.strategy},
                    {"strategy_text", row.strategy_text},
                    {"redistribution", row.redistribution},
                    {"cost", row.cost},
                    {"verdict", sim::rule_verdict_name(row.verdict)},
                    {"sqnr_db", sim::json_number(row.sqnr_db)},
                    {"detail", row.detail}});
  }
  j["rows"] = rows;
  j["never_chosen"] = r.never_chosen;
  j["defects"] = r.defects();
  sim::print_json(j);
}

}  // namespace

int cmd_rules(const Args& args) {
  po::options_description desc("fp8moe rules verify options");
  desc.add_options()("help,h", "show this help")("table", po::value<std::string>(), "the rule table (positional)")(
      "mesh", po::value<std::vector<std::string>>()->composing(),
      "a mesh to verify on, repeatable (default: tp=2 and dp=2,tp=2)")(
      "seed", po::value<std::uint64_t>()->default_value(0), "seed of the random codes, scales and inputs")(
      "offs", po::value<std::vector<std::string>>()->composing(),
      "a shape set's token-group ends, e.g. 20,20,45 (E = their count, M = the last), repeatable; replaces the "
      "default sets")("n", po::value<std::int64_t>()->default_value(0),
                      "N of the --offs sets, a multiple of 128 (default 0: 128 x max(4, ranks))")(
      "k", po::value<std::int64_t>()->default_value(0), "K of the --offs sets, likewise")(
      "all", po::bool_switch(), "print every row, not only the defects and unreachable ones")(
      "format", po::value<std::string>()->default_value("table"), "table or json");
  if (args.empty() || (args[0] != "verify" && args[0] != "--help" && args[0] != "-h")) {
    fail("fp8moe rules: the subcommand is verify: ", kUsage);
  }
  const Args rest(args.begin() + (args[0] == "verify" ? 1 : 0), args.end());
  po::positional_options_description pos;
  pos.add("table", 1);
  po::variables_map vm;
  if (!parse(rest, desc, vm, kUsage, &pos)) return 0;
  if (!vm.count("table")) fail("fp8moe rules verify: give the rule table: ", kUsage);
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "json") fail("--format ", format, ": use table or json");
  sim::RuleVerifyOptions opt;
  if (vm.count("mesh")) opt.meshes = vm["mesh"].as<std::vector<std::string>>();
  opt.seed = vm["seed"].as<std::uint64_t>();
  if (vm.count("offs")) {
    opt.shapes.clear();
    for (const std::string& o : vm["offs"].as<std::vector<std::string>>()) {
      sim::RuleShapes sh{"offs=" + o, parse_int_list(o, "--offs"), vm["n"].as<std::int64_t>(), vm["k"].as<std::int64_t>()};
      opt.shapes.push_back(std::move(sh));
    }
  } else if (!vm["n"].defaulted() || !vm["k"].defaulted()) {
    fail("--n and --k size the --offs shape sets: give --offs too (e.g. --offs 20,20,45 --n 256 --k 256)");
  }
  const sim::RuleTable table = sim::load_rule_table(vm["table"].as<std::string>());
  fmt::print(stderr, "# fp8moe rules verify: {} op(s) of {} on {} mesh(es)\n", table.ops.size(), table.path, opt.meshes.size());
  const sim::RuleVerifyReport rep = sim::verify_rules(table, opt);
  if (format == "json") {
    print_json(table, rep, opt);
  } else {
    print_table(table, rep, opt, vm["all"].as<bool>());
  }
  return rep.defects() ? 1 : 0;
}

}  // namespace fp8moe::cli
