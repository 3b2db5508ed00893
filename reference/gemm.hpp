#pragma once
// Grouped GEMM passes (reference/SPEC.md 6) in every CPU arithmetic mode (SPEC.md 7).
//
// | pass  | math (per expert e, rows grouped by offs) | lhs quantization        | rhs quantization          |
// |-------|-------------------------------------------|-------------------------|---------------------------|
// | fwd   | out_e (M_e,N) = A_e . W_e^T               | A 1x128 along K         | W 128x128                 |
// | dgrad | dA_e (M_e,K)  = dOut_e . W_e              | dOut 1x128 along N      | W 128x128, (E,K,N) layout |
// | wgrad | dW_e (N,K)    = dOut_e^T . A_e            | dOut^T 1x128 along M_e  | A 128x1 along M_e         |
//
// Outputs are returned as double tensors holding the rounded output values (bf16 by default, fp32
// or unrounded fp64 on request), so every mode compares with every other without conversions.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/quantize.hpp"
#include "reference/tensor.hpp"
#include "reference/tensor_core.hpp"

namespace fp8moe {

enum class Pass : std::uint8_t { fwd, dgrad, wgrad };
enum class Mode : std::uint8_t { hp64, bf16, exact, torchao_emulated, promote_fp32, hopper_tc };
// promote-fp32 and hopper-tc fold block partials P into fp32 with the promotion of a Promotion
// family (reference/tensor_core.hpp `promote`): deepgemm y = fma(P, fl(sa*sb), y) everywhere;
// cublas the same for act x weight and y = fma(fl(P*s_lhs), s_rhs, y) for act x act (wgrad).
// They differ in P: promote-fp32 rounds the exact partial once to fp32, hopper-tc chains the
// tensor core's truncating k32 steps.
enum class OutDtype : std::uint8_t { bf16, fp32, fp64 };

struct GemmOptions {
  Mode mode = Mode::promote_fp32;
  Promotion promotion = Promotion::deepgemm;
  OutDtype out = OutDtype::bf16;
  QuantOptions quant;
  bool pad = false;  // token-group padding (SPEC.md 5.2); outputs are unpadded
  // cuBLASLt's split-K per expert (numSplitsK of the algorithm it ran; empty or 1: no split), so
  // hopper-tc:cublas reproduces a split call. Only quantized modes with a fp32 accumulator use it.
  std::vector<std::int32_t> split_k;
  // The split runs' unit in blocks (0: the measured rule of the scale config, tensor_core.hpp's
  // split_unit); other values model other kernels or test candidate rules on a device.
  int split_unit = 0;
};

bool is_quantized(Mode m);  // exact, torchao-emulated, promote-fp32, hopper-tc
// promote-fp32 and hopper-tc: fp32 accumulation with a promotion family.
bool is_promoted(Mode m);
// Why `opt.mode` cannot be computed with these options, or empty: hopper-tc:cublas models
// cuBLASLt, whose block scaling runs e4m3 with 128-element blocks only.
std::string mode_unsupported(const GemmOptions& opt);
// cuBLASLt's split count of expert e under opt (1 when opt.split_k is empty); errors name e.
int splits_of(const GemmOptions& opt, std::size_t e);

// Passes on high-precision inputs. A (M,K), W (E,N,K), dOut (M,N); offs (E) cumulative ends.
TensorD grouped_fwd(const TensorF& A, const TensorF& W, std::span<const std::int32_t> offs, const GemmOptions& opt);
TensorD grouped_dgrad(const TensorF& dOut, const TensorF& W, std::span<const std::int32_t> offs,
                      const GemmOptions& opt);
TensorD grouped_wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs,
                      const GemmOptions& opt);

