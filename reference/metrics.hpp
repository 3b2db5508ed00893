#pragma once
// Accuracy metrics (reference/SPEC.md 8), all computed in fp64 over every element.
//   SQNR(ref, x) = 20 log10(||ref|| / ||ref - x||); +inf when x equals ref, NaN when either has a
//   non-finite element (NaN never passes a floor).
#include <cstdint>
#include <span>

namespace fp8moe {

struct Metrics {
  double sqnr_db = 0;             // vs the reference
  double rel_err = 0;             // ||ref - x|| / ||ref||
  double max_abs_err = 0;
  double max_ulp = 0;             // largest distance in bf16 ULPs (x and ref rounded to bf16)
  double bitwise_equal_frac = 0;  // fraction of elements whose values are identical
  std::int64_t nonfinite = 0;     // non-finite elements of x
  std::int64_t count = 0;
};

Metrics compare(std::span<const double> ref, std::span<const double> x);
double sqnr_db(std::span<const double> ref, std::span<const double> x);

// Distance between two bf16 values in units in the last place (monotone integer mapping).
std::int64_t bf16_ulp_distance(float a, float b);

}  // namespace fp8moe
