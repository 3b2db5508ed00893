#include "sim/sweep/json_out.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace fp8moe::sim {

Json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

namespace {

// A numeric cell's text as a JSON value: integers exactly (a u64 seed does not fit a double), the
// rest through strtod (the texts come from %.17g or {:.2f}: a double reads back).
Json number_text(const std::string& s) {
  if (s == "nan" || s == "inf" || s == "-inf" || s.empty()) return s;
  errno = 0;
  char* end = nullptr;
  if (s.find_first_of(".eE") == std::string::npos) {
    if (s[0] == '-') {
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (errno == 0 && end && *end == '\0') return v;
    } else {
      const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
      if (errno == 0 && end && *end == '\0') return v;
    }
  }
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (errno == 0 && end && *end == '\0') return json_number(d);
  return s;
}

}  // namespace

Json row_json(const results::CaseRow& r, const std::vector<std::string>& columns) {
  const std::vector<std::string>& cols = columns.empty() ? results::case_columns() : columns;
  Json j = Json::object();
  for (const std::string& c : cols) {
    const std::string text = results::column_text(r, c).value_or("");
    j[c] = results::column_number(r, c) ? number_text(text) : Json(text);
  }
  return j;
}

Json cells_json(const std::vector<std::vector<std::string>>& cells, const std::vector<bool>& numeric) {
  Json out = Json::array();
  if (cells.empty()) return out;
  const auto& head = cells.front();
  for (std::size_t r = 1; r < cells.size(); ++r) {
    Json row = Json::object();
    for (std::size_t i = 0; i < head.size() && i < cells[r].size(); ++i) {
      const bool num = i < numeric.size() && numeric[i];
      row[head[i]] = num ? number_text(cells[r][i]) : Json(cells[r][i]);
    }
    out.push_back(std::move(row));
  }
  return out;
}

void print_json(const Json& j) { fmt::print("{}\n", j.dump(2)); }

}  // namespace fp8moe::sim
