#pragma once
// The GPU kernel benchmark behind `fp8moe bench` and fp8moe-bench-kernels: GB/s of every
// quantizer next to a device-to-device copy, and fwd/dgrad/wgrad TFLOP/s of every GPU backend
// (cuBLASLt next to its per-tensor FP8 loop on the same codes), each baseline timed in the same
// run (bench_quant.cu, bench_gemm.cu). Tables on stdout, one HDF5 subgroup per row under /quant
// and /gemm when h5_path is set (root attribute status = "complete" written last).
#include <optional>
#include <string>

#include "reference/error.hpp"
#include "results/output_file.hpp"

namespace fp8moe::kernels {

struct KernelBenchOptions {
  std::string h5_path;  // empty: tables only
  // The checked and locked --h5 file (results/output_file.hpp), set by the caller with h5_path:
  // the rows are built in out->tmp() and published once complete.
  results::OutputFile* out = nullptr;
  bool quant = true, gemm = true;
  // Also time every CUTLASS kernel configuration (schedule x mainloop x tile walk) on every shape,
  // each checked bitwise first: the measurements behind cutlass_choose (kernels/cutlass_grouped.hpp).
  bool cutlass_tune = false;
  // With cutlass_tune: only the configurations whose row name contains this (e.g. "co/ov"; empty: all).
  std::string cutlass_only;
  // Untimed and timed calls of every row (its median reported): 3 and 30; fewer under a profiler
  // (`ncu ... fp8moe bench --warmup 0 --runs 1`: a row then launches its kernel about three times,
  // its check included). Bounds: runs 1..100000, warmup 0..100000 (an Error names the value).
  int warmup = 3, runs = 30;
  std::string command;  // recorded in the file's "argv" attribute
};

// Throws an Error naming a --runs or --warmup outside its bounds, or a combination that leaves
// nothing to time. Called by prepare_bench, which both front ends (`fp8moe bench`,
// fp8moe-bench-kernels) call before anything else (a build without CUDA refuses the same).
inline void check_bench_options(const KernelBenchOptions& o) {
  if (o.runs < 1 || o.runs > 100000) fail("--runs ", o.runs, " is out of range: give 1 to 100000 timed calls a row");
  if (o.warmup < 0 || o.warmup > 100000) {
    fail("--warmup ", o.warmup, " is out of range: give 0 to 100000 untimed calls a row");
  }
  if (o.cutlass_tune && !o.gemm) fail("--cutlass-tune times GEMMs: drop --no-gemm");
  if (!o.quant && !o.gemm) fail("--no-quant with --no-gemm leaves nothing to bench: drop one of them");
}

// Throws an Error when --cutlass-tune (or --cutlass-only) cannot be honoured: a --cutlass-only
// filter that names no CUTLASS configuration, or a build without CUTLASS. Checked before anything
// is measured, with or without a device (bench_gemm.cu; a no-op in the build without CUDA, whose
// run_kernel_bench refuses everything).
void check_cutlass_tune(bool tune, const std::string& only);

// What both front ends do before anything runs: check_cutlass_tune, check_bench_options, then,
// with an --h5 path, check and lock that file into `out` and point opt.out at it (an existing file
// is refused unless `force`). Throws an Error naming the value and its fix (the front ends exit 2).
inline void prepare_bench(KernelBenchOptions& opt, bool force, std::optional<results::OutputFile>& out) {
  check_cutlass_tune(opt.cutlass_tune, opt.cutlass_only);
  check_bench_options(opt);
  if (opt.h5_path.empty()) return;
  results::OutputRequest req;
  req.path = opt.h5_path;
  req.flag = "--h5";
  req.force = force;
  req.exists_fix = "pass --force to overwrite it, or name another file";
  out.emplace(req);
  opt.out = &*out;
}

inline constexpr int kBenchNoDevice = 77;  // the exit status when no CUDA device is visible

// Runs the bench on options that went through prepare_bench (it does not check them again).
// Returns 0, or kBenchNoDevice (after saying so on stdout) when there is nothing to measure on.
// Throws fp8moe::Error on a CUDA, cuBLASLt or HDF5 failure, and in a build without CUDA.
int run_kernel_bench(const KernelBenchOptions& opt);

}  // namespace fp8moe::kernels
