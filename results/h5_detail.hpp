#pragma once
// Internals shared by h5.cpp and h5_attr.cpp: the checked-call helpers and HDF5 type mapping.
// Not part of the public API (it includes hdf5.h).
#include <hdf5.h>

#include <string>
#include <type_traits>

#include "reference/error.hpp"
#include "results/h5.hpp"

namespace fp8moe::h5::detail {

static_assert(std::is_same_v<hid_t, Id>, "h5.hpp assumes hid_t is int64_t (HDF5 >= 1.10)");
static_assert(std::is_same_v<herr_t, int>, "h5.hpp assumes herr_t is int");

// Switches HDF5's automatic error printing off once: errors reach the user as one Error line.
void init_library();

// The innermost description on HDF5's error stack (the root cause) on one line, and the errno
// when a system call failed; clears the stack.
struct Failure {
  std::string desc;
  int err = 0;
};
Failure last_failure();
std::string last_error();

// Throws "<what> in '<file>': <call> failed (<HDF5's reason>)"; IoError "<what> in '<file>':
// No space left on device (errno 28) (<call> failed)" when the system refused a read or write.
[[noreturn]] void raise(const std::string& what, const std::string& file, const char* call);

// Checks an id-returning call and wraps the id in a Handle with its close function.
inline Handle own(hid_t id, Handle::Closer close, const std::string& what, const std::string& file,
                  const char* call) {
  if (id < 0) raise(what, file, call);
  return Handle(id, close);
}

// Checks an herr_t/htri_t-returning call; returns the value (htri_t: > 0 true, 0 false).
inline int check(int rc, const std::string& what, const std::string& file, const char* call) {
  if (rc < 0) raise(what, file, call);
  return rc;
}

// "float32", "uint16", "bfloat16" (a 2-byte float with bf16's layout), "string", ...
std::string type_name(hid_t type);

// True for a 2-byte IEEE half (h5py's float16); `bf16` for a 2-byte float laid out like bfloat16.
bool is_ieee_half(hid_t type);
bool is_bf16_float(hid_t type);

inline std::string quoted_names(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  return out;
}

}  // namespace fp8moe::h5::detail
