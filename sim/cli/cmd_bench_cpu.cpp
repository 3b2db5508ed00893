// `fp8moe bench-cpu`: throughput of the CPU FP8 modes (exact, promote-fp32, hopper-tc) next to
// Eigen's plain fp32 GEMM on the same grouped shapes, timed in the same run. A benchmark, never a
// test; hopper-tc's output is checked bitwise against the scalar path (tensor_core.hpp's step per
// element) on a slice before it is timed, and the count of wrong elements printed with its figure.
#include <fmt/core.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstring>

#include "reference/datagen.hpp"
#include "reference/gemm.hpp"
#include "reference/groups.hpp"
#include "sim/cli/command.hpp"
#include "sim/cli/flags.hpp"

namespace fp8moe::cli {
namespace {

struct Shape {
  std::string name;
  std::vector<std::int32_t> offs;
  std::int64_t N, K;
};

// Median over `reps` samples of the time per call; each sample runs enough calls to last >= 25 ms,
// so millisecond-sized problems are not measured at the scheduler's granularity.
template <class F>
double median_ms(int reps, F&& f) {
  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  f();  // warm-up, and the size of a batch
  const double once = std::chrono::duration<double, std::milli>(clock::now() - w0).count();
  const int batch = std::max(1, static_cast<int>(25.0 / std::max(once, 1e-3)));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = clock::now();
    for (int j = 0; j < batch; ++j) f();
    t.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count() / batch);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Elements of the first `rows` rows of expert 0 in y (M, N) that differ bitwise from the scalar
// path on the same operands (laid out as reference/quantize.hpp's table states: A_q 1xB (M,K),
// W_q 128x128 fwd (E,N,K) with scales (E, N/B, K/B)).
std::int64_t wrong_in_slice(const TensorD& y, const Quantized& Aq, const Quantized& Wq, std::int64_t rows,
                            const GemmOptions& opt) {
  const std::int64_t K = Aq.codes.dim(1), N = Wq.codes.dim(1), nb = Aq.scales.dim(1);
  const BlockOperand L{Aq.codes.ptr(), K, 1, Aq.scales.ptr(), nb, 1, 1, rows};
  const BlockOperand R{Wq.codes.ptr(), K, 1, Wq.scales.ptr(), Wq.scales.dim(2), 1, Wq.layout.block_rows, N};
  std::vector<double> ref(static_cast<std::size_t>(rows * N));
  block_gemm_scalar(L, R, K, ref.data(), N, opt);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) wrong += std::memcmp(&ref[i], y.ptr() + i, sizeof(double)) != 0;
  return wrong;
}

}  // namespace

