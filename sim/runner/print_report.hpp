#pragma once
// One placement scenario's metrics and diagnostics as text (stdout of `fp8moe run`).
#include <string>

#include "sim/spec/report.hpp"

namespace fp8moe::sim {

std::string format_report(const ScenarioReport& r);
std::string format_db(double db);  // "28.69", "inf", "nan"

}  // namespace fp8moe::sim
