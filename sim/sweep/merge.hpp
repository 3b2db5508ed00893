#pragma once
// `fp8moe merge OUT IN...` (issue 7 item 5): joins the result files of a sharded sweep
// (`fp8moe sweep --shard I/N`, e.g. one Slurm array task each) into one file that reads exactly
// like an unsharded run's: rows in case order, /blocks and /tensors copied, provenance of the
// first input plus the merged files' names.
#include <string>
#include <vector>

namespace fp8moe::sim {

// Refuses (Error naming the file and the fix) inputs that are not complete fp8moe sweep results,
// come from different scenario texts, options or tool versions, repeat a shard or a case, or
// leave shards out (unless allow_missing). Writes OUT.tmp and renames it: a failure leaves no
// OUT. Returns the number of rows written.
std::int64_t merge_sweeps(const std::string& out, const std::vector<std::string>& inputs, bool force,
                          bool allow_missing);

}  // namespace fp8moe::sim
