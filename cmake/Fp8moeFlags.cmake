# Compiler flags shared by every fp8moe target.
#
# -ffp-contract=off: bitwise CPU/GPU parity needs every fused multiply-add to be an explicit
# fma() call; the compiler must not contract a*b+c on its own (reference/SPEC.md 7.9).
add_library(fp8moe_flags INTERFACE)
target_compile_options(fp8moe_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off -Wall -Wextra -Wno-unknown-pragmas>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release,RelWithDebInfo>>:-O3 -march=${FP8MOE_MARCH}>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>
)
target_include_directories(fp8moe_flags INTERFACE ${PROJECT_SOURCE_DIR})
target_compile_definitions(fp8moe_flags INTERFACE FP8MOE_VERSION="${PROJECT_VERSION}")
