#pragma once
// Result rows as text: the sweep's stdout table (aligned columns, nccl-tests style), and the
// table, CSV and Markdown renderings of `fp8moe report`, from one column list.
#include <string>
#include <vector>

#include "results/store.hpp"
#include "sim/runner/print_report.hpp"  // format_db

namespace fp8moe::sim {

// csv and json carry the cases table's own column names and full precision (%.17g text in CSV,
// typed numbers in JSON: sim/sweep/json_out.hpp); table and markdown are for reading (dB to 2
// decimals).
enum class TableFormat { table, csv, markdown, json };
TableFormat parse_table_format(const std::string& s);  // table | csv | markdown | json
// The text of a number in format `f`: dB to 2 decimals for reading, %.17g (reads back exactly)
// for csv and json.
std::string format_number(double v, TableFormat f);

struct Column {
  std::string header;
  std::string (*get)(const results::CaseRow&);
  bool numeric = false;  // right-aligned
};

// scenario, mesh, plan (op: the operand placements), pass, tensor, mode, backend, sqnr_hp64,
// sqnr_single, bitwise, aligned, status.
const std::vector<Column>& sweep_columns();
// sweep_columns() plus, after `mode`, every parameter column whose value varies across `rows`
// (offs, seed, dist, format, block, ...): the sweep's axes, so equal-looking rows never appear.
std::vector<Column> sweep_columns_for(const std::vector<results::CaseRow>& rows);
// A column for any field of the cases table (results/store.hpp), by name; Error listing them.
Column field_column(const std::string& name);


// Fixed-width rendering for rows that arrive one at a time: widths from rows known up front.
class StreamTable {
 public:
  StreamTable(std::vector<Column> cols, const std::vector<results::CaseRow>& width_hints);
  std::string header() const;
  std::string row(const results::CaseRow& r) const;

 private:
  std::vector<Column> cols_;
  std::vector<std::size_t> width_;
};

// Rows in format `f`; json gives an array of objects keyed by the column headers (a field column's
// value typed as in the cases table).
std::string format_rows(const std::vector<results::CaseRow>& rows, const std::vector<Column>& cols, TableFormat f);
// Every column of the cases table under its own name (the csv and json default of `report`).
std::vector<Column> all_field_columns();
// A generic string table in the chosen format (first row: headers; json: an array of objects,
// `numeric` cells as numbers).
std::string format_cells(const std::vector<std::vector<std::string>>& cells, TableFormat f,
                         const std::vector<bool>& numeric);

}  // namespace fp8moe::sim
