#pragma once
// Layer-level scenarios (issue 3 items 5, 6): the MoE SwiGLU expert block run under a parallel
// plan on a mesh, every pass through the Backend, every collective through the Communicator.
//
//   h1 = fwd(x, W1) (M,H)   h3 = fwd(x, W3) (M,H)   h = swiglu(h1, h3)   y = fwd(h, W2) (M,D)
//   dh = dgrad(dy, W2) (M,H)          dW2 = wgrad(dy, h) (E,D,H)
//   (dh1, dh3) = swiglu_backward(h1, h3, dh)
//   dx = bf16(dgrad(dh1, W1) + dgrad(dh3, W3))   (the two bf16 dgrads summed in fp32; hp64: fp32)
//   dW1 = wgrad(dh1, x) (E,H,D)   dW3 = wgrad(dh3, x) (E,H,D)
//   optional SGD: W <- bf16(W - lr * dW)
// W1, W3 (E,H,D); W2 (E,D,H); x, dy (M,D) grouped by offs (E, cumulative int32).
//
// Data (from (seed, tensor id), reference/datagen): x kTensorA, W1 kTensorW, W3 kTensorW3,
// W2 kTensorW2, dy kTensorGradOut; weights scaled like torchao's test module
// (_fp8_blockwise_distributed_test_utils.py): W1, W3 by D^-1/2, W2 by H^-1/2, rounded to bf16.
//
// Plans (mesh dims by name; dims not named by the plan must have size 1):
// | plan    | dims     | parameters at rest (W1/W3, W2)   | tokens                        | collectives                                   |
// |---------|----------|----------------------------------|-------------------------------|-----------------------------------------------|
// | single  | -        | R                                | all                           | none                                          |
// | dp      | dp       | R                                | split per expert over dp      | dW all_reduce over dp                         |
// | fsdp    | dp       | S(0) over dp                     | split per expert over dp      | W all_gather (bf16 or fp8) before fwd and bwd, dW reduce_scatter on E |
// | tp      | tp       | S(1), S(2) over tp               | replicated                    | y and dx all_reduce over tp (Partial)          |
// | ep      | ep       | S(0) over ep                     | chunk per ep rank, all_to_all | dispatch/combine all_to_all (fwd and bwd)      |
// | fsdp+tp | dp, tp   | [S(0),S(1)], [S(0),S(2)]         | split per expert over dp      | fsdp on dp, tp on tp                           |
// | dp+ep   | dp, ep   | [R,S(0)]                         | split over dp, then ep chunks | ep on ep, dW all_reduce over dp                |
// Token split over dp: rank c holds torch.chunk(c) of every expert's tokens (its own local offs);
// the gradients are summed (not averaged) because dy is the gradient of the global batch.
// EP: within its dp batch each ep rank starts with a contiguous torch.chunk of the (expert-sorted)
// tokens, exchanges per-expert counts (all_to_all), then sends each token to the rank owning its
// expert (experts torch.chunk over ep, so a rank may own none) and gets the results back.
//
// Choices that change numbers (reported in ScenarioReport):
// - A TP shard of H that is not a multiple of the block is zero-padded to one locally (as a
//   kernel's out-of-bounds zero fill does); its blocks are not the single device's.
// - A rank whose local token groups are not multiples of the block pads them (reference/SPEC.md 5.3) in
//   quantized modes, even with gemm.pad off; the wgrad token blocks then move.
// - Partial sums (y, dx over tp; dW over dp) are each rank's bf16 output reduced by the
//   communicator in ReduceOptions' dtype and order, then rounded to bf16 (hp64: not rounded).
// - fp8 dispatch: the owner dequantizes the received codes * scales and rounds to bf16 (torchao's
//   a2a-dequant output dtype); that is its input for fwd and the saved input of wgrad.
// - fp8 all-gather: each rank quantizes its expert shard (weight_fwd before fwd, weight_dgrad
//   before bwd), codes and scales are all-gathered, and the passes run on the gathered fp8 weight
//   (Backend::fwd_qweight/dgrad_qweight: modes exact and promote-fp32 only).
// Payloads: x, dy, weights and bf16 outputs travel as bf16 (2 bytes); fp8 codes 1 byte; scales,
// fp32 reductions and hp64 outputs 4 bytes. The SGD step and the fp32 sum of the two dgrads are
// elementwise here, not Backend ops.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/datagen.hpp"
#include "reference/gemm.hpp"
#include "sim/comm/communicator.hpp"
#include "sim/mesh/mesh.hpp"
#include "sim/mesh/placement.hpp"
#include "sim/spec/report.hpp"
#include "sim/spec/case_spec.hpp"

