// HDF5 inputs and saved runs of `fp8moe gemm` (the file layout is described in gemm_io.hpp).
#include "sim/cli/gemm_io.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "results/h5.hpp"
#include "sim/sweep/inputs.hpp"

namespace fp8moe::cli {

std::string inputs_file(const std::string& spec) { return sim::inputs_file(spec); }

GemmData load_gemm_inputs(const std::string& spec) {
  // The op-level layout every command reads (sim/sweep/inputs.hpp); gemm counts non-finite values
  // itself (--allow-nonfinite warns instead of refusing).
  const auto t = sim::load_inputs(spec, "op", /*allow_nonfinite=*/true);
  return GemmData{t->A, t->W, t->grad_out, t->offs};
}

namespace {

void write_output(h5::Group& g, const char* name, const std::optional<TensorD>& t, bool fp64) {
  if (!t) return;
  if (fp64) {
    g.write(name, *t);
    return;
  }
  TensorF f;
  f.shape = t->shape;
  f.data.resize(t->numel());
  for (std::size_t i = 0; i < t->numel(); ++i) f.data[i] = static_cast<float>(t->data[i]);  // bf16/fp32 values: exact
  g.write(name, f);
}

}  // namespace

void save_gemm_run(results::OutputFile& out, const GemmData& data, const std::vector<ModeOutputs>& outputs,
                   const std::vector<std::pair<std::string, std::string>>& attrs) {
  const std::string& path = out.path();
  {
    h5::File f = h5::File::create(out.tmp());
    f.write("A", data.A);
    f.write("W", data.W);
    if (data.grad_out.rank() != 0) f.write("grad_out", data.grad_out);
    // Offsets twice: a dataset for xarray/pandas, an attribute for readers that expect one.
    Tensor<std::int32_t> offs({static_cast<std::int64_t>(data.offs.size())});
    offs.data = data.offs;
    f.write("offs", offs);
    f.set_attr("offs", data.offs);
    for (const ModeOutputs& mo : outputs) {
      if (mo.label.empty() || mo.label.find('/') != std::string::npos || mo.label == ".") {
        fail("cannot save mode '", mo.label, "' to '", path, "': a group name must be non-empty and have no '/'");
      }
      h5::Group g = f.create_group(mo.label);
      write_output(g, "out", mo.out, mo.fp64);
      write_output(g, "grad_A", mo.grad_A, mo.fp64);
      write_output(g, "grad_W", mo.grad_W, mo.fp64);
    }
    for (const auto& [k, v] : attrs) f.set_attr(k, v);
    f.set_attr("status", "complete");  // written last (reference/SPEC.md 14.1)
    f.close();
  }
  out.publish();  // a failure above leaves out.tmp() to the OutputFile, which removes it
}

}  // namespace fp8moe::cli
