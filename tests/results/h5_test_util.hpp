#pragma once
// Scratch directories and raw HDF5 writes for the results/ and sim/ suites.
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp8moe::test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(std::uint64_t seed) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() / ("fp8moe-test-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter++) + "-" + std::to_string(seed % 1000003));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Writes `n` raw elements of HDF5 type `type` (memory layout = file layout) as a new dataset of
// `dims`: for layouts the wrapper does not write (float16, int16), as h5py or PyTorch would.
inline void write_raw(const std::string& file, const std::string& name, hid_t type,
                      const std::vector<hsize_t>& dims, const void* data) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(f, name.c_str(), type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t w = H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d);
  H5Sclose(s);
  H5Fclose(f);
  if (f < 0 || s < 0 || d < 0 || w < 0) throw std::runtime_error("write_raw failed for " + name + " in " + file);
}

// h5py's float16: an IEEE half built from a copy of float32 (the recipe h5py itself uses).
inline hid_t make_half_type() {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

inline std::vector<std::uint16_t> random_u16(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = static_cast<std::uint16_t>(rng());
  return v;
}

}  // namespace fp8moe::test
