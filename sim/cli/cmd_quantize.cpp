// `fp8moe quantize`: one tensor from an HDF5 file through one blockwise recipe of reference/
// (reference/SPEC.md 3.1, 4.1), written as codes + scales so notebooks can inspect what a kernel would see.
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "reference/checked.hpp"
#include "reference/quantize.hpp"
#include "results/h5.hpp"
#include "results/output_file.hpp"
#include "sim/cli/command.hpp"
#include "sim/cli/flags.hpp"

namespace fp8moe::cli {

namespace {

constexpr const char* kUsage =
    "usage: fp8moe quantize --in FILE.h5 --dataset NAME --recipe 1x128|128x1|128x128 [--block 128]\n"
    "                       [--pow2-scales] [--format e4m3|e5m2] --out OUT.h5 [--force] [--allow-nonfinite]\n"
    "  1x128   activation tiles along the last dim: (M,K) or (E,M,K) -> scales (M,K/B) or (E,M,K/B)\n"
    "  128x1   activation tiles along rows: (M,K) -> scales (ceil(M/B),K)\n"
    "  128x128 weight tiles: (N,K) -> scales (N/B,K/B); (E,N,K) -> (E,N/B,K/B) (forward orientation)";

// "[i,j,k]" of flat index `flat` in a row-major `shape`.
std::string index_str(const std::vector<std::int64_t>& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string out = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) {
    if (d) out += ',';
    out += std::to_string(idx[d]);
  }
  return out + "]";
}

Quantized run_recipe(const std::string& recipe, const TensorF& x, const QuantOptions& opt) {
  if (recipe == "1x128") {
    if (x.rank() == 2) return quantize_act_lhs(x, opt);
    // (E,M,K) -> (E*M,K): the groups run along the last dim, so the experts never mix.
    TensorF flat;
    flat.shape = {x.dim(0) * x.dim(1), x.dim(2)};
    flat.data = x.data;
    Quantized q = quantize_act_lhs(flat, opt);
    q.layout = QuantLayout{true, x.dim(0), x.dim(1), x.dim(2), 1, opt.block};
    q.codes.shape = q.layout.code_shape();
    q.scales.shape = q.layout.scale_shape();
    return q;
  }
  if (recipe == "128x1") {
    if (x.rank() != 2) {
      fail("recipe 128x1 takes a 2-D (M,K) tensor, got shape ", shape_str(x.shape),
           ": quantize one expert's (M,K) slice at a time, or use 1x128 or 128x128 for 3-D data");
    }
    return quantize_act_rhs(x, opt);
  }
  return x.rank() == 2 ? quantize_weight(x, opt) : quantize_grouped_weight(x, WeightOrientation::fwd, opt);
}

void write_output(results::OutputFile& out, const Quantized& q, const QuantOptions& opt, const std::string& recipe,
                  const std::string& in, const std::string& dataset) {
  // Atomic: built in OUT.tmp and published on success, so a failed run never leaves OUT half-written.
  {
    h5::File f = h5::File::create(out.tmp());
    // Dataset handles are temporaries: none may outlive f.close(), or the file stays open past the rename.
    f.write("codes", q.codes).set_attr("format", format_name(opt.format));
    f.write("scales", q.scales).set_attr("meaning", "s_inv, the stored reciprocal scale: value = decode(code) * s_inv");
    f.set_attr("tool", "fp8moe quantize");
    f.set_attr("version", FP8MOE_VERSION);
    f.set_attr("hdf5_version", h5::library_version());
    f.set_attr("recipe", recipe);
    f.set_attr("block", opt.block);
    f.set_attr("format", format_name(opt.format));
    f.set_attr("pow2_scales", opt.pow2_scales ? "true" : "false");  // strings, as `fp8moe gemm --save` writes
    f.set_attr("source_file", in);
    f.set_attr("source_dataset", dataset);
    f.set_attr("elements", q.stats.elements);
    f.set_attr("nonfinite_inputs", q.stats.nonfinite_inputs);
    f.set_attr("underflow", q.stats.underflow);
    f.set_attr("saturated", q.stats.saturated);
    f.set_attr("zero_blocks", q.stats.zero_blocks);
    f.set_attr("status", "complete");  // written last (SPEC.md 14.1)
    f.close();
  }
  out.publish();
}

}  // namespace

