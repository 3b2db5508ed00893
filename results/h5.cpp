// Files, groups and datasets over the HDF5 C API (attributes live in h5_attr.cpp).
#include "results/h5.hpp"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>

#include "results/h5_detail.hpp"

namespace fp8moe::h5 {

namespace detail {

namespace {
// HDF5 1.10's atexit handler closes files left open, and segfaults on one whose H5Fclose failed
// (a full disk: exit 139 after the error was printed, issue 16). Every file is closed by RAII or
// abandoned on purpose before exit, so the handler is switched off; H5dont_atexit only works
// before the library initialises, hence a static initialiser as well as init_library.
[[maybe_unused]] const int kNoAtexit = (H5dont_atexit(), 0);
}  // namespace

void init_library() {
  static const bool done = [] {
    H5dont_atexit();
    if (H5open() < 0) fail("H5open failed: the HDF5 library could not be initialised");
    // Off: every failure is turned into one Error line that names the call, file and object.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

Failure last_failure() {
  std::string desc;
  auto visit = [](unsigned n, const H5E_error2_t* err, void* out) -> herr_t {
    // Walking upward, entry 0 is the innermost frame: the root cause, not the API wrapper.
    if (n == 0 && err->desc) *static_cast<std::string*>(out) = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &desc);
  H5Eclear2(H5E_DEFAULT);
  Failure f;
  // The sec2 driver's write error is several lines with the errno in them ("errno = 28, error
  // message = 'No space left on device', buf = 0x..."): keep the cause, drop the rest.
  const auto at = desc.find("errno = ");
  if (at != std::string::npos) f.err = std::atoi(desc.c_str() + at + 8);
  if (f.err > 0) {
    f.desc = cat(std::strerror(f.err), " (errno ", f.err, ")");
  } else {
    for (char& c : desc) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    f.desc = desc.empty() ? "no reason given by HDF5" : desc;
  }
  return f;
}

std::string last_error() { return last_failure().desc; }

void raise(const std::string& what, const std::string& file, const char* call) {
  const Failure f = last_failure();
  // The system failing a write that was right to try (a full disk, a quota, an I/O error): IoError,
  // exit 1. Other errnos (a missing directory, permissions) are the user's to fix: Error, exit 2.
  if (f.err == ENOSPC || f.err == EDQUOT || f.err == EIO || f.err == EFBIG) {
    fail_io(what, " in '", file, "': ", f.desc, " (", call, " failed)");
  }
  fail(what, " in '", file, "': ", call, " failed (", f.desc, ")");
}

bool is_ieee_half(hid_t type) {
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_size(type) != 2 || H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type) == 15;
}

bool is_bf16_float(hid_t type) {
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_size(type) != 2 || H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && H5Tget_ebias(type) == 127;
}

std::string type_name(hid_t type) {
  const size_t bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      if (is_bf16_float(type)) return "bfloat16";
      return "float" + std::to_string(bits);
    case H5T_INTEGER:
      return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int").append(std::to_string(bits));
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    default: return "non-numeric";
  }
}

}  // namespace detail

using namespace detail;

namespace {

// Memory type (native) and file type (little-endian, what h5py/numpy write) of each element type.
template <class T>
struct Types;
#define FP8MOE_H5_TYPES(T, MEM, FTYPE)     \
  template <>                             \
  struct Types<T> {                       \
    static hid_t mem() { return MEM; }    \
    static hid_t file() { return FTYPE; } \
  };
FP8MOE_H5_TYPES(float, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE)
FP8MOE_H5_TYPES(double, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE)
FP8MOE_H5_TYPES(std::uint8_t, H5T_NATIVE_UINT8, H5T_STD_U8LE)
FP8MOE_H5_TYPES(std::uint16_t, H5T_NATIVE_UINT16, H5T_STD_U16LE)
FP8MOE_H5_TYPES(std::int32_t, H5T_NATIVE_INT32, H5T_STD_I32LE)
FP8MOE_H5_TYPES(std::int64_t, H5T_NATIVE_INT64, H5T_STD_I64LE)
#undef FP8MOE_H5_TYPES

// IEEE half -> fp32, exact: every half is an fp32 (normals re-biased, subnormals mant * 2^-24).
float half_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // Inf, NaN (payload kept)
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

// bfloat16 is the top half of an fp32: the conversion is a shift (as in reference/formats.hpp,
// which results/ may not include).
float bf16_to_f32_bits(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::vector<std::string> split_path(const std::string& name) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : name) {
    if (c == '/') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

// H5Iget_type of the object at `name`, or H5I_BADID when it cannot be opened (dangling link).
H5I_type_t object_kind(hid_t loc, const std::string& name) {
  const hid_t obj = H5Oopen(loc, name.c_str(), H5P_DEFAULT);
  if (obj < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5I_BADID;
  }
  const H5I_type_t t = H5Iget_type(obj);
  H5Oclose(obj);
  return t;
}

}  // namespace

// ---- Group -------------------------------------------------------------------------------

std::string Object::display() const { return path_ == "/" ? "/" : path_.substr(1); }

std::string Group::child_path(const std::string& name) const {
  return path_ == "/" ? "/" + name : path_ + "/" + name;
}

bool Group::exists(const std::string& name) const {
  const auto parts = split_path(name);
  std::string prefix;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) prefix += '/';
    prefix += parts[i];
    const int rc = check(H5Lexists(id(), prefix.c_str(), H5P_DEFAULT),
                         cat("cannot look up '", prefix, "' under '", display(), "'"), file_, "H5Lexists");
    if (rc == 0) return false;
    if (i + 1 < parts.size() && object_kind(id(), prefix) != H5I_GROUP) return false;
  }
  return true;
}

