#pragma once
// The optional per-case datasets of a sweep file (results/SCHEMA.md): /blocks (--save-blocks),
// per-tile error maps of every output and per-block amax/scale/SQNR of every quantized input,
// with HDF5 dimension scales naming each dim; /tensors (--save-tensors), the outputs with their
// two references and the inputs.
#include "results/h5.hpp"
#include "scenarios/expand.hpp"
#include "sim/sweep/run_case.hpp"

namespace fp8moe::sim {

void save_blocks(h5::Group g, const scenarios::Case& c, const CaseTensors& t);
void save_tensors(h5::Group g, const scenarios::Case& c, const CaseTensors& t);

}  // namespace fp8moe::sim
