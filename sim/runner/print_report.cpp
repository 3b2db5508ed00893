#include "sim/runner/print_report.hpp"

#include <fmt/core.h>

#include <cmath>

namespace fp8moe::sim {

std::string format_db(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.2f}", v);
}

std::string format_report(const ScenarioReport& r) {
  std::string s;
  s += fmt::format("# {} level | mesh {} | plan {} | mode {}\n", r.level, r.mesh, r.plan, r.mode);
  if (!r.strategy.empty()) s += fmt::format("# strategy: {}\n", r.strategy);
  s += fmt::format("{:<7} {:<8} {:>10} {:>12} {:>10} {:>11} {:>10}\n", "pass", "tensor", "sqnr_hp64", "sqnr_single",
                   "bitwise", "rel_err", "aligned");
  for (const TensorReport& t : r.tensors) {
    s += fmt::format("{:<7} {:<8} {:>10} {:>12} {:>10.4f} {:>11.3e} {:>10}\n", t.pass, t.tensor,
                     format_db(t.vs_hp64.sqnr_db), format_db(t.vs_single.sqnr_db), t.vs_single.bitwise_equal_frac,
                     t.vs_hp64.rel_err, t.block_aligned ? "yes" : "NO");
  }
  s += fmt::format("# block_aligned: {}\n", r.block_aligned ? "true" : "false");
  for (const std::string& m : r.misaligned) s += fmt::format("#   moved blocks: {}\n", m);
  for (const std::string& p : r.partial_sums) s += fmt::format("# partial sums: {}\n", p);
  s += fmt::format("# reductions: {} order, {} dtype; busiest rank sent {} bytes\n", r.reduce_order, r.reduce_dtype,
                   r.comm_bytes_max_rank);
  for (const std::string& n : r.notes) s += fmt::format("# note: {}\n", n);
  return s;
}

}  // namespace fp8moe::sim
