// The CUDA backends cuda-simt, cuda-cublaslt and (where CUTLASS was found at configure time)
// cuda-cutlass (see cuda_backend.hpp for what each computes).
// Host tensors at op boundaries. Every op checks its device-memory estimate before it allocates
// (kernels::require_device_memory), uploads, computes, downloads; a case's estimate
// (cuda_case_device_bytes) is built from the same per-pass formula, pass_bytes.
#include "sim/backend/cuda_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <set>

#include "kernels/check.hpp"
#include "kernels/cublaslt_grouped.hpp"
#ifdef FP8MOE_HAVE_CUTLASS
#include "kernels/cutlass_grouped.hpp"
#endif
#include "kernels/hp64_gemm.hpp"
#include "kernels/quantize.hpp"
#include "kernels/simt_gemm.hpp"
#include "reference/groups.hpp"

namespace fp8moe::sim {
namespace {

using kernels::DeviceBuffer;
using kernels::DeviceQuantized;

// Every cuBLASLt split count seen in this process (fake meshes run ranks on several threads).
std::mutex g_splits_mutex;
std::set<std::int32_t> g_splits_seen;

constexpr const char* kSimt = "cuda-simt";
constexpr const char* kLt = "cuda-cublaslt";
constexpr const char* kCutlass = "cuda-cutlass";

#ifdef FP8MOE_HAVE_CUTLASS
constexpr bool kHaveCutlass = true;
#else
constexpr bool kHaveCutlass = false;
#endif

bool is_cuda_backend(const std::string& name) {
  return name == kSimt || name == kLt || (kHaveCutlass && name == kCutlass);
}
std::string cuda_backend_list() { return kHaveCutlass ? "cuda-simt, cuda-cublaslt, cuda-cutlass" : "cuda-simt, cuda-cublaslt"; }
void require_cuda_backend(const std::string& name) {
  if (is_cuda_backend(name)) return;
  if (name == kCutlass) {
    fail("backend 'cuda-cutlass' is not built: this build found no CUTLASS headers at configure time "
         "(scripts/setup.sh fetches them; or -DFP8MOE_CUTLASS_DIR=...): use cuda-cublaslt or cuda-simt");
  }
  fail("unknown CUDA backend '", name, "': this build has ", cuda_backend_list());
}

std::string shape_of(const char* pass, std::int64_t E, std::int64_t M, std::int64_t N, std::int64_t K) {
  return cat(pass, " E=", E, " M=", M, " N=", N, " K=", K);
}

// Token-group padding around a pass, as reference/grouped.cpp does it (reference/SPEC.md 5.2): the
// zero-filled rows of pad_rows, the first padded_ends.back() of them, then unpad_rows.
template <class Body>
TensorD with_padding(const GemmOptions& opt, std::span<const std::int32_t> offs,
                     std::initializer_list<const TensorF*> acts, Body body, bool unpad_output) {
  if (!opt.pad) return body(std::vector<const TensorF*>(acts), offs);
  const PaddedGroups p = pad_groups(offs, opt.quant.block);
  const std::vector<std::int32_t>& poffs = p.padded_ends;
  const std::int64_t rows = poffs.empty() ? 0 : poffs.back();
  std::vector<TensorF> padded;
  for (const TensorF* a : acts) {
    TensorF t = pad_rows(*a, offs, p);
    t.shape[0] = rows;
    t.data.resize(static_cast<std::size_t>(rows * t.shape[1]));
    padded.push_back(std::move(t));
  }
  std::vector<const TensorF*> v;
  for (const TensorF& a : padded) v.push_back(&a);
  TensorD out = body(v, std::span<const std::int32_t>(poffs));
  return unpad_output ? unpad_rows(out, offs, p) : out;
}

TensorD from_floats(std::vector<std::int64_t> shape, const std::vector<float>& f) {
  TensorD t(std::move(shape));
  for (std::size_t i = 0; i < f.size(); ++i) t.data[i] = f[i];
  return t;
}

TensorD from_doubles(std::vector<std::int64_t> shape, std::vector<double> d) {
  TensorD t(std::move(shape));
  t.data = std::move(d);
  return t;
}

bool rows_multiple_of(std::span<const std::int32_t> offs, std::int32_t m) {
  std::int32_t s = 0;
  for (const std::int32_t e : offs) {
    if ((e - s) % m != 0) return false;
    s = e;
  }
  return true;
}

void check_2d(const char* pass, const TensorF& t, const char* what) {
  if (t.rank() != 2) fail(pass, ": ", what, " must be 2-D, got shape ", shape_str(t.shape));
}

void check_weight(const char* pass, const TensorF& W, std::span<const std::int32_t> offs) {
  if (W.rank() != 3) fail(pass, ": W must be 3-D (E,N,K), got shape ", shape_str(W.shape));
  if (W.dim(0) != static_cast<std::int64_t>(offs.size())) {
    fail(pass, ": W has ", W.dim(0), " experts but offs has ", offs.size(), " entries");
  }
}

// Device bytes of one op: fp32 inputs, fp8 codes (+1/16 for the scales and 1 MiB of slack when
// quantized), and the output. In double so that an absurd shape saturates instead of wrapping.
double pass_bytes(double in_elems, bool quantized, double out_elems, double out_bytes) {
  const double q = quantized ? in_elems + in_elems / 16 + (1 << 20) : 0;
  return in_elems * 4 + q + out_elems * out_bytes;
}
std::size_t to_bytes(double b) {
  constexpr auto kMax = std::numeric_limits<std::size_t>::max();
  return b >= static_cast<double>(kMax) ? kMax : static_cast<std::size_t>(std::ceil(b));
}
std::size_t sat_add(std::size_t a, std::size_t b) {
  return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
}
std::string gib(std::size_t b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ull << 30)); }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::string name) : name_(std::move(name)), cpu_(make_backend("reference")) {
    if (name_ == kLt) lt_ = std::make_unique<kernels::CublasLtGrouped>();
#ifdef FP8MOE_HAVE_CUTLASS
    if (name_ == kCutlass) cutlass_ = std::make_unique<kernels::CutlassGrouped>();
#endif
  }
  std::string name() const override { return name_; }

  Quantized quantize(Recipe r, const TensorF& x, std::span<const std::int32_t> offs, const QuantOptions& opt) override {
    kernels::require_device_memory(to_bytes(pass_bytes(static_cast<double>(x.numel()), true, 0, 0)),
                                   cat(name_, " quantize ", recipe_name(r), " ", shape_str(x.shape)));
    const DeviceBuffer<float> dx(x.data);
    return kernels::quantize<float>(r, dx.get(), x.shape, offs, opt).to_host();
  }
  TensorF dequantize(const Quantized& q) override { return cpu_->dequantize(q); }

  TensorD fwd(const TensorF& A, const TensorF& W, std::span<const std::int32_t> offs, const GemmOptions& opt) override {
    require("fwd", opt);
    check_weight("fwd", W, offs);
    check_2d("fwd", A, "A");
    if (A.dim(1) != W.dim(2)) fail("fwd: A has ", A.dim(1), " columns but W has K = ", W.dim(2));
    return with_padding(opt, offs, {&A}, [&](const std::vector<const TensorF*>& v, std::span<const std::int32_t> o) {
      return run_fwd_dgrad(Pass::fwd, *v[0], W, o, opt, nullptr);
    }, true);
  }
  TensorD dgrad(const TensorF& dOut, const TensorF& W, std::span<const std::int32_t> offs,
                const GemmOptions& opt) override {
    require("dgrad", opt);
    check_weight("dgrad", W, offs);
    check_2d("dgrad", dOut, "dOut");
    if (dOut.dim(1) != W.dim(1)) fail("dgrad: dOut has ", dOut.dim(1), " columns but W has N = ", W.dim(1));
    return with_padding(opt, offs, {&dOut}, [&](const std::vector<const TensorF*>& v, std::span<const std::int32_t> o) {
      return run_fwd_dgrad(Pass::dgrad, *v[0], W, o, opt, nullptr);
    }, true);
  }
  TensorD wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs,
                const GemmOptions& opt) override {
    require("wgrad", opt);
    check_2d("wgrad", dOut, "dOut");
    check_2d("wgrad", A, "A");
    check_offsets(offs, dOut.dim(0));
    check_offsets(offs, A.dim(0));
    return with_padding(opt, offs, {&dOut, &A}, [&](const std::vector<const TensorF*>& v, std::span<const std::int32_t> o) {
      return run_wgrad(*v[0], *v[1], o, opt);
    }, false);
  }
  TensorD fwd_qweight(const TensorF& A, const Quantized& W_q, std::span<const std::int32_t> offs,
                      const GemmOptions& opt) override {
    require_quantized("fwd_qweight", opt);
    return run_fwd_dgrad(Pass::fwd, A, TensorF(), offs, opt, &W_q);
  }
  TensorD dgrad_qweight(const TensorF& dOut, const Quantized& W_q, std::span<const std::int32_t> offs,
                        const GemmOptions& opt) override {
    require_quantized("dgrad_qweight", opt);
    return run_fwd_dgrad(Pass::dgrad, dOut, TensorF(), offs, opt, &W_q);
  }

  std::vector<std::int32_t> last_split_k() const override { return last_split_k_; }
  std::string last_algorithms() const override { return last_algorithms_; }
  std::vector<std::int32_t> take_splits_seen() override {
    std::vector<std::int32_t> v(splits_seen_.begin(), splits_seen_.end());
    splits_seen_.clear();
    return v;
  }

  TensorF swiglu(const TensorF& a, const TensorF& b) override { return cpu_->swiglu(a, b); }
  void swiglu_backward(const TensorF& a, const TensorF& b, const TensorF& dh, TensorF& da, TensorF& db) override {
    cpu_->swiglu_backward(a, b, dh, da, db);
  }

 private:
  void require(const char* pass, const GemmOptions& opt) const {
    const std::string why = cuda_backend_unsupported(name_, opt);
    if (!why.empty()) fail(pass, " on backend ", name_, ": ", why);
  }
  void require_quantized(const char* pass, const GemmOptions& opt) const {
    require(pass, opt);
    if (!is_promoted(opt.mode)) fail(pass, " on backend ", name_, ": a quantized weight needs promote-fp32 or hopper-tc");
  }

  // The quantized GEMM of one pass on device operands; out is (rows, cols) of opt.out values.
  TensorD quantized_pass(Pass p, const DeviceQuantized& l, const DeviceQuantized& r, std::span<const std::int32_t> offs,
                         const GemmOptions& opt, std::vector<std::int64_t> out_shape) {
    const std::size_t n = static_cast<std::size_t>(Tensor<double>::count(out_shape));
    // Outputs start as NaN (fill_sentinel): an element a kernel or cuBLASLt leaves unwritten fails
    // every check downstream. This is also what shows compute-sanitizer's initcheck report on the
    // cuBLASLt outputs (it does not see cuBLASLt's stores) to be spurious: with the sentinel, every
    // output equals the hopper-tc model bitwise (test_kernels_cublaslt, results/bench round logs).
    if (tensor_core()) {
      TensorD t(out_shape);
      if (opt.out == OutDtype::bf16) {
        DeviceBuffer<std::uint16_t> out(n);
        out.fill_sentinel();
        call_tc(p, l, r, offs, opt, out.get());
        const std::vector<std::uint16_t> h = out.download();
        for (std::size_t i = 0; i < n; ++i) t.data[i] = bf16_to_f32(h[i]);
      } else {
        DeviceBuffer<float> out(n);
        out.fill_sentinel();
        call_tc(p, l, r, offs, opt, out.get());
        const std::vector<float> h = out.download();
        for (std::size_t i = 0; i < n; ++i) t.data[i] = h[i];
      }
      return t;
    }
    DeviceBuffer<float> out(n);
    out.fill_sentinel();
    switch (p) {
      case Pass::fwd: kernels::simt_grouped_fwd(l, r, offs, opt, out.get()); break;
      case Pass::dgrad: kernels::simt_grouped_dgrad(l, r, offs, opt, out.get()); break;
      case Pass::wgrad: kernels::simt_grouped_wgrad(l, r, offs, opt, out.get()); break;
    }
    return from_floats(std::move(out_shape), out.download());
  }
  // The production GEMMs: cuBLASLt's loop or CUTLASS's grouped launch.
  bool tensor_core() const {
#ifdef FP8MOE_HAVE_CUTLASS
    if (cutlass_) return true;
#endif
    return lt_ != nullptr;
  }
  void call_tc(Pass p, const DeviceQuantized& l, const DeviceQuantized& r, std::span<const std::int32_t> offs,
               const GemmOptions& opt, void* out) {
#ifdef FP8MOE_HAVE_CUTLASS
    if (cutlass_) {
      switch (p) {
        case Pass::fwd: cutlass_->fwd(l, r, offs, opt, out); break;
        case Pass::dgrad: cutlass_->dgrad(l, r, offs, opt, out); break;
        case Pass::wgrad: cutlass_->wgrad(l, r, offs, opt, out); break;
      }
      last_split_k_.assign(offs.size(), 1);  // one grouped launch, no split-K
      last_algorithms_ = cutlass_->last_config();
      return;
    }
#endif
    switch (p) {
      case Pass::fwd: lt_->fwd(l, r, offs, opt, out); break;
      case Pass::dgrad: lt_->dgrad(l, r, offs, opt, out); break;
      case Pass::wgrad: lt_->wgrad(l, r, offs, opt, out); break;
    }
    last_split_k_ = lt_->last_split_k(offs.size());
    last_algorithms_.clear();
    for (const kernels::LtCall& c : lt_->last_calls()) {
      last_algorithms_ += cat(last_algorithms_.empty() ? "" : "; ", "e", c.expert, ": algo ", c.algo_id, " tile ", c.tile_id,
                              " splits ", c.splits, " reduction ", kernels::lt_reduction_name(c.reduction));
    }
    const std::lock_guard<std::mutex> lock(g_splits_mutex);
    for (const kernels::LtCall& c : lt_->last_calls()) {
      splits_seen_.insert(c.splits);
      g_splits_seen.insert(c.splits);
    }
  }

  // fwd: act A (M,K), W (E,N,K) -> (M,N); dgrad: act dOut (M,N), W (E,N,K) -> (M,K). With W_q the
  // weight arrives quantized (fwd 128x128 (E,N,K), dgrad 128x128T (E,K,N)) and W is unused.
  TensorD run_fwd_dgrad(Pass p, const TensorF& act, const TensorF& W, std::span<const std::int32_t> offs,
                        const GemmOptions& opt, const Quantized* W_q) {
    const std::int64_t M = act.dim(0), C = act.dim(1);
    const std::int64_t E = W_q ? W_q->codes.dim(0) : W.dim(0);
    const std::int64_t N = W_q ? (p == Pass::fwd ? W_q->codes.dim(1) : W_q->codes.dim(2)) : W.dim(1);
    const std::int64_t K = W_q ? (p == Pass::fwd ? W_q->codes.dim(2) : W_q->codes.dim(1)) : W.dim(2);
    const std::int64_t cols = p == Pass::fwd ? N : K;
    const bool hp = opt.mode == Mode::hp64;
    kernels::require_device_memory(to_bytes(pass_bytes(static_cast<double>(M * C + E * N * K), !hp,
                                                       static_cast<double>(M * cols), hp ? 8 : 4)),
                                   cat(name_, " ", shape_of(pass_name(p), E, M, N, K)));
    check_offsets(offs, M);
    const DeviceBuffer<float> da(act.data);
    if (hp) {
      const DeviceBuffer<float> dw(W.data);
      DeviceBuffer<double> out(static_cast<std::size_t>(M * cols));
      out.fill_sentinel();
      if (p == Pass::fwd) {
        kernels::hp64_grouped_fwd(da.get(), dw.get(), M, N, K, offs, out.get());
      } else {
        kernels::hp64_grouped_dgrad(da.get(), dw.get(), M, N, K, offs, out.get());
      }
      return from_doubles({M, cols}, out.download());
    }
    if (lt_ && !rows_multiple_of(offs, kernels::kLtRowMultiple)) {
      // cuBLASLt's 1x128 scales need every expert's row count a multiple of 4: zero rows after
      // each ragged expert change no other row (fwd/dgrad rows are independent), then dropped.
      const PaddedGroups pg = pad_groups(offs, kernels::kLtRowMultiple);
      TensorF padded = pad_rows(act, offs, pg);
      padded.shape[0] = pg.padded_ends.back();
      padded.data.resize(static_cast<std::size_t>(padded.shape[0] * C));
      return unpad_rows(run_fwd_dgrad(p, padded, W, pg.padded_ends, opt, W_q), offs, pg);
    }
    const DeviceQuantized a_q = kernels::quantize<float>(Recipe::act_lhs, da.get(), act.shape, {}, opt.quant);
    DeviceQuantized w_q;
    if (W_q) {
      w_q = kernels::upload(*W_q);
    } else {
      const DeviceBuffer<float> dw(W.data);
      w_q = kernels::quantize<float>(p == Pass::fwd ? Recipe::weight_fwd : Recipe::weight_dgrad, dw.get(), W.shape, {},
                                     opt.quant);
    }
    return quantized_pass(p, a_q, w_q, offs, opt, {M, cols});
  }

  // dOut (M,N), A (M,K) -> dW (E,N,K)
  TensorD run_wgrad(const TensorF& dOut, const TensorF& A, std::span<const std::int32_t> offs, const GemmOptions& opt) {
    const std::int64_t M = dOut.dim(0), N = dOut.dim(1), K = A.dim(1), E = static_cast<std::int64_t>(offs.size());
    const bool hp = opt.mode == Mode::hp64;
    kernels::require_device_memory(to_bytes(pass_bytes(static_cast<double>(M * (N + K)), !hp,
                                                       static_cast<double>(E * N * K), hp ? 8 : 4)),
                                   cat(name_, " ", shape_of("wgrad", E, M, N, K)));
    const DeviceBuffer<float> dg(dOut.data), da(A.data);
    if (hp) {
      DeviceBuffer<double> out(static_cast<std::size_t>(E * N * K));
      out.fill_sentinel();
      kernels::hp64_grouped_wgrad(dg.get(), da.get(), M, N, K, offs, out.get());
      return from_doubles({E, N, K}, out.download());
    }
    const DeviceQuantized g_q = kernels::quantize<float>(Recipe::kgrouped_lhs, dg.get(), dOut.shape, offs, opt.quant);
    // simt reads A as 128x1 along tokens in place; cuBLASLt and CUTLASS need A^T's codes (TN only).
    const DeviceQuantized a_q = kernels::quantize<float>(tensor_core() ? Recipe::kgrouped_lhs : Recipe::kgrouped_rhs,
                                                         da.get(), A.shape, offs, opt.quant);
    return quantized_pass(Pass::wgrad, g_q, a_q, offs, opt, {E, N, K});
  }

  std::string name_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<kernels::CublasLtGrouped> lt_;
