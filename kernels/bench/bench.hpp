#pragma once
// The GPU kernel benchmark behind `fp8moe bench` and fp8moe-bench-kernels: GB/s of every
// quantizer next to a device-to-device copy, and fwd/dgrad/wgrad TFLOP/s of every GPU backend
// (cuBLASLt next to its per-tensor FP8 loop on the same codes), each baseline timed in the same
// run (bench_quant.cu, bench_gemm.cu). Tables on stdout, one HDF5 subgroup per row under /quant
// and /gemm when h5_path is set (root attribute status = "complete" written last).
#include <string>

namespace fp8moe::results {
class OutputFile;
}

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
  std::string command;  // recorded in the file's "argv" attribute
};

inline constexpr int kBenchNoDevice = 77;  // the exit status when no CUDA device is visible

// Returns 0, or kBenchNoDevice (after saying so on stdout) when there is nothing to measure on.
// Throws fp8moe::Error on a CUDA, cuBLASLt or HDF5 failure, and in a build without CUDA.
int run_kernel_bench(const KernelBenchOptions& opt);

}  // namespace fp8moe::kernels
