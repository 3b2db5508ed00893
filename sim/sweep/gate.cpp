#include "sim/sweep/gate.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "reference/error.hpp"
#include "sim/sweep/expand.hpp"
#include "scenarios/scenario.hpp"
#include "sim/sweep/table.hpp"

namespace fp8moe::sim {

using results::CaseRow;

namespace {

// One `key = value` of a gate; returns whether it was min_db.
bool gate_item(Gate& g, const std::string& key, const scenarios::Value& v, const std::vector<std::string>& cols) {
  if (key == "description") {
    g.description = v.text;
  } else if (key == "expect") {
    if (v.text != "bitwise" && v.text != "identical") {
      fail(v.where(), ": expect = ", v.text, ": expect bitwise (to the single device) or identical (to the baseline "
           "run), or give metric and min_db");
    }
    (v.text == "bitwise" ? g.expect_bitwise : g.expect_identical) = true;
  } else if (key == "metric") {
    if (v.text != "sqnr_db" && v.text != "sqnr_vs_single_db") {
      fail(v.where(), ": metric = ", v.text, ": use sqnr_db (vs hp64) or sqnr_vs_single_db (vs single device)");
    }
    g.metric = v.text;
  } else if (key == "min_db") {
    std::size_t used = 0;
    try {
      g.min_db = std::stod(v.text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.text.size() || !std::isfinite(g.min_db)) fail(v.where(), ": min_db = ", v.text, ": give a number of dB");
    return true;
  } else if (std::find(cols.begin(), cols.end(), key) != cols.end()) {
    GateMatch m{key, {}, {}};
    for (std::string item : scenarios::split_values(v.text, /*tuple=*/true)) {
      if (item.empty()) fail(v.where(), ": ", key, " has an empty entry");
      // The old spelling of a promoted mode, "hopper-tc/cublas", reads as the table's "hopper-tc:cublas".
      if (key == "mode") std::replace(item.begin(), item.end(), '/', ':');
      (item.front() == '!' ? m.none_of : m.any_of).push_back(item.front() == '!' ? item.substr(1) : item);
    }
    g.match.push_back(std::move(m));
  } else {
    std::vector<std::string> known = cols;
    for (const char* k : {"description", "expect", "metric", "min_db"}) known.emplace_back(k);
    const std::string near = scenarios::nearest(key, known);
    fail(v.where(), ": unknown key '", key, "'", near.empty() ? "" : cat(" (did you mean '", near, "'?)"),
         ": a gate takes description, expect, metric, min_db and columns of the cases table");
  }
  return false;
}

}  // namespace

std::vector<Gate> parse_gates(const std::string& text, const std::string& path) {
  std::vector<Gate> gates;
  const auto& cols = results::case_columns();
  for (const scenarios::IniSection& s : scenarios::parse_ini(text, path)) {
    if (s.name.rfind("gate.", 0) != 0 || s.name.size() == 5) {
      fail(s.file, ":", s.line, ": unknown section [", s.name, "]: a gates file holds [gate.NAME] sections");
    }
    Gate g;
    g.name = s.name.substr(5);
    g.where = cat(s.file, ":", s.line);
    bool has_min = false;
    for (const auto& [key, v] : s.items) has_min = gate_item(g, key, v, cols) || has_min;
    const bool expect = g.expect_bitwise || g.expect_identical;
    if (expect == (!g.metric.empty() || has_min)) {
      fail(g.where, ": gate ", g.name, ": give either expect = bitwise|identical or metric and min_db");
    }
    if (!expect && (g.metric.empty() || !has_min)) fail(g.where, ": gate ", g.name, ": give both metric and min_db");
    gates.push_back(std::move(g));
  }
  return gates;
}

bool gate_matches(const Gate& g, const CaseRow& r) {
  for (const GateMatch& m : g.match) {
    const std::string v = results::column_text(r, m.column).value_or("");
    if (!m.any_of.empty() && std::none_of(m.any_of.begin(), m.any_of.end(),
                                          [&](const std::string& p) { return scenarios::glob_match(p, v); })) {
      return false;
    }
    if (std::any_of(m.none_of.begin(), m.none_of.end(), [&](const std::string& p) { return scenarios::glob_match(p, v); })) {
      return false;
    }
  }
  return true;
}

std::string row_label(const CaseRow& r) {
  return fmt::format("case {} [{}] {} {} {} {} {} {} {}", r.case_id, r.scenario, r.level, r.mesh,
                     r.level == "op" ? r.placements : r.plan, r.pass, r.tensor, r.mode, r.backend);
}

std::string row_identity(const CaseRow& r, bool with_backend) {
  std::string key = r.case_key;
  if (!with_backend) {
    const std::string field = " backend=" + r.backend;
    if (const auto at = key.find(field); at != std::string::npos) key.erase(at, field.size());
  }
  return key + "|" + r.pass + "|" + r.tensor;
}

GateReport check_gates(const std::vector<CaseRow>& rows, const std::vector<Gate>& gates) {
  GateReport rep;
  rep.rows = rows.size();
  for (const CaseRow& r : rows) {
    if (r.status == "error") {
      rep.failures.push_back({&r, "status", "the case failed to run: " + r.message});
      continue;
    }
    bool gated = false;
    for (const Gate& g : gates) {
      if (g.expect_identical || !gate_matches(g, r)) continue;  // identities: check_identities
      gated = true;
      ++rep.checks;
      if (g.expect_bitwise) {
        if (!(r.bitwise_equal_frac == 1.0 && std::isinf(r.sqnr_vs_single_db) && r.sqnr_vs_single_db > 0)) {
          rep.failures.push_back({&r, g.name, fmt::format("expected bitwise equal to the single device, got {:.4f} of "
                                                          "elements equal, sqnr_vs_single {} dB ({})",
                                                          r.bitwise_equal_frac, format_db(r.sqnr_vs_single_db),
                                                          g.description)});
        }
      } else {
        const double v = g.metric == "sqnr_db" ? r.sqnr_db : r.sqnr_vs_single_db;
        if (!(v >= g.min_db)) {  // NaN fails
          rep.failures.push_back({&r, g.name, fmt::format("{} = {} dB, below the floor {} dB{}", g.metric, format_db(v),
                                                          format_db(g.min_db),
                                                          g.description.empty() ? "" : " (" + g.description + ")")});
        }
      }
    }
    if (gated) ++rep.rows_gated;
  }
  return rep;
}

void check_baseline(const std::vector<CaseRow>& rows, const std::vector<CaseRow>& baseline, double max_drop,
                    GateReport& rep) {
  std::map<std::string, const CaseRow*> now;
  std::set<std::string> backends;
  for (const CaseRow& r : rows) {
    now[row_identity(r)] = &r;
    backends.insert(r.backend);
  }
  for (const CaseRow& b : baseline) {
    if (!backends.count(b.backend)) continue;
    const auto it = now.find(row_identity(b));
    ++rep.checks;
    if (it == now.end()) {
      rep.failures.push_back({&b, "baseline", "this baseline row is missing from the run"});
      continue;
    }
    const CaseRow& r = *it->second;
    for (const auto& [name, old_v, new_v] : {std::tuple{"sqnr_db", b.sqnr_db, r.sqnr_db},
                                            std::tuple{"sqnr_vs_single_db", b.sqnr_vs_single_db, r.sqnr_vs_single_db}}) {
      if (std::isnan(old_v)) continue;
      if (std::isinf(old_v) && old_v > 0) {
        if (!(std::isinf(new_v) && new_v > 0)) {
          rep.failures.push_back({&r, "baseline", fmt::format("{} was bitwise (inf) in the baseline, now {} dB", name, format_db(new_v))});
        }
        continue;
      }
      if (!(new_v >= old_v - max_drop)) {
        rep.failures.push_back({&r, "baseline", fmt::format("{} dropped from {} to {} dB (more than {} dB)", name,
                                                            format_db(old_v), format_db(new_v), max_drop)});
      }
    }
  }
}

void check_identities(const std::vector<CaseRow>& rows, const std::vector<CaseRow>* baseline,
                      const std::vector<Gate>& gates, GateReport& rep) {
  std::map<std::string, const CaseRow*> base;
  if (baseline) {
    for (const CaseRow& b : *baseline) base[row_identity(b, false)] = &b;
  }
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  for (const Gate& g : gates) {
    if (!g.expect_identical) continue;
    for (const CaseRow& r : rows) {
      if (r.status == "error" || !gate_matches(g, r)) continue;
      ++rep.checks;
      if (!baseline) {
        rep.failures.push_back({&r, g.name, fmt::format("gate {} is an identity against a baseline run: give --baseline "
                                                        "(e.g. results/baselines/ci.h5) ({})", g.name, g.description)});
        continue;
      }
      const auto it = base.find(row_identity(r, false));
      if (it == base.end()) {
        rep.failures.push_back({&r, g.name, fmt::format("no row of this case in the baseline to be identical to ({})",
                                                        g.description)});
        continue;
      }
      const CaseRow& b = *it->second;
      if (!(same(r.sqnr_db, b.sqnr_db) && same(r.sqnr_vs_single_db, b.sqnr_vs_single_db) && same(r.rel_err, b.rel_err) &&
            same(r.max_abs_err, b.max_abs_err) && same(r.max_ulp, b.max_ulp) &&
            same(r.bitwise_equal_frac, b.bitwise_equal_frac))) {
        rep.failures.push_back(
            {&r, g.name,
             fmt::format("not identical to the baseline's {} row (backend {}): sqnr_db {} vs {}, rel_err {:.6e} vs {:.6e}, "
                         "max_abs_err {:.6e} vs {:.6e}, split_k [{}] ({})",
                         b.mode, b.backend, format_db(r.sqnr_db), format_db(b.sqnr_db), r.rel_err, b.rel_err,
                         r.max_abs_err, b.max_abs_err, r.split_k, g.description)});
      }
    }
  }
}

}  // namespace fp8moe::sim
