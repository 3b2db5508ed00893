#pragma once
// `fp8moe sweep` (issue 4 items 2-4): expand the scenario files, check every case before any
// file is written, run the cases in order, stream one table row per case x pass x tensor to
// stdout, progress with ETA to stderr, and commit each case to the HDF5 store as it completes.
//
// Interruption: SIGINT/SIGTERM let the running case finish, then mark the file `interrupted` and
// return 130; a second signal kills at once (the file still holds every committed case). Resume
// re-expands the scenario text stored in the file with the stored options and runs only the cases
// without committed rows, so the finished table equals an uninterrupted run's.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fp8moe::h5 {
class File;
}

namespace fp8moe::sim {

// The options a sweep's result file records (root attributes, results/SCHEMA.md): one value that
// a new sweep writes, --resume reads back, and the root process sends to the others.
struct SweepSettings {
  std::string scenario_text;       // the scenario files as run, each after a `#@fp8moe-file: NAME`
                                   // line (run_sweep fills it from SweepOptions::files)
  std::string only;                // --only PATTERN
  std::string backend;             // --backend (overrides the scenarios')
  bool save_blocks = false, save_tensors = false;
  int shard_index = 0, shard_count = 1;  // --shard I/N: the I-th of N disjoint slices of the cases

  // As root attributes: scenario_text, only, backend_override, save_blocks, save_tensors,
  // shard_index, shard_count. Reading, an absent one is the default above.
  void to_attributes(h5::File& f) const;
  static SweepSettings from_attributes(const h5::File& f);
  // As one message between processes.
  std::string pack() const;
  static SweepSettings unpack(const std::string& message);
};

struct SweepOptions {
  std::vector<std::string> files;  // scenario files; empty: the embedded default
  SweepSettings settings;          // --resume: replaced by the file's
  std::string out;                 // --out FILE; empty: results/runs/<first file's stem>.h5
  std::string resume;              // --resume FILE
  bool force = false;              // overwrite an existing --out
  bool quiet = false;              // no progress on stderr
  std::string argv;                // the command line, for provenance
  std::string mesh = "fake";       // --mesh: fake, fake-gpu, mpi, nccl (sim/comm/runtime.hpp)
  double timeout_s = 600;          // --timeout: a collective stuck this long ends the run (mpi, nccl)
};

// "I/N" -> (I, N) with 0 <= I < N; anything else throws naming the form.
std::pair<int, int> parse_shard(const std::string& s);

// Returns the process exit code: 0 all cases ran and none errored, 1 some case errored or gave a
// non-finite result, 130 interrupted; bad input throws fp8moe::Error (exit 2, no file written).
int run_sweep(const SweepOptions& opt);

// `fp8moe list`: the expanded cases of the files, runnable and rejected with the reason, the
// placements (op) or plan (layer) on every row, then a count per rejection reason.
struct ListOptions {
  std::string only, backend;  // as for sweep
  std::string status;         // "", "run" or "rejected": only those rows
  std::string reason;         // only rejected rows whose reason contains this text
  std::string format = "table";  // table, markdown, csv or json
};
int list_cases(const std::vector<std::string>& files, const ListOptions& opt);

}  // namespace fp8moe::sim
