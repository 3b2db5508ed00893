#pragma once
// What one placement scenario reports (issue 3 item 8, reference/SPEC.md 8.3, 12.1): per output tensor,
// SQNR against the single-device hp64 truth and against the single-device FP8 result of the same
// mode (the second isolates what the sharding changed), plus the diagnostics of why.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/metrics.hpp"

namespace fp8moe::sim {

struct TensorReport {
  std::string pass;    // fwd, dgrad, wgrad (op level) or the layer pass that produced it
  std::string tensor;  // out, grad_A, grad_W (op) or y, dx, dw1, dw2, dw3, w1_new, ... (layer)
  Metrics vs_hp64;     // vs single-device hp64
  Metrics vs_single;   // vs single-device, same mode (bitwise_equal_frac 1 means unchanged)
  bool block_aligned = true;  // every local quantization block is a block of the single-device one
};

struct ScenarioReport {
  std::string level;       // op | layer
  std::string mesh;        // "dp=2,tp=2"
  std::string plan;        // op: placements "A=[R] W=[S(1)]"; layer: fsdp, tp, ep, fsdp+tp, dp+ep, ...
  std::string mode;        // mode label, e.g. promote-fp32:cublas
  std::string strategy;    // the sharding strategy or plan steps chosen
  std::vector<TensorReport> tensors;
  bool block_aligned = true;                // all tensors
  std::vector<std::string> misaligned;      // which quantization moved blocks, and why
  std::vector<std::string> partial_sums;    // where Partial sums were rounded, in which dtype/order
  std::string reduce_order;                 // ascending | ring
  std::string reduce_dtype;                 // fp32 | bf16
  std::int64_t comm_bytes_max_rank = 0;     // collective bytes sent by the busiest rank
  std::vector<std::string> notes;
};

}  // namespace fp8moe::sim