bool Group::is_dataset(const std::string& name) const { return exists(name) && object_kind(id(), name) == H5I_DATASET; }
bool Group::is_group(const std::string& name) const { return exists(name) && object_kind(id(), name) == H5I_GROUP; }

namespace {
std::vector<std::string> children(const Object& g, H5I_type_t kind, const std::string& where) {
  H5G_info_t info;
  check(H5Gget_info(g.id(), &info), cat("cannot list '", where, "'"), g.file(), "H5Gget_info");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) raise(cat("cannot list '", where, "'"), g.file(), "H5Lget_name_by_idx");
    std::string name(static_cast<std::size_t>(len), '\0');
    if (H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT) < 0) {
      raise(cat("cannot list '", where, "'"), g.file(), "H5Lget_name_by_idx");
    }
    if (object_kind(g.id(), name) == kind) out.push_back(name);
  }
  return out;
}
}  // namespace

std::vector<std::string> Group::datasets() const { return children(*this, H5I_DATASET, display()); }
std::vector<std::string> Group::groups() const { return children(*this, H5I_GROUP, display()); }

Group Group::create_group(const std::string& name) {
  const std::string what = cat("cannot create group '", display() == "/" ? name : display() + "/" + name, "'");
  if (exists(name)) fail(what, " in '", file_, "': the name exists already");
  Group g(own(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, what, file_,
               "H5Gcreate2"),
           file_, child_path(name));
  g.fixed_strings_only_ = fixed_strings_only_;
  return g;
}

Group Group::open_group(const std::string& name) const {
  const std::string shown = child_path(name).substr(1);
  const std::string what = cat("cannot open group '", shown, "'");
  if (!exists(name)) {
    const auto here = groups();
    fail(what, " in '", file_, "': no such group (",
         here.empty() ? std::string("there are no groups here") : "groups here: " + quoted_names(here), ")");
  }
  if (object_kind(id(), name) != H5I_GROUP) fail(what, " in '", file_, "': it is not a group");
  Group g(own(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), H5Gclose, what, file_, "H5Gopen2"), file_, child_path(name));
  g.fixed_strings_only_ = fixed_strings_only_;
  return g;
}

Dataset Group::open_dataset(const std::string& name) const {
  const std::string shown = child_path(name).substr(1);
  const std::string what = cat("cannot open dataset '", shown, "'");
  if (!exists(name)) {
    const auto here = datasets();
    fail(what, " in '", file_, "': no such dataset (",
         here.empty() ? std::string("there are no datasets here") : "datasets here: " + quoted_names(here), ")");
  }
  if (object_kind(id(), name) != H5I_DATASET) fail(what, " in '", file_, "': it is a group, not a dataset");
  Dataset d(own(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, what, file_, "H5Dopen2"), file_, child_path(name));
  d.fixed_strings_only_ = fixed_strings_only_;
  return d;
}

