// run_kernel_bench (kernels/bench/bench.hpp: `fp8moe bench`, fp8moe-bench-kernels): GB/s of every GPU
// quantizer next to a device-to-device copy timed in the same run, then the GEMM table of
// bench_gemm.cu. Each quantizer is checked in the same run before its figure is printed (the
// `wrong` column: codes and scales that differ): its timed output bitwise against a fresh
// quantize() of the same input, and that bitwise against the CPU reference/quantize.hpp on the
// same values (the full checks over shapes and options live in tests/kernels/). Any wrong count
// fails the bench after the tables (non-zero exit, no --h5 file published).
//   bytes of a quantizer = input read + codes written + scales written
//   bytes of the copy    = 2 x the quantizer input's size (read + write), same buffer size
// Timing: CUDA events around each launch, L2 flushed before each, 3 warm-up runs, the median of 30
// (bench_util.hpp).
// Data: the GPU generator (kernels/datagen.hpp), normal, bf16 values. Returns 77 when no CUDA
// device is present. An HDF5 file gets one subgroup per table row (attributes as columns) under
// /quant and /gemm.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bench/bench.hpp"
#include "kernels/bench/bench_util.hpp"
#include "kernels/check.hpp"
#include "kernels/datagen.hpp"
#include "kernels/quantize.hpp"
#include "kernels/simt_gemm.hpp"
#include "reference/datagen.hpp"
#include "reference/error.hpp"
#include "reference/formats.hpp"
#include "reference/quantize.hpp"
#include "results/h5.hpp"
#include "results/output_file.hpp"

namespace {

using namespace fp8moe;
using namespace fp8moe::kernels;

using bench::Run;
using bench::Table;

struct QuantCase {
  Recipe recipe;
  std::vector<std::int64_t> shape;
  std::vector<std::int32_t> offs;
};

std::string shape_text(const std::vector<std::int64_t>& s) { return shape_str(s); }

// Codes and scales that differ between the timed output, a fresh device quantize of the same
// input, and the CPU reference on the same values (bitwise; any NaN scale counts as different).
template <class T>
std::int64_t quant_wrong(const QuantCase& c, const DeviceBuffer<T>& x, const DeviceBuffer<std::uint8_t>& codes,
                         const DeviceBuffer<float>& scales, const QuantOptions& opt) {
  const DeviceQuantized fresh = quantize<T>(c.recipe, x.get(), c.shape, c.offs, opt);
  std::int64_t wrong = bench::bytes_differ(bench::download(codes.get(), codes.size()),
                                           bench::download(fresh.codes.get(), fresh.codes.size())) +
                       bench::bytes_differ(bench::download(scales.get(), scales.size()),
                                           bench::download(fresh.scales.get(), fresh.scales.size()));
  TensorF xh(c.shape);
  const std::vector<T> raw = bench::download(x.get(), x.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      xh.data[i] = raw[i];
    } else {
      xh.data[i] = bf16_to_f32(raw[i]);
    }
  }
  const Quantized want = fp8moe::quantize(c.recipe, xh, c.offs, opt);
  const Quantized got = fresh.to_host();
  wrong += bench::bytes_differ(got.codes.data, want.codes.data) + bench::bytes_differ(got.scales.data, want.scales.data);
  return wrong;
}

template <class T>
void bench_quant(Run& run, const QuantCase& c, const char* dtype, const QuantOptions& opt) {
  std::int64_t n = 1;
  for (auto d : c.shape) n *= d;
  const QuantLayout l = quant_layout(c.recipe, c.shape, c.offs, opt);
  // input + its copy + codes + scales
  require_device_memory(static_cast<std::size_t>(n) * (2 * sizeof(T) + 1) + sizeof(float) * l.scale_count(),
                        std::string("bench ") + recipe_name(c.recipe) + " " + shape_text(c.shape));
  DeviceBuffer<T> x(static_cast<std::size_t>(n));
  generate_slice_device<T>(Dist::normal, 1, kTensorA, c.shape.back(), 0, n, x.get());
  DeviceBuffer<std::uint8_t> codes(static_cast<std::size_t>(l.code_count()));
  DeviceBuffer<float> scales(static_cast<std::size_t>(l.scale_count()));
  DeviceBuffer<std::uint8_t> copy_dst(x.bytes());
  const double q_ms = run.median_ms([&] {
    quantize_into<T>(c.recipe, x.get(), c.shape, c.offs, codes.get(), scales.get(), opt);
  });
  const double c_ms = run.median_ms([&] {
    FP8MOE_CUDA_CHECK(cudaMemcpyAsync(copy_dst.get(), x.get(), x.bytes(), cudaMemcpyDeviceToDevice), x.bytes(), " bytes");
  });
  FP8MOE_CUDA_CHECK(cudaDeviceSynchronize(), "after ", recipe_name(c.recipe));
  const std::int64_t wrong = quant_wrong(c, x, codes, scales, opt);
  run.count_check(wrong);
  const double q_bytes = static_cast<double>(x.bytes() + codes.bytes() + scales.bytes());
  const double q_gbs = q_bytes / (q_ms * 1e-3) / 1e9, c_gbs = 2.0 * x.bytes() / (c_ms * 1e-3) / 1e9;
  std::printf("| %-12s | %-5s | %-18s | %4d | %9.3f | %8.1f | %9.3f | %8.1f | %5.1f%% | %9lld |\n", recipe_name(c.recipe),
              dtype, shape_text(c.shape).c_str(), opt.block, q_ms, q_gbs, c_ms, c_gbs, 100.0 * q_gbs / c_gbs,
              static_cast<long long>(wrong));
  std::fflush(stdout);
  h5::Group* rows = run.rows(Table::quant);
  if (!rows) return;
  h5::Group g = rows->create_group(run.next_row_name(Table::quant));
  g.set_attr("recipe", recipe_name(c.recipe));
  g.set_attr("input", dtype);
  g.set_attr("shape", shape_text(c.shape));
  g.set_attr("block", opt.block);
  g.set_attr("quant_ms", q_ms);
  g.set_attr("quant_gbs", q_gbs);
  g.set_attr("copy_ms", c_ms);
  g.set_attr("copy_gbs", c_gbs);
  g.set_attr("ratio", q_gbs / c_gbs);
  g.set_attr("wrong", wrong);
  g.set_attr("check", "bitwise vs a fresh quantize and the CPU reference");
}

