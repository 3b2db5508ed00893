#pragma once
// The optional per-case datasets of a sweep file (results/SCHEMA.md): /blocks (--save-blocks),
// per-tile error maps of every output and per-block amax/scale/SQNR of every quantized input,
// with HDF5 dimension scales naming each dim; /tensors (--save-tensors), the outputs with their
// two references and the inputs.
#include "results/h5.hpp"
#include "sim/sweep/expand.hpp"
#include "sim/sweep/run_case.hpp"

namespace fp8moe::sim {

void save_blocks(h5::Group g, const scenarios::Case& c, const CaseTensors& t);
void save_tensors(h5::Group g, const scenarios::Case& c, const CaseTensors& t);

// An upper bound of the bytes save_blocks / save_tensors add to the file, reserved before they
// write (a full disk then stops the sweep before a write, results/store.hpp).
std::int64_t saved_bytes_bound(const CaseTensors& t, bool blocks, bool tensors);

}  // namespace fp8moe::sim
