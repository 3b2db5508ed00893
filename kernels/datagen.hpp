#pragma once
// Data generation on the GPU with reference/random.hpp's keyed Philox: element i of tensor t under
// seed s is generate_element(dist, s, t, i, i % cols), so a tensor (or any slice of it) generated
// here is bitwise the one reference/datagen.cpp's generate()/generate_slice() makes.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/check.hpp"
#include "reference/random.hpp"

namespace fp8moe::kernels {

// Elements [first, first + count) of a tensor whose last dim has `cols` elements, into out (count)
// on the device: fp32 values, or (OutT = std::uint16_t) the same bf16 values as raw bits.
template <class OutT>
void generate_slice_device(Dist dist, std::uint64_t seed, std::uint32_t tensor_id, std::int64_t cols,
                           std::int64_t first, std::int64_t count, OutT* out, cudaStream_t stream = nullptr);

// A whole tensor of `shape`, like reference/'s generate().
DeviceBuffer<float> generate_device(const std::vector<std::int64_t>& shape, Dist dist, std::uint64_t seed,
                                    std::uint32_t tensor_id, cudaStream_t stream = nullptr);

}  // namespace fp8moe::kernels
