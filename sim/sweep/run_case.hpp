#pragma once
// One expanded case (sim/sweep/expand.hpp) run end to end: the op runner or the layer plan on a
// fake mesh, compared with the single-device hp64 truth and the single-device result of the same
// mode, turned into result rows (results/store.hpp), one per pass x tensor.
#include <string>
#include <vector>

#include "reference/quantize.hpp"
#include "reference/tensor.hpp"
#include "results/store.hpp"
#include "sim/backend/backend.hpp"
#include "sim/sweep/case.hpp"
#include "sim/comm/runtime.hpp"

namespace fp8moe::sim {

// What --save-tensors and --save-blocks write: the outputs with their two references, the
// global inputs, and the inputs' single-device quantization (quantized modes).
struct CaseTensors {
  struct Output {
    std::string name;                   // out, grad_A, ... / y, dx, dw1, ...
    TensorF result, single, hp64;       // the tensor's own shape
  };
  std::vector<Output> outputs;
  std::vector<std::pair<std::string, TensorF>> inputs;  // op: lhs, rhs; layer: x, dy, w1, w2, w3
  struct Operand {
    std::string name;    // A, W, dOut / x, dy, w1, w2, w3
    TensorF x;           // the input in the codes' layout (transposed where the recipe transposes)
    Quantized q;
  };
  std::vector<Operand> quantized;
  std::vector<std::int32_t> offs;
  int block = 128;
};

struct CaseResult {
  std::vector<results::CaseRow> rows;  // one per pass x tensor (one row with tensor "-" on error)
  CaseTensors tensors;                 // filled when asked
  double time_ms = 0;
  bool error = false;
};

// Runs `c` (which must not be rejected) on the mesh runtime `rt` (a FakeCommunicator in this
// process when null). Exceptions inside the case become one `error` row with the message: a sweep
// records them and goes on. With a real runtime every process of the launch calls this for every
// case; only the process holding global rank 0 gets rows (the others get none).
CaseResult run_case(const scenarios::Case& c, bool keep_tensors, MeshRuntime* rt = nullptr);

// One operand quantized on a single device as the pass does it (the K-grouped recipes on the padded
// token groups when padding is on), with the input laid out as its codes.
CaseTensors::Operand quantize_operand(Backend& be, const std::string& name, Recipe r, const TensorF& x,
                                      const std::vector<std::int32_t>& offs, const GemmOptions& g);

// The row fields every row of `c` shares (ids, parameters); metrics left at zero.
results::CaseRow case_row_template(const scenarios::Case& c);

}  // namespace fp8moe::sim
