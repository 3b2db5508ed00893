#include "sim/spec/case_spec.hpp"

#include "reference/error.hpp"

namespace fp8moe::sim {

const char* gather_dtype_name(GatherDtype g) { return g == GatherDtype::bf16 ? "bf16" : "fp8"; }

GatherDtype parse_gather_dtype(const std::string& s) {
  if (s == "bf16") return GatherDtype::bf16;
  if (s == "fp8") return GatherDtype::fp8;
  fail("unknown fsdp gather dtype '", s, "': use bf16 or fp8");
}

}  // namespace fp8moe::sim