#ifdef FP8MOE_HAVE_CUTLASS
  std::unique_ptr<kernels::CutlassGrouped> cutlass_;
#endif
  std::vector<std::int32_t> last_split_k_;
  std::string last_algorithms_;
  std::set<std::int32_t> splits_seen_;
};

}  // namespace

std::vector<std::int32_t> take_cublaslt_splits_seen() {
  const std::lock_guard<std::mutex> lock(g_splits_mutex);
  std::vector<std::int32_t> v(g_splits_seen.begin(), g_splits_seen.end());
  g_splits_seen.clear();
  return v;
}

const std::vector<std::string>& cuda_backend_names() {
  static const std::vector<std::string> names =
      kHaveCutlass ? std::vector<std::string>{kSimt, kLt, kCutlass} : std::vector<std::string>{kSimt, kLt};
  return names;
}

std::string cuda_backend_unsupported(const std::string& name, const GemmOptions& opt) {
  if (opt.mode == Mode::hp64) return {};  // the GPU fp64 reference, either backend
  if (name == kSimt) {
    if (!is_promoted(opt.mode)) {
      return cat(name, " computes hp64, promote-fp32 and hopper-tc only, not ", mode_name(opt.mode),
                 ": run that mode with --backend reference");
    }
    if (opt.out == OutDtype::fp64) return "the simt GEMM writes bf16 or fp32 output, not fp64";
    return {};
  }
  if (name == kLt) {
    // cuBLASLt computes what it computes; the mode names the model it is held to, and only
    // hopper-tc:cublas models it bit for bit.
    if (opt.mode != Mode::hopper_tc || opt.promotion != Promotion::cublas) {
      return cat("cuda-cublaslt runs cuBLASLt's tensor cores, modelled bit for bit by hopper-tc:cublas, not ",
                 mode_label(opt.mode, opt.promotion), ": use mode hopper-tc:cublas (or hp64)");
    }
    return kernels::cublaslt_unsupported(opt.quant, opt.out);
  }
#ifdef FP8MOE_HAVE_CUTLASS
  if (name == kCutlass) {
    // CUTLASS's collective promotes fwd/dgrad as fma(P, fl(sa*sb), acc) and wgrad (per-row scales
    // on both operands) as fma(fl(P*sa), sb, acc): hopper-tc:cublas's arithmetic in every pass
    // (kernels/cutlass_gemm.cuh), with one grouped launch and no split-K.
    if (opt.mode != Mode::hopper_tc || opt.promotion != Promotion::cublas) {
      return cat("cuda-cutlass runs CUTLASS's sm90 blockwise-FP8 grouped GEMM, modelled bit for bit by hopper-tc:cublas, not ",
                 mode_label(opt.mode, opt.promotion), ": use mode hopper-tc:cublas (or hp64)");
    }
    return kernels::cutlass_unsupported(opt.quant, opt.out);
  }
#endif
  require_cuda_backend(name);
  fail("unknown CUDA backend '", name, "'");
}

