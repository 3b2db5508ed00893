#include "reference/datagen.hpp"

#include <cmath>
#include <sstream>

#include "reference/checked.hpp"

namespace fp8moe {

void generate_slice(Dist dist, std::uint64_t seed, std::uint32_t tensor_id, std::int64_t cols, std::int64_t first,
                    std::int64_t count, float* out) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t idx = first + i;
    out[i] = generate_element(dist, seed, tensor_id, static_cast<std::uint64_t>(idx),
                              static_cast<std::uint64_t>(cols > 0 ? idx % cols : 0));
  }
}

TensorF generate(const std::vector<std::int64_t>& shape, Dist dist, std::uint64_t seed, std::uint32_t tensor_id) {
  TensorF t(shape);
  const std::int64_t cols = shape.empty() ? 1 : shape.back();
  generate_slice(dist, seed, tensor_id, cols, 0, static_cast<std::int64_t>(t.numel()), t.ptr());
  return t;
}

Dist parse_dist(const std::string& s) {
  if (s == "normal") return Dist::normal;
  if (s == "uniform") return Dist::uniform;
  if (s == "student-t" || s == "student-t3" || s == "heavy") return Dist::student_t3;
  if (s == "outliers" || s == "outlier-channels") return Dist::outlier_channels;
  fail("unknown distribution '", s, "': use normal, uniform, student-t or outliers");
}

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::normal: return "normal";
    case Dist::uniform: return "uniform";
    case Dist::student_t3: return "student-t";
    case Dist::outlier_channels: return "outliers";
  }
  return "?";
}

Routing parse_routing(const std::string& s) {
  Routing r;
  if (s == "uniform") {
    r.kind = Routing::Kind::uniform;
  } else if (s == "balanced") {
    r.kind = Routing::Kind::balanced;
  } else if (s.rfind("zipf:", 0) == 0) {
    r.kind = Routing::Kind::zipf;
    try {
      std::size_t used = 0;
      r.zipf_s = std::stod(s.substr(5), &used);
      if (used != s.size() - 5) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      fail("bad routing '", s, "': the Zipf exponent must be a number, e.g. zipf:1.2");
    }
    if (!(r.zipf_s >= 0.0) || !std::isfinite(r.zipf_s)) fail("bad routing '", s, "': the Zipf exponent must be >= 0");
  } else {
    fail("unknown routing '", s, "': use uniform, balanced or zipf:S (e.g. zipf:1.2), or give --offs");
  }
  return r;
}

std::string routing_name(const Routing& r) {
  std::ostringstream os;
  if (r.kind == Routing::Kind::uniform) os << "uniform";
  else if (r.kind == Routing::Kind::balanced) os << "balanced";
  else os << "zipf:" << r.zipf_s;
  return os.str();
}

std::vector<std::int32_t> make_offsets(std::int64_t tokens, int experts, const Routing& r, std::uint64_t seed) {
  if (experts < 1) fail("the number of experts must be >= 1, got ", experts);
  if (tokens < 0) fail("the number of tokens must be >= 0, got ", tokens);
  // offs are int32 (reference/SPEC.md 5.1): more tokens would wrap the cumulative ends at 2^31. Checked
  // before the per-token loop below, which a larger count would also keep busy for hours.
  if (tokens > kInt32Max) {
    fail("tokens = ", tokens, " exceeds the limit ", kInt32Max, " of int32 token offsets (reference/SPEC.md 5.1): use fewer tokens");
  }
  std::vector<double> weight(static_cast<std::size_t>(experts), 1.0);
  if (r.kind == Routing::Kind::zipf) {
    for (int e = 0; e < experts; ++e) weight[static_cast<std::size_t>(e)] = std::pow(e + 1.0, -r.zipf_s);
  }
  for (int e : r.empty_experts) {
    if (e < 0 || e >= experts) fail("empty expert ", e, " is out of range [0, ", experts, ")");
    weight[static_cast<std::size_t>(e)] = 0.0;
  }
  double total = 0;
  for (double w : weight) total += w;
  if (total <= 0 && tokens > 0) fail("every expert is empty but there are ", tokens, " tokens to route");
  std::vector<std::int64_t> counts(static_cast<std::size_t>(experts), 0);
  if (r.kind == Routing::Kind::balanced) {
    // Equal shares among the non-empty experts, the remainder to the first ones.
    std::vector<int> live;
    for (int e = 0; e < experts; ++e) {
      if (weight[static_cast<std::size_t>(e)] > 0) live.push_back(e);
    }
    for (std::size_t i = 0; i < live.size(); ++i) {
      counts[static_cast<std::size_t>(live[i])] =
          tokens / static_cast<std::int64_t>(live.size()) + (static_cast<std::int64_t>(i) < tokens % static_cast<std::int64_t>(live.size()) ? 1 : 0);
    }
  } else {
    // Each token draws its expert from the weights with a keyed uniform: the routing of token t
    // depends on (seed, t) only.
    std::vector<double> cdf(static_cast<std::size_t>(experts));
    double acc = 0;
    for (int e = 0; e < experts; ++e) cdf[static_cast<std::size_t>(e)] = (acc += weight[static_cast<std::size_t>(e)] / total);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const double u = uniform_open01(keyed_random(seed, kRouting, static_cast<std::uint64_t>(t), 0).v[0]);
      int e = 0;
      while (e < experts - 1 && (u >= cdf[static_cast<std::size_t>(e)] || weight[static_cast<std::size_t>(e)] == 0)) ++e;
      while (weight[static_cast<std::size_t>(e)] == 0 && e > 0) --e;  // rounding at the top of the cdf
      ++counts[static_cast<std::size_t>(e)];
    }
  }
  std::vector<std::int32_t> offs(static_cast<std::size_t>(experts));
  std::int64_t end = 0;
  for (int e = 0; e < experts; ++e) {
    end += counts[static_cast<std::size_t>(e)];
    offs[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(end);
  }
  return offs;
}

std::int64_t parse_int(const std::string& s, std::int64_t lo, std::int64_t hi) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(s, &used);
  } catch (const std::out_of_range&) {
    fail("'", s, "' is beyond 64 bits: use at most ", hi);
  } catch (const std::exception&) {
    fail("'", s, "' is not an integer");
  }
  if (used != s.size()) fail("'", s, "' is not an integer");
  if (x < lo) fail(lo == 0 ? cat("'", s, "' is not a non-negative integer") : cat("must be >= ", lo));
  if (x > hi) fail("exceeds the limit ", hi, ": use at most ", hi);
  return x;
}

std::vector<std::int32_t> parse_int_list(const std::string& s, const char* what) {
  std::vector<std::int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument(item);
      out.push_back(static_cast<std::int32_t>(v));
    } catch (const std::exception&) {
      fail("bad ", what, " entry '", item, "' in '", s, "': give comma-separated integers, e.g. 129,384,500");
    }
  }
  if (out.empty()) fail("empty ", what, ": give comma-separated integers, e.g. 129,384,500");
  return out;
}

}  // namespace fp8moe