template <class T>
Dataset Group::write(const std::string& name, const Tensor<T>& t) {
  const std::string shown = child_path(name).substr(1);
  const std::string what = cat("cannot write dataset '", shown, "'");
  if (Tensor<T>::count(t.shape) != t.numel()) {
    fail(what, " in '", file_, "': the tensor's shape ", shape_str(t.shape), " does not match its ", t.numel(),
         " elements");
  }
  if (exists(name)) fail(what, " in '", file_, "': the name exists already");
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  Handle space = own(dims.empty() ? H5Screate(H5S_SCALAR)
                                  : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                     H5Sclose, what, file_, "H5Screate_simple");
  Handle ds = own(H5Dcreate2(id(), name.c_str(), Types<T>::file(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT),
                  H5Dclose, what, file_, "H5Dcreate2");
  // HDF5 rejects a null buffer even for zero elements; an empty dataset needs no write.
  if (t.numel() > 0) {
    check(H5Dwrite(ds.get(), Types<T>::mem(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.ptr()), what, file_, "H5Dwrite");
  }
  Dataset d(std::move(ds), file_, child_path(name));
  d.fixed_strings_only_ = fixed_strings_only_;
  return d;
}

template Dataset Group::write(const std::string&, const Tensor<float>&);
template Dataset Group::write(const std::string&, const Tensor<double>&);
template Dataset Group::write(const std::string&, const Tensor<std::uint8_t>&);
template Dataset Group::write(const std::string&, const Tensor<std::uint16_t>&);
template Dataset Group::write(const std::string&, const Tensor<std::int32_t>&);
template Dataset Group::write(const std::string&, const Tensor<std::int64_t>&);

// ---- Dataset ----------------------------------------------------------------------------

std::vector<std::int64_t> Dataset::shape() const {
  const std::string what = cat("cannot read the shape of dataset '", display(), "'");
  Handle space = own(H5Dget_space(id()), H5Sclose, what, file_, "H5Dget_space");
  const int rank = check(H5Sget_simple_extent_ndims(space.get()), what, file_, "H5Sget_simple_extent_ndims");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), what, file_, "H5Sget_simple_extent_dims");
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) {
    fail(what, " in '", file_, "': it has no dataspace (H5S_NULL)");
  }
  return {dims.begin(), dims.end()};
}

std::string Dataset::dtype_name() const {
  Handle type = own(H5Dget_type(id()), H5Tclose, cat("cannot read the type of dataset '", display(), "'"), file_,
                    "H5Dget_type");
  return type_name(type.get());
}

namespace {
template <class T>
std::vector<T> read_all(const Dataset& d, hid_t mem_type, std::size_t n, const std::string& what) {
  std::vector<T> buf(n);
  if (n > 0) check(H5Dread(d.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), what, d.file(), "H5Dread");
  return buf;
}
}  // namespace

TensorF Dataset::read_f32() const {
  const std::string what = cat("cannot read dataset '", display(), "'");
  TensorF out(shape());
  const std::size_t n = out.numel();
  Handle type = own(H5Dget_type(id()), H5Tclose, what, file_, "H5Dget_type");
  const hid_t t = type.get();
  const H5T_class_t cls = H5Tget_class(t);
  const size_t size = H5Tget_size(t);
  if (cls == H5T_FLOAT && size == 4) {
    out.data = read_all<float>(*this, H5T_NATIVE_FLOAT, n, what);
  } else if (cls == H5T_FLOAT && size == 8) {
    // fp64 inputs are rounded to nearest fp32: the simulator's inputs are fp32 or bf16 values.
    const auto d = read_all<double>(*this, H5T_NATIVE_DOUBLE, n, what);
    for (std::size_t i = 0; i < n; ++i) out.data[i] = static_cast<float>(d[i]);
  } else if (cls == H5T_FLOAT && (is_ieee_half(t) || is_bf16_float(t))) {
    // Read the raw 2-byte words (only the byte order converted) and decode them exactly here.
    Handle mem = own(H5Tcopy(t), H5Tclose, what, file_, "H5Tcopy");
    check(H5Tset_order(mem.get(), H5T_ORDER_LE), what, file_, "H5Tset_order");
    const auto raw = read_all<std::uint16_t>(*this, mem.get(), n, what);
    const bool half = is_ieee_half(t);
    for (std::size_t i = 0; i < n; ++i) out.data[i] = half ? half_to_f32(raw[i]) : bf16_to_f32_bits(raw[i]);
  } else if (cls == H5T_INTEGER && size == 2) {
    // numpy has no bfloat16: PyTorch users store bf16 bits as (u)int16 and mark the dataset.
    const auto marker = attr_string("dtype");
    if (!marker || *marker != "bfloat16") {
      fail("dataset '", display(), "' in '", file_, "' is ", type_name(t),
           ": if it holds bfloat16 bits, add the string attribute dtype=\"bfloat16\" to it "
           "(h5py: ds.attrs['dtype'] = 'bfloat16')",
           marker ? cat("; its dtype attribute is '", *marker, "'") : std::string());
    }
    const bool is_signed = H5Tget_sign(t) != H5T_SGN_NONE;
    const auto raw = read_all<std::uint16_t>(*this, is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16, n, what);
    for (std::size_t i = 0; i < n; ++i) out.data[i] = bf16_to_f32_bits(raw[i]);  // int16 -> same bits
  } else {
    fail("dataset '", display(), "' in '", file_, "' is ", type_name(t),
         ": expected float32, float64, float16, or bfloat16 bits as uint16 with attribute dtype=\"bfloat16\"");
  }
  return out;
}

