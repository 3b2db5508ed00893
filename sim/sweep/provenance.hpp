#pragma once
// Where a result came from (reference/SPEC.md 14.2): the tool, the source tree, the build, the host, the
// CUDA device and every library version, as name/value pairs. `fp8moe info` prints them and the
// sweep store writes them as root attributes, from this one list.
#include <string>
#include <utility>
#include <vector>

namespace fp8moe::build {
const char* git_sha();  // generated at build time (cmake/GitInfo.cmake)
int git_dirty();        // 1 dirty, 0 clean, -1 not built from git
}  // namespace fp8moe::build

namespace fp8moe::sim {

using Provenance = std::vector<std::pair<std::string, std::string>>;

// Everything but the run itself (argv, scenario text): tool_version, git_sha, git_dirty, build,
// host, cpu, cpu_cores, omp_threads, device_*, driver_version, cuda_runtime, *_version, nccl_env.
Provenance provenance();

// The current UTC time as ISO 8601 ("2026-12-02T19:03:45Z").
std::string utc_now();

}  // namespace fp8moe::sim