int cmd_quantize(const Args& args) {
  po::options_description desc("fp8moe quantize options");
  desc.add_options()
      ("help,h", "show this help")
      ("in", po::value<std::string>()->required(), "input HDF5 file")
      ("dataset", po::value<std::string>()->required(), "dataset to quantize: float32, float16, or bf16 as uint16 "
                                                       "with attribute dtype=\"bfloat16\"")
      ("recipe", po::value<std::string>()->required(), "1x128, 128x1 or 128x128")
      ("block", po::value<std::int64_t>()->default_value(128), "block size: 64, 128 or 256")
      ("pow2-scales", po::bool_switch(), "round the scale multipliers down to powers of two")
      ("format", po::value<std::string>()->default_value("e4m3"), "e4m3 or e5m2")
      ("out", po::value<std::string>()->required(), "output HDF5 file (codes, scales and attributes)")
      ("force", po::bool_switch(), "overwrite an existing --out file (never the --in file)")
      ("allow-nonfinite", po::bool_switch(), "quantize even when the input holds NaN or Inf (they are counted)")
      ("threads", po::value<int>()->default_value(0), "OpenMP threads (0: every core)");
  po::variables_map vm;
  if (!parse(args, desc, vm, kUsage)) return 0;
  set_threads(vm["threads"].as<int>());

  // Options first: a typo fails before any file is read.
  const std::string recipe = vm["recipe"].as<std::string>();
  if (recipe != "1x128" && recipe != "128x1" && recipe != "128x128") {
    fail("unknown recipe '", recipe, "': use 1x128, 128x1 or 128x128");
  }
  QuantOptions opt;
  opt.block = static_cast<int>(int_flag(vm, "block", 1, kInt32Max));
  opt.pow2_scales = vm["pow2-scales"].as<bool>();
  opt.format = parse_format(vm["format"].as<std::string>());
  check_quant_options(opt);
  const std::string in = vm["in"].as<std::string>(), dataset = vm["dataset"].as<std::string>();
  results::OutputRequest req;
  req.path = vm["out"].as<std::string>();
  req.force = vm["force"].as<bool>();
  req.inputs = {in};
  results::OutputFile out(req);  // checked and locked before the input is read

  const TensorF x = h5::File::open(in).read_f32(dataset);
  const std::string where = cat("dataset '", dataset, "' in '", in, "' ", shape_str(x.shape));
  if (x.rank() != 2 && x.rank() != 3) fail(where, ": quantize takes a 2-D (M,K) or 3-D (E,M,K) tensor");

  std::int64_t nonfinite = 0, first = -1;
  for (std::size_t i = 0; i < x.numel(); ++i) {
    if (!std::isfinite(x.data[i])) {
      if (nonfinite++ == 0) first = static_cast<std::int64_t>(i);
    }
  }
  if (nonfinite > 0 && !vm["allow-nonfinite"].as<bool>()) {
    fail(where, " has ", nonfinite, " non-finite value(s) (NaN or Inf), the first at ", index_str(x.shape, first),
         ": pass --allow-nonfinite to quantize anyway");
  }

  Quantized q;
  try {
    q = run_recipe(recipe, x, opt);
  } catch (const Error& e) {
    fail(where, ": ", e.what());  // the quantizer names the dim, its value and the fix; add the source
  }
  write_output(out, q, opt, recipe, in, dataset);

  const double n = static_cast<double>(std::max<std::int64_t>(q.stats.elements, 1));
  fmt::print("{} {} {}: recipe {} block {} {}{}: {} scales {}, underflow {:.3e} ({}), saturated {:.3e} ({}), "
             "non-finite {}, zero blocks {} -> {}\n",
             in, dataset, shape_str(x.shape), recipe, opt.block, format_name(opt.format),
             opt.pow2_scales ? " pow2" : "", q.scales.numel(), shape_str(q.scales.shape),
             static_cast<double>(q.stats.underflow) / n, q.stats.underflow, static_cast<double>(q.stats.saturated) / n,
             q.stats.saturated, q.stats.nonfinite_inputs, q.stats.zero_blocks, req.path);
  return 0;
}

}  // namespace fp8moe::cli