// Passes on already quantized operands (exact and promote-fp32 only), for callers that quantize
// once and reuse, or move quantized operands between ranks.
//   fwd:   A_q 1x128 (M,K),            W_q grouped fwd (E,N,K)
//   dgrad: dOut_q 1x128 (M,N),         W_q grouped dgrad (E,K,N)
//   wgrad: dOutT_q kgrouped-lhs (N,M), A_q kgrouped-rhs (M,K)
TensorD grouped_fwd_q(const Quantized& A_q, const Quantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt);
TensorD grouped_dgrad_q(const Quantized& dOut_q, const Quantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt);
TensorD grouped_wgrad_q(const Quantized& dOutT_q, const Quantized& A_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt);

// One quantized operand of one expert, seen as a (rows, kc) matrix contracted along kc:
//   code(r, k)  = codes[r * rs + k * ks]
//   s_inv(r, b) = scales[(r / rblock) * srs + b * sks]   for the k-block b = k / B
struct BlockOperand {
  const std::uint8_t* codes = nullptr;
  std::int64_t rs = 0, ks = 0;
  const float* scales = nullptr;
  std::int64_t srs = 0, sks = 0;
  int rblock = 1;
  std::int64_t rows = 0;
  // The formulas above, host and device (the CPU GEMM and the simt kernel read through these).
  FP8MOE_HD std::uint8_t code(std::int64_t r, std::int64_t k) const { return codes[r * rs + k * ks]; }
  FP8MOE_HD float scale(std::int64_t r, std::int64_t b) const { return scales[(r / rblock) * srs + b * sks]; }
};
// act x act when both operands carry one scale per row and k-block (wgrad's 1x128 x 1x128).
inline ScaleConfig scale_config(const BlockOperand& L, const BlockOperand& R) {
  return L.rblock == 1 && R.rblock == 1 ? ScaleConfig::act_act : ScaleConfig::act_weight;
}

// C (L.rows, R.rows) = sum over k-blocks of the blockwise products, combined per `opt.mode`
// (exact, promote-fp32 or hopper-tc); C is written with row stride ldc. kc must be a multiple of B.
void block_gemm(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, double* C, std::int64_t ldc,
                const GemmOptions& opt);
// Several independent GEMMs (the experts of one grouped pass), run in one parallel region.
struct GemmTask {
  BlockOperand L, R;
  std::int64_t kc = 0;
  double* C = nullptr;
  std::int64_t ldc = 0;
  int splits = 1;  // cuBLASLt split-K runs (reference/tensor_core.hpp), promoted modes only
};
void block_gemm_batch(std::span<const GemmTask> tasks, const GemmOptions& opt);
// The same through the plain scalar path (any format; int128 block partials, or the tensor-core
// step for hopper-tc), with cuBLASLt's split-K runs when splits > 1: the reference the fast
// paths are held against in tests.
void block_gemm_scalar(const BlockOperand& L, const BlockOperand& R, std::int64_t kc, double* C,
                       std::int64_t ldc, const GemmOptions& opt, int splits = 1);

const char* pass_name(Pass p);
const char* mode_name(Mode m);
const char* promotion_name(Promotion p);
const char* out_dtype_name(OutDtype d);
Pass parse_pass(const std::string& s);
Mode parse_mode(const std::string& s);
Promotion parse_promotion(const std::string& s);
OutDtype parse_out_dtype(const std::string& s);
// "promote-fp32" and "hopper-tc" with the promotion family, e.g. "hopper-tc:cublas"; other modes
// their name.
std::string mode_label(Mode m, Promotion p);
// A mode value as users write it: "exact" or "hopper-tc:cublas" (the old spelling "hopper-tc/cublas" too); a promoted
// mode without a family ("promote-fp32", "hopper-tc") stands for both families, deepgemm first.
// Errors name the value and the choices.
struct ModeSpec {
  Mode mode = Mode::promote_fp32;
  Promotion promo = Promotion::deepgemm;
  std::string label() const;  // mode_label(mode, promo)
};
std::vector<ModeSpec> parse_mode_spec(const std::string& s);

}  // namespace fp8moe
