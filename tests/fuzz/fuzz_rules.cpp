// libFuzzer target: a sharding-rule table through the parser and the verifier, the code path of
// `fp8moe rules verify` (parse_rule_table, verify_rules on a mesh of 2 with one small shape set).
// Bad input must end as fp8moe::Error (the CLI's exit 2); any other exception, a crash, a
// sanitizer report, a leak or a hang is a finding. scripts/fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "reference/error.hpp"
#include "sim/rules/rule_table.hpp"
#include "sim/verify/rule_verify.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const fp8moe::sim::RuleTable t = fp8moe::sim::parse_rule_table(text, "fuzz.json");
    // The verifier's logic, not its sizes, is under test: one mesh of 2, 7 tokens in 3 groups
    // (one empty), N = K = 256 (whole blocks on both ranks).
    fp8moe::sim::RuleVerifyOptions opt;
    opt.meshes = {"tp=2"};
    opt.shapes = {{"tiny", {3, 3, 7}, 256, 256}};
    (void)fp8moe::sim::verify_rules(t, opt);
  } catch (const fp8moe::Error&) {
  }
  return 0;
}