namespace fp8moe::sim {

// How a plan places every tensor. Mesh dims by index into the mesh, -1 when unused.
struct LayerPlan {
  std::string name;
  int dp_dim = -1;    // splits the tokens (dp, fsdp)
  bool fsdp = false;  // parameters Shard(0) over dp_dim, all-gathered before fwd and bwd
  int tp_dim = -1;
  int ep_dim = -1;
  Placements w13, w2;  // parameters (and their gradients) at rest
  std::string describe() const;
};

// Every plan name, in a fixed order.
const std::vector<std::string>& layer_plan_names();
// The plan `name` on `mesh`, or an Error with the reason the mesh cannot hold it.
LayerPlan make_layer_plan(const std::string& name, const Mesh& mesh);

struct PlanChoice {
  std::string name;
  bool valid = false;
  std::string reason;  // why the mesh cannot hold it (empty when valid)
};
std::vector<PlanChoice> enumerate_layer_plans(const Mesh& mesh);
std::vector<std::string> plans_for_mesh(const Mesh& mesh);  // the valid names

// The layer outputs, global and in single-device token order.
struct LayerOutputs {
  TensorF y, dx;                   // (M,D)
  TensorF dw1, dw3, dw2;           // (E,H,D), (E,H,D), (E,D,H)
  TensorF w1_new, w3_new, w2_new;  // after the SGD step (empty when lr == 0)
};

// One rank's own results: its rows of y and dx (their global token rows), and its at-rest shards
// of the gradients and updated weights (their boxes in the global tensors).
struct LayerLocal {
  int rank = -1;
  std::vector<std::int64_t> rows;          // global token row of each row of y and dx
  TensorF y, dx;
  TensorF dw1, dw3, dw2, w1_new, w3_new, w2_new;
  std::vector<Range> w13_box, w2_box;      // the shards' boxes in (E,H,D) and (E,D,H)
};

struct LayerRun {
  LayerOutputs out;
  std::vector<LayerLocal> local;  // the ranks this process holds
  ScenarioReport report;  // diagnostics filled; tensors empty
  std::vector<bool> tensor_aligned;  // y, dx, dw1, dw2, dw3 (blocks of the single-device quantization)
};

// Executes cfg.plan on cfg.mesh (SPMD over comm.local_ranks()) with `comm`, or with a
// FakeCommunicator holding every rank when none is given. A real communicator's process computes
// its own ranks and every rank receives the assembled global outputs.
LayerRun run_layer_plan(const CaseSpec& cfg, Communicator* comm = nullptr);
// The same layer on one device in `mode` (everything else from cfg).
LayerOutputs single_device_layer(const CaseSpec& cfg, Mode mode);
// run_layer_plan compared with the single-device hp64 result and the single-device result of
// cfg.gemm.mode: one TensorReport per output (y, dx, dw1, dw2, dw3, and w*_new when lr > 0).
// `keep`, when given, receives the plan's run (its outputs) too; `truth` and `single`, when
// given, the single-device hp64 and same-mode outputs it was compared with.
ScenarioReport run_layer(const CaseSpec& cfg, LayerRun* keep = nullptr, LayerOutputs* truth = nullptr,
                         LayerOutputs* single = nullptr, Communicator* comm = nullptr);

// What the plan changes and why (no execution): fills rep.block_aligned, misaligned, partial_sums
// and notes; returns the alignment of y, dx, dw1, dw2, dw3. offs: the layer's global offs.
std::vector<bool> describe_layer_numerics(const CaseSpec& cfg, const LayerPlan& plan, const Mesh& mesh,
                                          std::span<const std::int32_t> offs, ScenarioReport& rep);

// The layer's global inputs, as every plan generates them (see the data note at the top).
struct LayerInputs {
  std::vector<std::int32_t> offs;  // (E)
  TensorF x, dy;                   // (M,D)
  TensorF W1, W3, W2;              // (E,H,D), (E,H,D), (E,D,H)
};
LayerInputs layer_inputs(const CaseSpec& cfg);

// The named outputs of a LayerOutputs, in report order.
std::vector<std::pair<std::string, const TensorF*>> named_outputs(const LayerOutputs& o);

}  // namespace fp8moe::sim