// The quantizer table: every recipe on bf16 and fp32 input, each next to a device copy.
void quant_table(Run& run) {
  std::printf("| recipe       | input | shape              |    B | quant ms  | quant GB/s | copy ms   | copy GB/s | q/copy |     wrong |\n");
  std::printf("|--------------|-------|--------------------|------|-----------|----------|-----------|----------|--------|-----------|\n");
  const std::int64_t M = 16384, K = 7168, E = 8;
  std::vector<std::int32_t> offs;
  for (std::int64_t e = 1; e <= E; ++e) offs.push_back(static_cast<std::int32_t>(e * M / E));
  const std::vector<QuantCase> cases{
      {Recipe::act_lhs, {M, K}, {}},          {Recipe::act_rhs, {M, K}, {}},
      {Recipe::act_lhs_t, {M, K}, {}},        {Recipe::weight_fwd, {E, 2048, K}, {}},
      {Recipe::weight_dgrad, {E, 2048, K}, {}}, {Recipe::kgrouped_lhs, {M, K}, offs},
      {Recipe::kgrouped_rhs, {M, K}, offs},
  };
  const QuantOptions opt;
  for (const QuantCase& c : cases) {
    bench_quant<Bf16Bits>(run, c, "bf16", opt);
    bench_quant<float>(run, c, "fp32", opt);
  }
}

}  // namespace

namespace fp8moe::kernels {

int run_kernel_bench(const KernelBenchOptions& o) {
  // The options were checked by prepare_bench (bench.hpp), which both front ends call first.
  if (cuda_device_count() == 0) {
    std::printf("GPU kernel bench: no CUDA device is visible; nothing to measure (exit %d)\n", kBenchNoDevice);
    return kBenchNoDevice;
  }
  cudaDeviceProp p{};
  FP8MOE_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("GPU kernel bench on %s (sm_%d%d, %d SMs); median of %d runs after %d warm-up, CUDA events, L2 flushed "
              "before each run; every row checked first (wrong: elements that differ from its check)\n\n",
              p.name, p.major, p.minor, p.multiProcessorCount, o.runs, o.warmup);
  // The rows go to PATH.tmp, published as PATH once complete (results/output_file.hpp): a failed
  // run leaves no file that looks like a result (the OutputFile removes its temporary file).
  if (!o.h5_path.empty() && !o.out) fail("run_kernel_bench: --h5 ", o.h5_path, " was not checked and locked by the caller");
  std::optional<h5::File> file;
  std::optional<h5::Group> qrows, grows;
  if (o.out) {
    file.emplace(h5::File::create(o.out->tmp()));
    file->set_attr("device", p.name);
    file->set_attr("sm", p.major * 10 + p.minor);
    file->set_attr("argv", o.command);
    file->set_attr("runs", o.runs);
    file->set_attr("warmup", o.warmup);
    qrows.emplace(file->create_group("quant"));
    grows.emplace(file->create_group("gemm"));
  }
  const int bad = [&] {
    Run run({o.warmup, o.runs}, qrows ? &*qrows : nullptr, grows ? &*grows : nullptr);  // gone before they close
    if (o.quant) quant_table(run);
    if (o.gemm) bench::bench_gemms(run, o.cutlass_tune, o.cutlass_only, o.shapes);
    return run.failed_checks();
  }();
  if (bad > 0) {
    // The figures of wrong results are not results: no file is published (the OutputFile removes
    // its temporary file), and the exit status says so.
    fail(bad, " timed configuration(s) failed their check (the wrong column above): their figures are of wrong "
         "results; run the GPU tests (tests/kernels) to find the cause");
  }
  if (file) {
    qrows.reset();
    grows.reset();
    file->set_attr("status", "complete");  // written last (reference/SPEC.md 14.1)
    file->close();
    file.reset();
    o.out->publish();
    std::printf("\nrows: %s\n", o.out->path().c_str());
  }
  return 0;
}

}  // namespace fp8moe::kernels
