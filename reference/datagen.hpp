#pragma once
// Tensors and token routings generated from (seed, tensor id, global index) with the keyed
// Philox of reference/random.hpp: any slice of a global tensor can be generated alone.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/random.hpp"
#include "reference/tensor.hpp"

namespace fp8moe {

// Tensor ids: distinct streams for the tensors of one case.
enum TensorId : std::uint32_t { kTensorA = 1, kTensorW = 2, kTensorGradOut = 3, kTensorW3 = 4, kTensorW2 = 5,
                                kRouting = 100 };

// Elements [first, first + count) of a tensor whose last dim has `cols` elements, in bf16 values.
void generate_slice(Dist dist, std::uint64_t seed, std::uint32_t tensor_id, std::int64_t cols, std::int64_t first,
                    std::int64_t count, float* out);
TensorF generate(const std::vector<std::int64_t>& shape, Dist dist, std::uint64_t seed, std::uint32_t tensor_id);

Dist parse_dist(const std::string& s);  // normal | uniform | student-t | outliers
const char* dist_name(Dist d);

// Token routing to experts, as cumulative end offsets (E).
struct Routing {
  enum class Kind { uniform, zipf, balanced } kind = Kind::uniform;
  double zipf_s = 1.0;
  std::vector<int> empty_experts;  // experts forced to receive no tokens
};
Routing parse_routing(const std::string& s);  // "uniform" | "balanced" | "zipf:S" (e.g. zipf:1.2)
std::string routing_name(const Routing& r);
std::vector<std::int32_t> make_offsets(std::int64_t tokens, int experts, const Routing& r, std::uint64_t seed);

// A whole decimal number in [lo, hi], parsed in 64 bits and range-checked before any narrowing
// (experts = 2^32+2 must not run as 2); an Error saying what is wrong with `s` otherwise (the
// caller names the key or flag).
std::int64_t parse_int(const std::string& s, std::int64_t lo, std::int64_t hi);

// "129,384,500" -> {129, 384, 500}; Error naming the bad entry otherwise.
std::vector<std::int32_t> parse_int_list(const std::string& s, const char* what);

}  // namespace fp8moe
