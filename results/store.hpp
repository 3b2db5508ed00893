#pragma once
// The sweep results store (issue 4 item 3; results/SCHEMA.md documents the file): one HDF5 file
// per run with the `cases` compound table (one row per case x pass x tensor), provenance as root
// attributes, optional per-case groups under /blocks and /tensors, and a `status` attribute
// written last.
//
// Crash safety (reference/SPEC.md 14.1, issue 4 item 4): a case's groups are written first, then its rows in
// one extend-and-write, then `rows_committed`/`cases_done`, then H5Fflush. A writer killed at any
// moment leaves a file whose flushed state holds every completed case; rows past
// `rows_committed` (a case cut off between its write and its flush) are dropped on resume.
//
// A full disk (issue 16): every write is preceded by a reservation of the blocks it can need
// (results/output_file.hpp), so the disk filling up stops the sweep before a write, with the file
// as its last flush left it; a write that fails anyway (a file system without fallocate, EIO)
// abandons the file without another byte written. Either way IoError names the file and the cause.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "results/h5.hpp"

namespace fp8moe::results {

// Every column of `cases`, in order: (type, name). One list, so the C++ row, the HDF5 compound
// type and the conversions between them cannot drift apart. S: vlen UTF-8 string.
#define FP8MOE_CASE_COLUMNS(S, I8, I32, I64, U64, F64)                                                   \
  I64(case_id) S(case_key) S(scenario) S(level) S(mesh) I32(world) S(plan) S(placements) S(strategy)     \
  S(pass) S(tensor) S(backend) S(mode) S(format) I32(block) I8(pow2_scales) I8(pad) I32(experts)          \
  I64(tokens) I64(n) I64(k) I64(dim) I64(hidden) S(routing) S(offs) S(dist) U64(seed) S(fsdp_gather)      \
  S(reduce_dtype) S(reduce_order) I8(fp8_dispatch) F64(lr) F64(sqnr_db) F64(sqnr_vs_single_db)            \
  F64(rel_err) F64(max_abs_err) F64(max_ulp) F64(bitwise_equal_frac) I8(block_aligned)                    \
  F64(underflow_frac) F64(saturated_frac) I64(nonfinite) I64(comm_bytes) F64(time_ms) S(status)           \
  S(message) S(split_k) F64(lhs_scale_min) F64(lhs_scale_max) F64(lhs_scale_std) F64(lhs_dynamic_range)     \
  I64(lhs_underflow) I64(lhs_overflow) I64(lhs_nonfinite) I64(lhs_empty_blocks) F64(rhs_scale_min)          \
  F64(rhs_scale_max) F64(rhs_scale_std) F64(rhs_dynamic_range) I64(rhs_underflow) I64(rhs_overflow)         \
  I64(rhs_nonfinite) I64(rhs_empty_blocks)

struct CaseRow {
#define FP8MOE_S(n) std::string n;
#define FP8MOE_I8(n) std::int8_t n = 0;
#define FP8MOE_I32(n) std::int32_t n = 0;
#define FP8MOE_I64(n) std::int64_t n = 0;
#define FP8MOE_U64(n) std::uint64_t n = 0;
#define FP8MOE_F64(n) double n = 0;
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_I8, FP8MOE_I32, FP8MOE_I64, FP8MOE_U64, FP8MOE_F64)
#undef FP8MOE_S
#undef FP8MOE_I8
#undef FP8MOE_I32
#undef FP8MOE_I64
#undef FP8MOE_U64
#undef FP8MOE_F64
};

// Column names in table order, and a column's value as text (for reports, gates and compare).
const std::vector<std::string>& case_columns();
std::optional<std::string> column_text(const CaseRow& r, const std::string& column);
std::optional<double> column_number(const CaseRow& r, const std::string& column);  // numeric columns

inline constexpr const char* kFormatTag = "fp8moe-sweep";
// 2 (2026-12-05): string attributes fixed-length (1: variable-length, no longer read), the file in
// the HDF5 1.8 format; the cases table unchanged.
inline constexpr int kSchemaVersion = 2;

using Attrs = std::vector<std::pair<std::string, std::string>>;  // string provenance attributes

class SweepWriter {
 public:
  // Creates `path` (truncating: the caller holds its OutputFile lock), writes the provenance,
  // `status` = running, an empty table.
  static SweepWriter create(const std::string& path, const Attrs& provenance, std::int64_t cases_total);
  // Reopens a file for --resume: drops rows past `rows_committed` and the /blocks and /tensors
  // groups of cases without committed rows; sets `status` = running.
  static SweepWriter resume(const std::string& path);
  // The file was renamed while open (PATH.tmp -> PATH): where reservations and messages go now.
  void moved_to(const std::string& path);

  // Reserves room for `bytes` more than the file holds now; IoError naming the file, the cause and
  // what the file keeps when the disk cannot give it. `what`: "case 12", "the merged file".
  void reserve(std::int64_t bytes, const std::string& what);
  // An upper bound of what commit(rows) adds to the file (table chunks, strings, metadata).
  std::int64_t commit_bytes(const std::vector<CaseRow>& rows) const;

  // Rows already in the file (resume) and the case ids they cover.
  const std::vector<CaseRow>& rows() const { return rows_; }

  // The group for one case's extra datasets (/blocks/case_000012), created on demand.
  h5::Group case_group(const std::string& kind, std::int64_t case_id);
  // Appends one case's rows and flushes: after this returns the case survives a kill.
  void commit(const std::vector<CaseRow>& rows);
  // The final word: status (complete, interrupted, failed) and its message; flushes and closes.
  void finish(const std::string& status, const std::string& message);
  // After an error: marks the file failed when that is safe (nothing written since the last
  // flush and room for the attribute), otherwise closes or abandons it untouched. Never throws.
  void fail_quietly(const std::string& message) noexcept;
  h5::File& file() { return file_; }
  // Copies group `path` (e.g. "/blocks/case_000012") with everything under it from `src`
  // (H5Ocopy), creating its parent group here; for fp8moe merge.
  void copy_group(const h5::File& src, const std::string& path);

 private:
  explicit SweepWriter(h5::File f, std::string disk) : file_(std::move(f)), disk_(std::move(disk)) {}
  h5::File file_;
  std::string disk_;          // the file's current path, for reservations
  std::vector<CaseRow> rows_;
  std::set<std::int64_t> case_ids_;  // of rows_: cases_done without a pass over every row per commit
  std::int64_t committed_ = 0;
  std::int64_t row_bytes_ = 0;  // one packed row of the file's table
  bool dirty_ = false;          // written since the last successful flush
};

// Opens an fp8moe sweep file for reading; Error naming the file when it is not HDF5, not an
// fp8moe sweep result (no `format` = fp8moe-sweep), or of a newer schema.
h5::File open_sweep(const std::string& path);
// The committed rows of `cases` (rows past `rows_committed` are a cut-off case: left out).
std::vector<CaseRow> read_cases(const h5::File& f);
// The root `status`, or "incomplete" when it is missing or unreadable (a disk that filled up
// while it was rewritten): the rows are what rows_committed says, whatever the status.
std::string sweep_status(const h5::File& f);
// A root string attribute, or `dflt` when it is missing or unreadable (provenance for reports).
std::string attr_text_or(const h5::File& f, const std::string& name, const std::string& dflt);

// "case_000012": the group name of a case under /blocks and /tensors.
std::string case_group_name(std::int64_t case_id);

}  // namespace fp8moe::results
