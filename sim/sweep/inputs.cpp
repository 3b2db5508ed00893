// User tensors as a case's inputs (the layout is described in inputs.hpp).
#include "sim/sweep/inputs.hpp"

#include <cmath>
#include <filesystem>

#include "reference/error.hpp"
#include "reference/groups.hpp"
#include "results/h5.hpp"

namespace fp8moe::sim {

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

// The open file and the group the tensors are in.
struct Opened {
  h5::File file;
  std::optional<h5::Group> sub;
  std::string where;
  const h5::Group& g() const { return sub ? *sub : static_cast<const h5::Group&>(file); }
};

Opened open_spec(const std::string& spec) {
  const Spec s = split_spec(spec);
  Opened o{h5::File::open(s.path, false), std::nullopt, "'" + spec + "'"};
  if (!s.group.empty()) o.sub = o.file.open_group(s.group);
  return o;
}

std::vector<std::int64_t> checked_shape(const h5::Group& g, const std::string& where, const char* name, int rank,
                                        const char* dims) {
  const auto shape = g.shape(name);
  if (static_cast<int>(shape.size()) != rank) {
    fail(where, ": dataset '", name, "' must be ", rank, "-D ", dims, ", got shape ", shape_str(shape));
  }
  return shape;
}

// Reads `name` as float32 after checking its rank, so a wrong file fails before a large read.
TensorF read_checked(const h5::Group& g, const std::string& where, const char* name, int rank, const char* dims) {
  (void)checked_shape(g, where, name, rank, dims);
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

void require_shape(const std::string& where, const char* name, const std::vector<std::int64_t>& got,
                   const std::vector<std::int64_t>& want, const char* dims) {
  if (got != want) fail(where, ": ", name, " must be ", dims, " = ", shape_str(want), ", got ", shape_str(got));
}

// check_offsets with the file named.
void check_offsets_in(const std::string& where, const std::vector<std::int32_t>& offs, std::int64_t M) {
  try {
    check_offsets(offs, M);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
}

void refuse_nonfinite(const std::string& where, const char* name, const TensorF& t, bool allow) {
  std::int64_t bad = 0, first = -1;
  for (std::size_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(t.data[i])) {
      if (first < 0) first = static_cast<std::int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0 || allow) return;
  fail(where, ": ", name, " has ", bad, " non-finite value(s), the first at flat index ", first, " (",
       t.data[static_cast<std::size_t>(first)], "): fix the input, or allow them (--allow-nonfinite) to propagate into the results");
}

}  // namespace

std::string inputs_file(const std::string& spec) { return split_spec(spec).path; }

std::optional<GivenQuantization> read_quantization(const std::string& spec, const std::string& prefix) {
  const Opened o = open_spec(spec);
  const std::string codes = prefix + "_codes", scales = prefix + "_scales";
  if (!o.g().is_dataset(codes) || !o.g().is_dataset(scales)) return std::nullopt;
  return GivenQuantization{o.g().read_exact<std::uint8_t>(codes), o.g().read_exact<float>(scales)};
}

std::vector<std::pair<std::string, TensorF>> read_named(const std::string& spec, const std::vector<std::string>& names) {
  const Opened o = open_spec(spec);
  std::vector<std::pair<std::string, TensorF>> out;
  std::string all;
  for (const std::string& n : names) {
    all += (all.empty() ? "" : ", ") + n;
    if (o.g().is_dataset(n)) out.emplace_back(n, o.g().read_f32(n));
  }
  if (out.empty()) fail(o.where, ": none of the datasets ", all, ": give the outputs under those names");
  return out;
}

InputsShape read_inputs_shape(const std::string& spec) {
  const Opened o = open_spec(spec);
  const h5::Group& g = o.g();
  InputsShape s;
  s.offs = read_offsets(g, o.where);
  s.experts = static_cast<std::int64_t>(s.offs.size());
  s.tokens = s.offs.empty() ? 0 : s.offs.back();
  check_offsets_in(o.where, s.offs, s.tokens);
  s.a = g.exists("A");
  s.w = g.exists("W");
  s.grad_out = g.exists("grad_out");
  if (s.w) {
    const auto w = checked_shape(g, o.where, "W", 3, "(E,N,K)");
    s.n = w[1];
    s.k = w[2];
  }
  if (s.grad_out && !s.n) s.n = checked_shape(g, o.where, "grad_out", 2, "(M,N)")[1];
  if (s.a && !s.k) s.k = checked_shape(g, o.where, "A", 2, "(M,K)")[1];
  if (g.exists("w1")) {
    const auto w = checked_shape(g, o.where, "w1", 3, "(E,H,D)");
    s.hidden = w[1];
    s.dim = w[2];
  }
  s.layer = g.exists("x") && g.exists("w1") && g.exists("w3") && g.exists("w2");
  if (!s.a && !s.w && !s.layer) {
    fail(o.where, ": neither op-level inputs (A, W, grad_out) nor layer-level inputs (x, w1, w3, w2): see the inputs "
         "layout in the README (check your kernel)");
  }
  return s;
}

std::string InputsShape::op_missing(Pass p) const {
  switch (p) {
    case Pass::fwd: return a && w ? "" : "fwd reads A and W";
    case Pass::dgrad: return w ? "" : "dgrad reads grad_out and W (grad_out may be generated)";
    case Pass::wgrad: return a && n ? "" : "wgrad reads grad_out and A (grad_out may be generated when W gives N)";
  }
  return "unknown pass";
}

std::shared_ptr<const GivenTensors> load_inputs(const std::string& spec, const std::string& level,
                                                bool allow_nonfinite) {
  const Opened o = open_spec(spec);
  const h5::Group& g = o.g();
  const std::string& where = o.where;
  auto t = std::make_shared<GivenTensors>();
  t->offs = read_offsets(g, where);
  const std::vector<std::int32_t>& offs = t->offs;
  const std::int64_t E = static_cast<std::int64_t>(offs.size());
  if (level == "op") {
    // Those present, consistent with each other: M from offs, K from A or W, N from W or grad_out.
    const std::int64_t M = offs.empty() ? 0 : offs.back();
    if (g.exists("A")) t->A = read_checked(g, where, "A", 2, "(M,K)");
    if (g.exists("W")) t->W = read_checked(g, where, "W", 3, "(E,N,K)");
    if (g.exists("grad_out")) t->grad_out = read_checked(g, where, "grad_out", 2, "(M,N)");
    const std::int64_t K = t->A.rank() ? t->A.dim(1) : t->W.rank() ? t->W.dim(2) : 0;
    const std::int64_t N = t->W.rank() ? t->W.dim(1) : t->grad_out.rank() ? t->grad_out.dim(1) : 0;
    if (t->A.rank()) require_shape(where, "A", t->A.shape, {M, K}, "(M,K) with M from offs");
    if (t->W.rank()) require_shape(where, "W", t->W.shape, {E, N, K}, "(E,N,K) with E from offs and K from A");
    if (t->grad_out.rank()) require_shape(where, "grad_out", t->grad_out.shape, {M, N}, "(M,N) with M from offs and N from W");
    for (const auto& [name, x] : {std::pair{"A", &t->A}, std::pair{"W", &t->W}, std::pair{"grad_out", &t->grad_out}}) {
      refuse_nonfinite(where, name, *x, allow_nonfinite);
    }
    check_offsets_in(where, offs, M);
    return t;
  }
  t->x = read_checked(g, where, "x", 2, "(M,D)");
  t->w1 = read_checked(g, where, "w1", 3, "(E,H,D)");
  const std::int64_t M = t->x.dim(0), D = t->x.dim(1), H = t->w1.dim(1);
  require_shape(where, "w1", t->w1.shape, {E, H, D}, "(E,H,D) with E from offs and D from x");
  t->w3 = read_checked(g, where, "w3", 3, "(E,H,D)");
  require_shape(where, "w3", t->w3.shape, {E, H, D}, "(E,H,D) like w1");
  t->w2 = read_checked(g, where, "w2", 3, "(E,D,H)");
  require_shape(where, "w2", t->w2.shape, {E, D, H}, "(E,D,H) with H from w1");
  if (g.exists("grad_y")) {
    t->grad_y = read_checked(g, where, "grad_y", 2, "(M,D)");
    require_shape(where, "grad_y", t->grad_y.shape, {M, D}, "(M,D) like x");
  }
  for (const auto& [name, x] : {std::pair{"x", &t->x}, std::pair{"w1", &t->w1}, std::pair{"w3", &t->w3},
                                std::pair{"w2", &t->w2}, std::pair{"grad_y", &t->grad_y}}) {
    refuse_nonfinite(where, name, *x, allow_nonfinite);
  }
  check_offsets_in(where, offs, M);
  return t;
}

}  // namespace fp8moe::sim
