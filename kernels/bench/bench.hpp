#pragma once
// The GPU kernel benchmark behind `fp8moe bench` and fp8moe-bench-kernels: GB/s of every
// quantizer next to a device-to-device copy, and fwd/dgrad/wgrad TFLOP/s of every GPU backend
// (cuBLASLt next to its per-tensor FP8 loop on the same codes), each baseline timed in the same
// run (bench_quant.cu, bench_gemm.cu). Tables on stdout, one HDF5 subgroup per row under /quant
// and /gemm when h5_path is set (root attribute status = "complete" written last).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/datagen.hpp"
#include "reference/error.hpp"
#include "results/output_file.hpp"

namespace fp8moe::kernels {

// One GEMM bench shape: E experts of Me rows (tokens) each, output width N, reduction K (fwd
// (E*Me, K) x (E, N, K)^T; dgrad and wgrad the same problem's other two products).
struct BenchShape {
  std::int64_t E = 0, Me = 0, N = 0, K = 0;
};

// The GEMM table's shapes when none is given: DeepSeek-V3-like (8, 4096, 4096, 7168) and
// (8, 4096, 7168, 2048), DeepGEMM's published m-grouped shape (4, 8192, 4096, 7168),
// (16, 2048, 5120, 8192), Qwen3-MoE-like (16, 2048, 3072, 4096).
inline std::vector<BenchShape> default_bench_shapes() {
  return {{8, 4096, 4096, 7168}, {8, 4096, 7168, 2048}, {4, 8192, 4096, 7168}, {16, 2048, 5120, 8192}, {16, 2048, 3072, 4096}};
}

// "E,Me,N,K" (e.g. 4,8192,4096,28672) as --shape takes it. Throws an Error naming the value and
// the rule it breaks: four whole numbers; E 1..1024; Me, N and K positive multiples of 128 (every
// backend's blocks whole, so every row times the same arithmetic; DESIGN's ragged groups are the
// tests' business, not the bench's); every operand and output under 2^31 elements (the kernels'
// and the models' 32-bit element indices).
inline BenchShape parse_bench_shape(const std::string& text) {
  const auto bad = [&](const std::string& why) -> BenchShape {
    fail("--shape '", text, "' ", why, ": give E,Me,N,K (experts, rows per expert, N, K), e.g. --shape 4,8192,4096,7168");
  };
  std::vector<std::string> parts(1);
  for (const char c : text) {
    if (c == ',') {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  if (parts.size() != 4) return bad(cat("has ", parts.size(), " field(s), not 4"));
  std::int64_t v[4];
  static constexpr const char* kNames[4] = {"E", "Me", "N", "K"};
  for (int i = 0; i < 4; ++i) {
    try {
      v[i] = parse_int(parts[static_cast<std::size_t>(i)], 1, std::int64_t{1} << 31);
    } catch (const Error& e) {
      return bad(cat("field ", kNames[i], ": ", e.what()));
    }
  }
  const BenchShape s{v[0], v[1], v[2], v[3]};
  if (s.E > 1024) return bad(cat("has E = ", s.E, " experts: give 1 to 1024"));
  for (int i = 1; i < 4; ++i) {
    if (v[i] % 128 != 0) {
      return bad(cat("has ", kNames[i], " = ", v[i], ", not a multiple of 128: round it to ", (v[i] + 127) / 128 * 128,
                     " (the bench times whole 128-wide blocks)"));
    }
  }
  // Products of three fields up to 2^31 each overflow 64 bits: compared by division.
  const std::int64_t max_elems = (std::int64_t{1} << 31) - 1;
  const auto over = [&](std::int64_t a, std::int64_t b, std::int64_t c) { return a > max_elems / b || a * b > max_elems / c; };
  const std::pair<const char*, bool> tensors[] = {{"the activations (E*Me x K)", over(s.E, s.Me, s.K)},
                                                  {"the output (E*Me x N)", over(s.E, s.Me, s.N)},
                                                  {"the weights (E x N x K)", over(s.E, s.N, s.K)}};
  for (const auto& [what, too_big] : tensors) {
    if (too_big) return bad(cat("makes ", what, " 2^31 elements or more: make it smaller"));
  }
  return s;
}

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
  // The GEMM table's shapes (--shape, parse_bench_shape); empty: default_bench_shapes() and the
  // CUDA-core rows' small shape.
  std::vector<BenchShape> shapes;
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
  if (!o.shapes.empty() && !o.gemm) fail("--shape names GEMM shapes: drop --no-gemm");
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