std::size_t CudaCaseBytes::total() const { return sat_add(sat_add(op, fixed), comm); }

CudaCaseBytes cuda_case_device_bytes(const std::string& backend, const CudaCaseShape& s) {
  require_cuda_backend(backend);
  const double B = std::max(1, s.gemm.quant.block);
  const double E = static_cast<double>(std::max<std::int64_t>(s.experts, 1));
  const bool q = is_quantized(s.gemm.mode);
  // Rows: every expert's group padded to the block (a rank pads its own groups) and to cuBLASLt's
  // row multiple; feature dims: rounded up to the block.
  const double M = static_cast<double>(s.tokens) + E * (B + kernels::kLtRowMultiple);
  auto feat = [&](std::int64_t x) { return std::ceil(static_cast<double>(x) / B) * B; };
  double op = 0, in_max = 0;
  auto pass = [&](double in, double out) {  // the case's mode and the hp64 reference run
    op = std::max({op, q ? pass_bytes(in, true, out, 4) : 0.0, pass_bytes(in, false, out, 8)});
    in_max = std::max(in_max, in);
  };
  double largest = 0;  // elements of the largest tensor a collective moves (unpadded)
  const double tok = static_cast<double>(s.tokens);
  if (!s.layer) {
    const double N = feat(s.n), K = feat(s.k);
    switch (s.pass) {
      case Pass::fwd: pass(M * K + E * N * K, M * N); break;
      case Pass::dgrad: pass(M * N + E * N * K, M * K); break;
      case Pass::wgrad: pass(M * (N + K), E * N * K); break;
    }
    const double n = static_cast<double>(s.n), k = static_cast<double>(s.k);
    largest = std::max({tok * n, tok * k, E * n * k});
  } else {
    const double D = feat(s.dim), H = feat(s.hidden), F = std::max(D, H);
    pass(M * F + E * H * D, M * F);  // fwd x.W1^T, h.W2^T; dgrad dy.W2, dh.W1 (and W3)
    pass(M * (D + H), E * H * D);    // wgrad dW1, dW2, dW3
    const double d = static_cast<double>(s.dim), h = static_cast<double>(s.hidden);
    largest = std::max({tok * d, tok * h, E * h * d});
  }
  CudaCaseBytes b;
  b.op = to_bytes(op);
  // CublasLtGrouped: its 32 MiB workspace and two relaid scale buffers (the scales are 1/32 of an
  // operand's fp32 bytes before the K-block padding; 4x that is kept as the bound). CutlassGrouped:
  // the same scale buffers, its argument arrays and CUTLASS's workspace (well under 32 MiB).
  if (backend == kLt || backend == kCutlass) b.fixed = to_bytes(32.0 * (1 << 20) + in_max / 8);
  if (s.fake_gpu && s.world > 1) {
    const double w = s.world;
    // (members + 1) fp32 images; per-image 256-byte alignment (at most 2 w^2 + 8 images), the
    // reduction tables and the arena's 1 MiB rounding.
    b.comm = to_bytes((w + 1) * largest * 4 + 256 * (2 * w * w + 8) + 48 * w + (1 << 20));
  }
  return b;
}

