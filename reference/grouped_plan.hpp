#pragma once
// The grouped passes' expert loop, once (issue 17 item 3): for a pass on quantized operands, the
// operand checks (recipes, formats, shapes, experts, offsets) and one GEMM per expert as
// BlockOperand views of the codes and scales. The CPU passes (reference/grouped.cpp) run the plan
// with block_gemm_batch, the simt passes (kernels/simt_grouped.cpp) launch one kernel per GEMM:
// they differ only in where the codes live and what computes each GEMM.
//
//   fwd   A (M,K) 1xB      x W (E,N,K) BxB    -> out (M,N):   expert e: rows of A,  W[e]
//   dgrad dOut (M,N) 1xB   x W^T (E,K,N) BxB  -> dA (M,K):    expert e: rows of dOut, W^T[e]
//   wgrad dOut^T (N,M) kgrouped-lhs x A (M,K) kgrouped-rhs -> dW (E,N,K): expert e contracts its
//         tokens [s_e, s_{e+1}); an empty expert contracts nothing (its dW is zero). A may also be
//         given transposed, A^T (K,M) kgrouped-lhs (TN GEMMs: both operands token-contiguous)
// The views carry every operand's strides, so a GEMM engine that needs a layout (cuBLASLt: both
// operands contiguous along the contraction) reads it from the plan and refuses what it cannot take.
#include <cstdint>
#include <span>
#include <vector>

#include "reference/gemm.hpp"
#include "reference/quantize.hpp"

namespace fp8moe {

// The recipes a quantized pass applies to its operands (lhs, rhs).
struct PassRecipes {
  Recipe lhs, rhs;
};
PassRecipes pass_recipes(Pass p);

// A quantized operand wherever its codes and scales live (host or device pointers).
struct QuantOperand {
  QuantLayout layout;
  const std::uint8_t* codes = nullptr;
  const float* scales = nullptr;
  Recipe recipe = Recipe::act_lhs;
  Fp8Format format = Fp8Format::e4m3;
};
inline QuantOperand operand(const Quantized& q) {
  return QuantOperand{q.layout, q.codes.ptr(), q.scales.ptr(), q.recipe, q.format};
}

// One expert's GEMM: C[out_offset + i * ldc + j] for i < L.rows, j < R.rows, contracted over kc.
struct ExpertGemm {
  std::size_t expert = 0;
  BlockOperand L, R;
  std::int64_t kc = 0;
  std::int64_t out_offset = 0, ldc = 0;
  int splits = 1;  // cuBLASLt's split-K of the expert (opt.split_k), for hopper-tc:cublas
};

struct GroupedPlan {
  std::vector<std::int64_t> out_shape;  // fwd (M,N), dgrad (M,K), wgrad (E,N,K)
  std::vector<ExpertGemm> gemms;        // one per expert, in expert order
};

// The plan of pass p; an Error names the pass, the operand and the mismatch.
GroupedPlan plan_grouped(Pass p, const QuantOperand& lhs, const QuantOperand& rhs, std::span<const std::int32_t> offs,
                         const GemmOptions& opt);

}  // namespace fp8moe
