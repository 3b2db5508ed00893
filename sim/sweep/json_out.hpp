#pragma once
// `--format json` for every command (issue 20): one rendering of numbers and rows, so the keys are
// the cases table's column names (results/SCHEMA.md) and a number reads back exactly.
//
// Numbers: integers as JSON integers; finite floating-point values as JSON numbers (nlohmann
// prints the shortest text that reads back to the same double); JSON has no NaN or infinity, so
// those are the strings "nan", "inf" and "-inf" (what the table, CSV and HDF5 readers print too).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "results/store.hpp"

namespace fp8moe::sim {

// Objects keep their keys in insertion order (the schema's column order), not sorted.
using Json = nlohmann::ordered_json;

Json json_number(double v);
// The given columns of one cases-table row (every column when `columns` is empty), typed.
Json row_json(const results::CaseRow& r, const std::vector<std::string>& columns = {});
// A text table (first row: headers) as an array of objects; cells of `numeric` columns that
// parse as numbers become numbers.
Json cells_json(const std::vector<std::vector<std::string>>& cells, const std::vector<bool>& numeric);
// Prints `j` indented, with a newline.
void print_json(const Json& j);

}  // namespace fp8moe::sim
