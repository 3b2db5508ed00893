#pragma once
// One op-level scenario (issue 3 item 6): one grouped pass with explicit placements of its
// operands on a fake mesh, compared with the single-device hp64 result and with the single-device
// result of the same mode.
//
//   global inputs from (seed, tensor id) -> distribute(placements) -> redistribute per the rules
//   -> each rank's local pass (Backend) -> Partial outputs reduced -> full_tensor -> metrics
//
// Inputs: fwd A (M,K) kTensorA, W (E,N,K) kTensorW; dgrad dOut (M,N) kTensorGradOut, W;
// wgrad dOut, A. sim/ reaches reference/ compute only through the Backend.
#include <cstdint>
#include <utility>
#include <vector>

#include "reference/datagen.hpp"
#include "reference/gemm.hpp"
#include "sim/backend/backend.hpp"
#include "sim/comm/communicator.hpp"
#include "sim/mesh/placement.hpp"
#include "sim/rules/sharding.hpp"
#include "sim/spec/report.hpp"
#include "sim/spec/case_spec.hpp"

namespace fp8moe::sim {

struct OpRun {
  ScenarioReport report;
  ShardingDecision decision;
  TensorD out;                              // the gathered global output
  TensorD single;                           // single device, same mode
  TensorD hp64;                             // single device, hp64
  TensorF lhs, rhs;                         // the global inputs
  std::vector<TensorD> local;               // (world) each rank's local pass output (its partial under P)
  std::vector<std::vector<Range>> local_box;  // (world) the global box of the output each local covers
};

// Throws an Error with the rules' reason when the placements are rejected. `comm`: the mesh's
// communicator (a FakeCommunicator holding every rank when none is given); with a real one this
// process computes its own ranks' passes (`local` holds only those) and every rank gets `out`.
struct OpRunOptions {
  // false: only the placement's output (run.out, run.local): no single-device or hp64 pass and no
  // metrics (report.tensors empty). `fp8moe check` compares that output with the user's and needs
  // nothing else: a third of the GEMM work.
  bool references = true;
};
OpRun run_op(const CaseSpec& sc, Backend& backend, Communicator* comm = nullptr, const OpRunOptions& opt = {});

// The pass's global inputs (lhs, rhs): the user's (sc.given) or generated from the seed, as run_op
// takes them.
std::pair<TensorF, TensorF> op_inputs(const CaseSpec& sc);

// One rank's (or the single device's) pass on its operands. In the quantized modes, a feature dim
// the quantizer needs in whole blocks (fwd/dgrad: the lhs's dim 1, W's dims 1 and 2) that a
// misaligned shard left ragged is zero-padded to the block and the output cropped: the ragged
// block's amax is over its real elements, as a kernel's masked tail would have it. Local shards
// that are empty along the contracted dim give zeros. `notes`, when given, says what was padded.
TensorD run_local_pass(Backend& backend, Pass p, const TensorF& lhs, const TensorF& rhs,
                       std::span<const std::int32_t> offs, const GemmOptions& opt,
                       std::vector<std::string>* notes = nullptr);

}  // namespace fp8moe::sim