Tensor<std::int32_t> Dataset::read_i32() const {
  const std::string what = cat("cannot read dataset '", display(), "'");
  Tensor<std::int32_t> out(shape());
  const std::size_t n = out.numel();
  Handle type = own(H5Dget_type(id()), H5Tclose, what, file_, "H5Dget_type");
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    fail("dataset '", display(), "' in '", file_, "' is ", type_name(type.get()), ": expected an integer dataset");
  }
  constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
  auto range_fail = [&](std::size_t i, auto v) {
    fail("dataset '", display(), "' in '", file_, "': element ", i, " = ", v, " does not fit in int32");
  };
  // Read unsigned 64-bit as such: HDF5's conversion to int64 would clip huge values silently.
  if (H5Tget_sign(type.get()) == H5T_SGN_NONE && H5Tget_size(type.get()) == 8) {
    const auto v = read_all<std::uint64_t>(*this, H5T_NATIVE_UINT64, n, what);
    for (std::size_t i = 0; i < n; ++i) {
      if (v[i] > static_cast<std::uint64_t>(hi)) range_fail(i, v[i]);
      out.data[i] = static_cast<std::int32_t>(v[i]);
    }
  } else {
    const auto v = read_all<std::int64_t>(*this, H5T_NATIVE_INT64, n, what);
    for (std::size_t i = 0; i < n; ++i) {
      if (v[i] < lo || v[i] > hi) range_fail(i, v[i]);
      out.data[i] = static_cast<std::int32_t>(v[i]);
    }
  }
  return out;
}

std::string library_version() {
  unsigned maj = 0, min = 0, rel = 0;
  if (H5get_libversion(&maj, &min, &rel) < 0) fail("H5get_libversion failed (", last_error(), ")");
  return cat(maj, ".", min, ".", rel);
}

template <class T>
Tensor<T> Dataset::read_exact() const {
  const std::string what = cat("cannot read dataset '", display(), "'");
  Handle type = own(H5Dget_type(id()), H5Tclose, what, file_, "H5Dget_type");
  const hid_t t = type.get();
  const bool want_float = std::is_floating_point_v<T>;
  const bool same = H5Tget_class(t) == (want_float ? H5T_FLOAT : H5T_INTEGER) && H5Tget_size(t) == sizeof(T) &&
                    (want_float || (H5Tget_sign(t) == H5T_SGN_NONE) == std::is_unsigned_v<T>);
  if (!same) {
    fail("dataset '", display(), "' in '", file_, "' is ", type_name(t), ", not ", type_name(Types<T>::mem()));
  }
  Tensor<T> out(shape());
  out.data = read_all<T>(*this, Types<T>::mem(), out.numel(), what);
  return out;
}

template TensorF Dataset::read_exact() const;
template TensorD Dataset::read_exact() const;
template TensorU8 Dataset::read_exact() const;
template Tensor<std::uint16_t> Dataset::read_exact() const;
template Tensor<std::int32_t> Dataset::read_exact() const;
template Tensor<std::int64_t> Dataset::read_exact() const;

// ---- File -------------------------------------------------------------------------------

File File::create(const std::string& path) {
  init_library();
  Handle fapl = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create the file", path, "H5Pcreate");
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), "cannot create the file", path,
        "H5Pset_libver_bounds");
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (f < 0) {
    const Failure why = last_failure();
    if (why.err == ENOSPC || why.err == EDQUOT || why.err == EIO) fail_io("cannot create '", path, "': ", why.desc);
    fail("cannot create '", path, "': H5Fcreate failed (", why.desc, ")");
  }
  return File(Handle(f, H5Fclose), path);
}

File File::open(const std::string& path, bool writable) {
  init_library();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("no such file '", path, "'");
  if (std::filesystem::is_directory(path, ec)) fail("'", path, "' is a directory, not an HDF5 file");
  // A FIFO would block the open forever, a device would be read as if it were a file.
  if (!std::filesystem::is_regular_file(path, ec)) fail("'", path, "' is not a regular file, not an HDF5 file");
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_h5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_h5 == 0) fail("'", path, "' is not an HDF5 file");
  if (is_h5 < 0) fail("cannot open '", path, "': H5Fis_hdf5 failed (", last_error(), ")");
  const hid_t f = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail("cannot open '", path, "'", writable ? " for writing" : "", ": H5Fopen failed (", last_error(), ")");
  return File(Handle(f, H5Fclose), path);
}

void File::flush() {
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) raise("cannot write", file_, "H5Fflush");
}

void File::close() {
  if (!h_) return;
  try {
    flush();
  } catch (const Error&) {
    abandon();  // the id is released before the error escapes (a retry at exit crashed HDF5)
    throw;
  }
  if (h_.reset() < 0) raise("cannot close", file_, "H5Fclose");
}

}  // namespace fp8moe::h5
