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

namespace fp8moe::sim {

struct SweepOptions {
  std::vector<std::string> files;  // scenario files; empty: the embedded default
  std::string only;                // --only PATTERN
  std::string backend;             // --backend (overrides the scenarios')
  std::string out;                 // --out FILE; empty: results/runs/<first file's stem>.h5
  std::string resume;              // --resume FILE
  bool force = false;              // overwrite an existing --out
  bool save_blocks = false, save_tensors = false;
  bool quiet = false;              // no progress on stderr
  std::string argv;                // the command line, for provenance
  std::string mesh = "fake";       // --mesh: fake, fake-gpu, mpi, nccl (sim/comm/runtime.hpp)
  double timeout_s = 600;          // --timeout: a collective stuck this long ends the run (mpi, nccl)
  int shard_index = 0, shard_count = 1;  // --shard I/N: the I-th of N disjoint slices of the cases
};

// "I/N" -> (I, N) with 0 <= I < N; anything else throws naming the form.
std::pair<int, int> parse_shard(const std::string& s);

// Returns the process exit code: 0 all cases ran and none errored, 1 some case errored or gave a
// non-finite result, 130 interrupted; bad input throws fp8moe::Error (exit 2, no file written).
int run_sweep(const SweepOptions& opt);

// `fp8moe list`: the expanded cases of the files, runnable and rejected with the reason.
int list_cases(const std::vector<std::string>& files, const std::string& only, const std::string& backend);

}  // namespace fp8moe::sim
