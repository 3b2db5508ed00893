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

namespace fp8moe::cli {

namespace {

struct Spec {
  std::string path;
  std::string group;  // empty: the root group
};

// "FILE.h5" or "FILE.h5:GROUP". Group labels may contain ':' themselves ("promote-fp32:cublas"),
// so the file is the shortest prefix before a ':' that exists as a file.
Spec split_spec(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(spec, ec)) return {spec, ""};
  for (std::size_t pos = spec.find(':'); pos != std::string::npos; pos = spec.find(':', pos + 1)) {
    if (std::filesystem::is_regular_file(spec.substr(0, pos), ec)) return {spec.substr(0, pos), spec.substr(pos + 1)};
  }
  // Nothing exists: let File::open report the part before the first ':' as the missing file.
  const std::size_t pos = spec.find(':');
  return pos == std::string::npos ? Spec{spec, ""} : Spec{spec.substr(0, pos), spec.substr(pos + 1)};
}

// Reads `name` as float32 after checking its rank, so a wrong file fails before a large read.
TensorF read_checked(const h5::Group& g, const std::string& where, const char* name, int rank, const char* dims) {
  const auto shape = g.shape(name);
  if (static_cast<int>(shape.size()) != rank) {
    fail(where, ": dataset '", name, "' must be ", rank, "-D ", dims, ", got shape ", shape_str(shape));
  }
  return g.read_f32(name);
}

std::vector<std::int32_t> read_offsets(const h5::Group& g, const std::string& where) {
  std::optional<std::vector<std::int32_t>> from_dataset;
  if (g.is_dataset("offs")) {
    const Tensor<std::int32_t> t = g.read_i32("offs");
    if (t.rank() != 1) fail(where, ": dataset 'offs' must be 1-D (E), got shape ", shape_str(t.shape));
    from_dataset = t.data;
  }
  const auto from_attr = g.attr_i32_vector("offs");
  if (from_dataset && from_attr && *from_dataset != *from_attr) {
    fail(where, ": the dataset 'offs' and the attribute 'offs' disagree: remove one of them");
  }
  if (from_dataset) return *from_dataset;
  if (from_attr) return *from_attr;
  fail(where, ": no token offsets: give int32 cumulative end offsets (E) as a dataset 'offs' or as an attribute "
       "'offs' of the group");
}

}  // namespace

std::string inputs_file(const std::string& spec) { return split_spec(spec).path; }

GemmData load_gemm_inputs(const std::string& spec) {
  const Spec s = split_spec(spec);
  const h5::File file = h5::File::open(s.path, false);
  std::optional<h5::Group> sub;
  if (!s.group.empty()) sub = file.open_group(s.group);
  const h5::Group& g = sub ? *sub : static_cast<const h5::Group&>(file);
  const std::string where = "'" + spec + "'";

  GemmData d;
  d.A = read_checked(g, where, "A", 2, "(M,K)");
  d.W = read_checked(g, where, "W", 3, "(E,N,K)");
  const std::int64_t M = d.A.dim(0), K = d.A.dim(1), E = d.W.dim(0), N = d.W.dim(1);
  if (d.W.dim(2) != K) {
    fail(where, ": A is (M,K) = ", shape_str(d.A.shape), " but W is (E,N,K) = ", shape_str(d.W.shape),
         ": their K differ (", K, " vs ", d.W.dim(2), ")");
  }
  // grad_out is optional: the caller generates one when the file has none (rank 0 marks it).
  if (g.exists("grad_out")) {
    d.grad_out = read_checked(g, where, "grad_out", 2, "(M,N)");
    if (d.grad_out.dim(0) != M || d.grad_out.dim(1) != N) {
      fail(where, ": grad_out must be (M,N) = ", shape_str({M, N}), " (M from A ", shape_str(d.A.shape),
           ", N from W ", shape_str(d.W.shape), "), got ", shape_str(d.grad_out.shape));
    }
  }
  d.offs = read_offsets(g, where);
  if (static_cast<std::int64_t>(d.offs.size()) != E) {
    fail(where, ": offs has ", d.offs.size(), " entries but W ", shape_str(d.W.shape), " has E = ", E,
         " experts: give one cumulative end offset per expert");
  }
  try {
    check_offsets(d.offs, M);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return d;
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
