// libFuzzer target: bytes as a result file through the reader of `fp8moe report` and of
// `fp8moe sweep --resume` (open_sweep, the attributes, read_cases, the stored scenario text and
// SweepWriter::resume). HDF5 opens files by name, so each input is written to a temp file first.
// Bad input must end as fp8moe::Error (the CLI's exit 2); anything else is a finding.
#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "reference/error.hpp"
#include "results/store.hpp"
#include "sim/sweep/expand.hpp"
#include "scenarios/scenario.hpp"

namespace {

const std::string& temp_path() {
  static const std::string p = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/fp8moe_fuzz_results_" + std::to_string(::getpid()) + ".h5";
  }();
  return p;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fp8moe;
  const std::string& path = temp_path();
  write_file(path, data, size);
  try {
    // `fp8moe report`: the attributes it prints, then every committed row.
    std::string text;
    {
      const h5::File f = results::open_sweep(path);
      for (const char* a : {"status", "status_message", "git_sha", "started_utc", "tool_version", "only", "backend_override"}) {
        (void)f.attr_string(a);
      }
      for (const char* a : {"cases_total", "cases_done", "rows_committed", "shard_index", "shard_count", "save_blocks"}) {
        (void)f.attr_int(a);
      }
      for (const results::CaseRow& r : results::read_cases(f)) {
        for (const std::string& col : results::case_columns()) (void)results::column_text(r, col);
      }
      text = f.attr_string("scenario_text").value_or("");
    }
    // `--resume`: the stored scenario text is parsed again (sweep.cpp's files_from_text splits it
    // at its file markers; one body is enough for the parser), and the writer reopens the file.
    try {
      (void)scenarios::parse_scenario_text(text, "stored.ini");
    } catch (const Error&) {
    }
    (void)results::SweepWriter::resume(path);
  } catch (const Error&) {
  }
  // Every HDF5 id fp8moe opened is closed again, on every error path: our side of the memory
  // (leaks inside libhdf5's own error paths are suppressed in lsan.supp, see there).
  if (const ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); open_ids != 0) {
    std::fprintf(stderr, "fuzz_results: %zd HDF5 object(s) left open after the input\n", open_ids);
    std::abort();
  }
  std::remove(path.c_str());
  return 0;
}
