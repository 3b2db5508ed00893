#include "sim/sweep/table.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "reference/error.hpp"
#include "sim/sweep/json_out.hpp"

namespace fp8moe::sim {

using results::CaseRow;

TableFormat parse_table_format(const std::string& s) {
  if (s == "table") return TableFormat::table;
  if (s == "csv") return TableFormat::csv;
  if (s == "markdown" || s == "md") return TableFormat::markdown;
  if (s == "json") return TableFormat::json;
  fail("unknown format '", s, "': use table, csv, markdown or json");
}

std::string format_number(double v, TableFormat f) {
  if (f == TableFormat::table || f == TableFormat::markdown) return format_db(v);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.17g}", v);
}

std::vector<Column> all_field_columns() {
  std::vector<Column> cols;
  for (const std::string& n : results::case_columns()) cols.push_back(field_column(n));
  return cols;
}

const std::vector<Column>& sweep_columns() {
  static const std::vector<Column> cols{
      {"scenario", [](const CaseRow& r) { return r.scenario; }},
      {"mesh", [](const CaseRow& r) { return r.mesh; }},
      {"plan", [](const CaseRow& r) { return r.level == "op" ? r.placements : r.plan; }},
      {"pass", [](const CaseRow& r) { return r.pass; }},
      {"tensor", [](const CaseRow& r) { return r.tensor; }},
      {"mode", [](const CaseRow& r) { return r.mode; }},
      {"backend", [](const CaseRow& r) { return r.backend; }},
      {"sqnr_hp64", [](const CaseRow& r) { return format_db(r.sqnr_db); }, true},
      {"sqnr_single", [](const CaseRow& r) { return format_db(r.sqnr_vs_single_db); }, true},
      {"bitwise", [](const CaseRow& r) { return fmt::format("{:.4f}", r.bitwise_equal_frac); }, true},
      {"aligned", [](const CaseRow& r) { return std::string(r.block_aligned ? "yes" : "NO"); }, true},
      {"status", [](const CaseRow& r) { return r.status; }},
  };
  return cols;
}

std::vector<Column> sweep_columns_for(const std::vector<CaseRow>& rows) {
  static const char* axes[] = {"experts", "tokens", "n", "k", "dim", "hidden", "offs", "dist", "seed", "format", "block",
                               "pow2_scales", "pad", "fsdp_gather", "reduce_dtype", "reduce_order", "fp8_dispatch", "lr"};
  std::vector<Column> cols;
  for (const Column& c : sweep_columns()) {
    if (c.header == "backend") {
      bool varies = false;
      for (const CaseRow& r : rows) varies = varies || r.backend != rows.front().backend;
      if (!varies) continue;
    }
    cols.push_back(c);
    if (c.header != "mode") continue;
    for (const char* a : axes) {
      bool varies = false;
      for (const CaseRow& r : rows) {
        varies = varies || results::column_text(r, a) != results::column_text(rows.front(), a);
        if (varies) break;
      }
      if (varies) cols.push_back(field_column(a));
    }
  }
  return cols;
}

Column field_column(const std::string& name) {
  const std::vector<std::string>& names = results::case_columns();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    fail("unknown column '", name, "': the cases table has ", all);
  }
  // No getter: cell() reads the field by its name.
  Column c;
  c.header = name;
  c.numeric = results::column_number(CaseRow{}, name).has_value();
  c.get = nullptr;
  return c;
}