int cmd_bench_cpu(const Args& args) {
  po::options_description desc("fp8moe bench-cpu options");
  desc.add_options()("help,h", "show this help")
      ("reps", po::value<std::int64_t>()->default_value(5), "timed repetitions per measurement (median reported)")
      ("quick", po::bool_switch(), "only the small torchao shapes")
      ("threads", po::value<int>()->default_value(0), "OpenMP threads (0 = all cores)");
  po::variables_map vm;
  if (!parse(args, desc, vm, "usage: fp8moe bench-cpu [--reps R] [--quick] [--threads N]")) return 0;
  set_threads(vm["threads"].as<int>());
  // At most 1000: each repetition reruns every measured GEMM (seconds each on big shapes).
  const int reps = static_cast<int>(int_flag(vm, "reps", 1, 1000));

  std::vector<Shape> shapes;
  if (!vm["quick"].as<bool>()) {
    std::vector<std::int32_t> offs(8);
    for (int e = 0; e < 8; ++e) offs[static_cast<std::size_t>(e)] = 512 * (e + 1);  // 4096 tokens, balanced
    shapes.push_back({"E8 M4096 N2048 K2048", offs, 2048, 2048});
  }
  shapes.push_back({"torchao E3 [129,384,500] 256", {129, 384, 500}, 256, 256});
  shapes.push_back({"torchao E2 [256,512] 256", {256, 512}, 256, 256});

  fmt::print("# fp8moe bench-cpu: fwd pass on pre-quantized e4m3 operands, {} threads, median of {} samples of >= 25 ms\n",
             Eigen::nbThreads(), reps);
  fmt::print("{:<30} {:>14} {:>14} {:>7} {:>16} {:>7} {:>16} {:>7} {:>18} {:>7} {:>6} {:>18} {:>7} {:>6}\n", "shape",
             "eigen_fp32", "exact", "ratio", "promote:deepgemm", "ratio", "promote:cublas", "ratio", "hopper-tc:deepgemm",
             "ratio", "wrong", "hopper-tc:cublas", "ratio", "wrong");
  std::int64_t wrong_total = 0;
  for (const Shape& s : shapes) {
    const std::int64_t M = s.offs.back(), E = static_cast<std::int64_t>(s.offs.size());
    const TensorF A = generate({M, s.K}, Dist::normal, 1, kTensorA);
    const TensorF W = generate({E, s.N, s.K}, Dist::normal, 1, kTensorW);
    const double gflop = 2.0 * static_cast<double>(M) * static_cast<double>(s.N) * static_cast<double>(s.K) * 1e-9;

    using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    MatF out(M, s.N);
    const double t_eigen = median_ms(reps, [&] {
      std::int64_t start = 0;
      for (std::int64_t e = 0; e < E; ++e) {
        const std::int64_t Me = s.offs[static_cast<std::size_t>(e)] - start;
        Eigen::Map<const MatF> a(A.ptr() + start * s.K, Me, s.K), w(W.ptr() + e * s.N * s.K, s.N, s.K);
        out.middleRows(start, Me).noalias() = a * w.transpose();
        start += Me;
      }
    });

    GemmOptions opt;
    const Quantized Aq = quantize_act_lhs(A, opt.quant);
    const Quantized Wq = quantize_grouped_weight(W, WeightOrientation::fwd, opt.quant);
    auto time_mode = [&](Mode m, Promotion p) {
      opt.mode = m;
      opt.promotion = p;
      return median_ms(reps, [&] { (void)grouped_fwd_q(Aq, Wq, s.offs, opt); });
    };
    const double t_exact = time_mode(Mode::exact, Promotion::deepgemm);
    const double t_dg = time_mode(Mode::promote_fp32, Promotion::deepgemm);
    const double t_cb = time_mode(Mode::promote_fp32, Promotion::cublas);
    // hopper-tc: validated on the first rows of expert 0, then timed.
    const std::int64_t slice = std::min<std::int64_t>(64, s.offs.front());
    auto time_checked = [&](Promotion p, std::int64_t& wrong) {
      opt.mode = Mode::hopper_tc;
      opt.promotion = p;
      wrong = wrong_in_slice(grouped_fwd_q(Aq, Wq, s.offs, opt), Aq, Wq, slice, opt);
      return median_ms(reps, [&] { (void)grouped_fwd_q(Aq, Wq, s.offs, opt); });
    };
    std::int64_t wrong_dg = 0, wrong_cb = 0;  // fwd is act x weight: both families promote alike
    const double t_tdg = time_checked(Promotion::deepgemm, wrong_dg);
    const double t_tcb = time_checked(Promotion::cublas, wrong_cb);
    auto rate = [&](double ms) { return gflop / (ms * 1e-3); };
    fmt::print("{:<30} {:>9.1f} GF/s {:>9.1f} GF/s {:>6.0f}% {:>11.1f} GF/s {:>6.0f}% {:>11.1f} GF/s {:>6.0f}% "
               "{:>13.1f} GF/s {:>6.0f}% {:>6} {:>13.1f} GF/s {:>6.0f}% {:>6}\n",
               s.name, rate(t_eigen), rate(t_exact), 100 * t_eigen / t_exact, rate(t_dg), 100 * t_eigen / t_dg,
               rate(t_cb), 100 * t_eigen / t_cb, rate(t_tdg), 100 * t_eigen / t_tdg, wrong_dg, rate(t_tcb),
               100 * t_eigen / t_tcb, wrong_cb);
    wrong_total += wrong_dg + wrong_cb;
  }
  fmt::print("# wrong: hopper-tc elements of the first 64 rows that differ bitwise from the scalar path\n");
  fmt::print("# target: exact and promote-fp32 at >= 50% of Eigen fp32 (issue 2), hopper-tc at >= 10% (issue 15)\n");
  if (wrong_total != 0) {
    fmt::print(stderr, "bench-cpu: {} hopper-tc elements differ from the scalar path: the figures above are void\n",
               wrong_total);
    return 1;
  }
  return 0;
}

}  // namespace fp8moe::cli
