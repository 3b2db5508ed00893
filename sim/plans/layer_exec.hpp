#pragma once
// Internal to sim/plans: the per-rank state and the SPMD executor of the layer plans, split over
// layer_exec.cpp (data, weights, passes, reductions, results) and layer_tokens.cpp (token
// placement, EP dispatch and combine).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/backend/backend.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/dtensor/dtensor.hpp"
#include "sim/plans/layer_plan.hpp"

namespace fp8moe::sim::layer_detail {

using I64 = std::int64_t;
using Offs = std::vector<std::int32_t>;

// Zero-pads (to > n) or crops (to < n) tensor dim d to `to` elements.
TensorF resize_dim(const TensorF& t, int d, I64 to);
TensorF take_rows(const TensorF& g, const std::vector<I64>& rows);
// bf16-valued floats as their 16 bf16 bits (the upper half of the fp32 pattern), and back.
std::vector<std::uint16_t> to_bf16_bits(const TensorF& t);
void from_bf16_bits(const std::vector<std::uint16_t>& in, TensorF& t);
void round_all_bf16(TensorF& t);
Range intersect(Range a, Range b);
// dp rank c of n: chunk c of every expert's tokens (torch.chunk within each expert).
void dp_split(const Offs& offs, int n, int c, std::vector<I64>& rows, Offs& local);

// Per rank: the tokens it starts with (home) and the tokens it computes on, as positions in its
// dp-local batch L (expert-major); without EP the two coincide.
struct RankState {
  std::vector<I64> L_rows;  // global row of each position of the dp-local batch
  Offs L_offs;              // (E) the dp-local batch's offs
  Range home, comp;         // positions in L
  Range experts;            // the experts this rank computes
  Offs offs;                // (experts) local offs of the computed tokens
  GemmOptions opt;
  TensorF w1, w3, w2;       // compute weights (H padded to the block), float path
  Quantized q1, q3, q2;     // compute weights, fp8-gathered path
  TensorF x, dy, h1, h3, h; // (M_c, D) x2, (M_c, Hp) x3
  TensorF y_home, dx_home;  // (home rows, D)
  TensorF dw1, dw3, dw2;    // at-rest shards of the gradients
  TensorF w1_new, w3_new, w2_new;
};

// The executor: global data, the parameters at rest, and every local rank's state.
struct Exec {
  const CaseSpec& cfg;
  LayerPlan plan;
  std::unique_ptr<Communicator> owned_comm;  // the fake mesh, when no communicator is given
  Communicator& comm;
  std::unique_ptr<Backend> be;
  int B = 128;
  I64 E = 0, D = 0, H = 0, M = 0;
  Offs offs;
  TensorF x, dy, W1, W3, W2;  // global
  std::vector<RankState> st;
  DTensor W1d, W3d, W2d;      // parameters at rest
  bool use_q = false;
  std::vector<std::string> notes;

  Exec(const CaseSpec& c, const Mesh& mesh, Communicator* external)
      : cfg(c),
        plan(make_layer_plan(c.plan, mesh)),
        owned_comm(external ? nullptr : std::make_unique<FakeCommunicator>(mesh)),
        comm(external ? *external : *owned_comm),
        be(make_backend(c.backend)) {
    check_comm_mesh(comm, mesh);
  }

  RankState& S(int r) { return st[static_cast<std::size_t>(r)]; }
  int n_of(int md) const { return md < 0 ? 1 : comm.mesh().size(md); }
  int coord(int r, int md) const { return md < 0 ? 0 : comm.mesh().coord(r, md); }

  Range h_range(int r) const { return chunk(H, n_of(plan.tp_dim), coord(r, plan.tp_dim)); }

  void make_data();

  // ---- tokens ----
  void place_tokens();
  void add_note(const std::string& n);

  // EP: each source tells each owner how many of its tokens go to each of the owner's experts
  // (an all_to_all of int32 counts, as a real dispatch does first); owners build their offs.
  void exchange_counts();

  // Moves rows between home and compute positions over the ep groups with all_to_all of `elem`
  // bytes per row. forward: home -> comp (dispatch); otherwise comp -> home (combine).
  void move_rows(std::vector<const std::byte*>& src, std::vector<std::byte*>& dst, I64 row_bytes, bool forward);

  // Float rows (home (rows, C) per rank) -> compute rows, or back. bf16-valued rows travel as
  // bf16 (2 bytes a value, as the real dispatch does); hp64 outputs travel as fp32.
  std::vector<TensorF> move_float(const std::vector<TensorF>& in, I64 C, bool forward, bool bf16);

  // Pass outputs are bf16-valued unless the mode is hp64 or the output dtype is wider.
  bool outputs_bf16() const { return cfg.gemm.mode != Mode::hp64 && cfg.gemm.out == OutDtype::bf16; }

  // FSDP2's bf16 all-gather of a Shard(0)-over-dp parameter: the members' expert shards,
  // concatenated in dp order, are the rank's compute weight (E, ...).
  std::vector<TensorF> gather_bf16(const DTensor& w);

  // The computed inputs: x (and dy) at the compute positions. EP moves them with all_to_all,
  // optionally x as fp8 codes + 1x128 scales that the receiver dequantizes to bf16.
  void load_inputs(const TensorF& g, TensorF RankState::*field, bool fp8);

  // ---- weights ----
  I64 h_pad(int r) const;

  // Before fwd (bwd = false) and before bwd (bwd = true): FSDP all-gathers over dp.
  void gather_weights(bool bwd);

  // ---- the passes, guarded for ranks with no experts or no tokens ----
  TensorF fwd(RankState& s, const TensorF& A, const TensorF& W, const Quantized& Wq, I64 N);
  TensorF dgrad(RankState& s, const TensorF& G, const TensorF& W, const Quantized& Wq, I64 K);
  TensorF wgrad(RankState& s, const TensorF& G, const TensorF& A);

  // Partial over tp: each rank's bf16 tensor reduced with all_reduce, rounded to bf16.
  void reduce_tp(TensorF RankState::*field);

  // dW over dp: fsdp reduce-scatters on the expert dim, dp all-reduces; then bf16.
  void reduce_dp(TensorF RankState::*field);

  void run();

  // EP combine: compute rows back to the home rows (a no-op without EP).
  void combine(TensorF RankState::*field);

  // ---- results (after the communicator's stats were read) ----
  TensorF assemble_rows(TensorF RankState::*field);
  TensorF assemble_param(const DTensor& like, TensorF RankState::*field);
  void keep_local(std::vector<LayerLocal>& out);  // each local rank's own results
};

}  // namespace fp8moe::sim::layer_detail