namespace {

std::string cell(const Column& c, const CaseRow& r) {
  if (c.get) return c.get(r);
  const auto n = results::column_number(r, c.header);
  if (n && (c.header.find("sqnr") != std::string::npos)) return format_db(*n);
  if (n && std::isfinite(*n) && *n != std::floor(*n)) return fmt::format("{:g}", *n);
  return results::column_text(r, c.header).value_or("");
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

StreamTable::StreamTable(std::vector<Column> cols, const std::vector<CaseRow>& hints) : cols_(std::move(cols)) {
  for (const Column& c : cols_) {
    std::size_t w = c.header.size();
    if (c.get == nullptr || !c.numeric) {  // the metric columns are fixed width
      for (const CaseRow& r : hints) w = std::max(w, cell(c, r).size());
    }
    width_.push_back(std::max<std::size_t>(w, c.numeric ? 8 : 0));
  }
}

std::string StreamTable::header() const {
  std::string s = "#";
  for (std::size_t i = 0; i < cols_.size(); ++i) {
    s += ' ';
    s += cols_[i].numeric ? fmt::format("{:>{}}", cols_[i].header, width_[i]) : fmt::format("{:<{}}", cols_[i].header, width_[i]);
  }
  return s;
}

std::string StreamTable::row(const CaseRow& r) const {
  std::string s = " ";
  for (std::size_t i = 0; i < cols_.size(); ++i) {
    const std::string v = cell(cols_[i], r);
    s += ' ';
    s += cols_[i].numeric ? fmt::format("{:>{}}", v, width_[i]) : fmt::format("{:<{}}", v, width_[i]);
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string format_cells(const std::vector<std::vector<std::string>>& cells, TableFormat f,
                         const std::vector<bool>& numeric) {
  std::string out;
  if (cells.empty()) return out;
  const std::size_t nc = cells.front().size();
  if (f == TableFormat::json) return cells_json(cells, numeric).dump(2) + "\n";
  if (f == TableFormat::csv) {
    for (const auto& row : cells) {
      for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + csv_quote(row[i]);
      out += "\n";
    }
    return out;
  }
  std::vector<std::size_t> w(nc, 0);
  for (const auto& row : cells) {
    for (std::size_t i = 0; i < nc; ++i) w[i] = std::max(w[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& row, bool md) {
    std::string s = md ? "|" : "";
    for (std::size_t i = 0; i < nc; ++i) {
      const bool right = i < numeric.size() && numeric[i];
      s += md ? " " : (i ? "  " : "");
      s += right ? fmt::format("{:>{}}", row[i], w[i]) : fmt::format("{:<{}}", row[i], w[i]);
      if (md) s += " |";
    }
    while (!md && !s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  const bool md = f == TableFormat::markdown;
  out += line(cells.front(), md);
  if (md) {
    std::string sep = "|";
    for (std::size_t i = 0; i < nc; ++i) sep += (i < numeric.size() && numeric[i] ? std::string(w[i] + 1, '-') + ":|" : std::string(w[i] + 2, '-') + "|");
    out += sep + "\n";
  }
  for (std::size_t r = 1; r < cells.size(); ++r) out += line(cells[r], md);
  return out;
}

std::string format_rows(const std::vector<CaseRow>& rows, const std::vector<Column>& cols, TableFormat f) {
  if (f == TableFormat::json) {
    Json out = Json::array();
    for (const CaseRow& r : rows) {
      Json o = Json::object();
      for (const Column& c : cols) o[c.header] = c.get ? Json(c.get(r)) : row_json(r, {c.header})[c.header];
      out.push_back(std::move(o));
    }
    return out.dump(2) + "\n";
  }
  std::vector<std::vector<std::string>> cells;
  std::vector<bool> numeric;
  std::vector<std::string> head;
  for (const Column& c : cols) {
    head.push_back(c.header);
    numeric.push_back(c.numeric);
  }
  cells.push_back(head);
  for (const CaseRow& r : rows) {
    std::vector<std::string> row;
    for (const Column& c : cols) {
      // csv: a field column at full precision, as the cases table holds it
      row.push_back(f == TableFormat::csv && !c.get ? results::column_text(r, c.header).value_or("") : cell(c, r));
    }
    cells.push_back(std::move(row));
  }
  return format_cells(cells, f, numeric);
}

}  // namespace fp8moe::sim
