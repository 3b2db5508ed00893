// libFuzzer target: a scenario file through the parser and the expander, the code path of
// `fp8moe list` (parse_scenario_text, expand, each case's key, placements and table row).
// Bad input must end as fp8moe::Error (the CLI's exit 2); any other exception, a crash, a
// sanitizer report, a leak or a hang is a finding. scripts/fuzz.sh runs it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "reference/error.hpp"
#include "sim/sweep/expand.hpp"
#include "scenarios/scenario.hpp"
#include "sim/sweep/run_case.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto file = fp8moe::scenarios::parse_scenario_text(text, "fuzz.ini");
    fp8moe::scenarios::ExpandOptions opt;
    // The expander's logic, not the size of its limits, is under test: a small machine and few
    // cases keep one input well inside the 10 s hang limit under ASan (the CLI suite
    // test_cli_limits checks the real limits).
    opt.host_memory = std::int64_t{1} << 30;
    opt.max_cases = 2000;
    const auto ex = fp8moe::scenarios::expand({file}, opt);
    std::size_t chars = 0;
    for (const auto& c : ex.cases) {
      chars += c.key().size() + c.placements().size();
      chars += fp8moe::sim::case_row_template(c).placements.size();
    }
    (void)chars;
  } catch (const fp8moe::Error&) {
  }
  return 0;
}