void require_cuda_case_memory(const std::string& backend, const CudaCaseShape& s, const std::string& what) {
  const CudaCaseBytes b = cuda_case_device_bytes(backend, s);
  if (kernels::cuda_device_count() == 0) {
    fail(what, ": backend ", backend, " needs a CUDA device, but cudaGetDeviceCount found none");
  }
  std::size_t free_b = 0, total_b = 0;
  FP8MOE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), what);
  if (b.total() > free_b) {
    fail(what, " on ", backend, " needs an estimated ", b.total(), " bytes (", gib(b.total()),
         ") of device memory: largest op ", gib(b.op), ", backend buffers ", gib(b.fixed), ", fake-gpu staging ",
         gib(b.comm), "; cudaMemGetInfo reports ", free_b, " bytes (", gib(free_b), ") free of ", gib(total_b),
         ": use fewer tokens, smaller dims, fewer experts or fewer ranks");
  }
}

std::unique_ptr<Backend> make_cuda_backend(const std::string& name) {
  require_cuda_backend(name);
  if (kernels::cuda_device_count() == 0) {
    fail("backend '", name, "' needs a CUDA device, but no CUDA device is present on this machine "
         "(cudaGetDeviceCount found none): use --backend reference, or run on a GPU machine");
  }
  return std::make_unique<CudaBackend>(name);
}

}  // namespace fp8moe::sim
