// GPU data generation (kernels/datagen.hpp) against reference/datagen.hpp: bitwise, for every
// distribution, whole tensors and slices, fp32 and bf16 output. Label gpu: exits 77 without a device.
#include <doctest/doctest.h>

#include <vector>

#include "gpu_compare.hpp"
#include "kernels/datagen.hpp"
#include "reference/datagen.hpp"
#include "support/test_support.hpp"

namespace {

using namespace fp8moe;

TEST_CASE("GPU-generated tensors are bitwise the CPU's for every distribution") {
  const std::uint64_t seed = test::seed_for(511);
  CAPTURE(seed);
  for (Dist d : {Dist::normal, Dist::uniform, Dist::student_t3, Dist::outlier_channels}) {
    CAPTURE(std::string(dist_name(d)));
    for (const std::vector<std::int64_t>& shape : std::vector<std::vector<std::int64_t>>{{257, 1029}, {3, 64, 4096}}) {
      CAPTURE(shape_str(shape));
      const TensorF want = generate(shape, d, seed, kTensorGradOut);
      const std::vector<float> got = kernels::generate_device(shape, d, seed, kTensorGradOut).download();
      const test::Diff diff = test::compare_floats(want.data, got);
      CHECK_MESSAGE(diff.ok(), diff.count, " elements differ; first: ", diff.first_desc);
    }
  }
}

TEST_CASE("GPU generation past one grid (grid-stride loop) is bitwise the CPU's") {
  // generate_kernel launches at most 131072 blocks x 256 threads = 2^25 elements per sweep.
  const std::uint64_t seed = test::seed_for(513);
  CAPTURE(seed);
  const std::vector<std::int64_t> shape{6000, 6000};
  const TensorF want = generate(shape, Dist::normal, seed, kTensorA);
  const test::Diff diff = test::compare_floats(want.data, kernels::generate_device(shape, Dist::normal, seed, kTensorA).download());
  CHECK_MESSAGE(diff.ok(), diff.count, " elements differ; first: ", diff.first_desc);
}

TEST_CASE("a GPU-generated slice is the CPU's slice, also as bf16 bits") {
  const std::uint64_t seed = test::seed_for(512);
  CAPTURE(seed);
  const std::int64_t cols = 777, first = (std::int64_t{1} << 32) - 1000, count = 5000;  // crosses 2^32
  for (Dist d : {Dist::normal, Dist::uniform, Dist::student_t3, Dist::outlier_channels}) {
    CAPTURE(std::string(dist_name(d)));
    std::vector<float> want(static_cast<std::size_t>(count));
    generate_slice(d, seed, kTensorW, cols, first, count, want.data());
    kernels::DeviceBuffer<float> f(static_cast<std::size_t>(count));
    kernels::generate_slice_device<float>(d, seed, kTensorW, cols, first, count, f.get());
    const test::Diff diff = test::compare_floats(want, f.download());
    CHECK_MESSAGE(diff.ok(), diff.count, " elements differ; first: ", diff.first_desc);
    kernels::DeviceBuffer<std::uint16_t> b(static_cast<std::size_t>(count));
    kernels::generate_slice_device<std::uint16_t>(d, seed, kTensorW, cols, first, count, b.get());
    const std::vector<std::uint16_t> bits = b.download();
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < bits.size(); ++i) bad += bits[i] != bf16_bits_rne(want[i]);
    CHECK(bad == 0);
  }
}

}  // namespace
