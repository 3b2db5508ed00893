// Attributes of groups, files and datasets: scalar strings, doubles, int64 and 1-D int32 vectors.
#include <cstring>
#include <limits>

#include "results/h5.hpp"
#include "results/h5_detail.hpp"

namespace fp8moe::h5 {

using namespace detail;

namespace {

std::string attr_label(const std::string& name, const std::string& owner) {
  return cat("attribute '", name, "' of ", owner == "/" ? std::string("the root group") : "'" + owner + "'");
}

// Creates (replacing any old one) an attribute of `type` over `space` and writes `buf`.
void write_attr(const Object& o, const std::string& name, const std::string& owner, hid_t type, hid_t space,
                hid_t mem_type, const void* buf) {
  const std::string what = cat("cannot write ", attr_label(name, owner));
  if (check(H5Aexists(o.id(), name.c_str()), what, o.file(), "H5Aexists") > 0) {
    // Same type and shape: overwrite in place, so a writer killed mid-update never leaves the
    // attribute missing (the sweep store updates its counters after every case).
    Handle old = own(H5Aopen(o.id(), name.c_str(), H5P_DEFAULT), H5Aclose, what, o.file(), "H5Aopen");
    Handle old_type = own(H5Aget_type(old.get()), H5Tclose, what, o.file(), "H5Aget_type");
    Handle old_space = own(H5Aget_space(old.get()), H5Sclose, what, o.file(), "H5Aget_space");
    if (H5Tequal(old_type.get(), type) > 0 && H5Sextent_equal(old_space.get(), space) > 0) {
      check(H5Awrite(old.get(), mem_type, buf), what, o.file(), "H5Awrite");
      return;
    }
    old.reset();
    check(H5Adelete(o.id(), name.c_str()), what, o.file(), "H5Adelete");
  }
  Handle a = own(H5Acreate2(o.id(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, what, o.file(),
                 "H5Acreate2");
  check(H5Awrite(a.get(), mem_type, buf), what, o.file(), "H5Awrite");
}

struct OpenAttr {
  Handle attr, type;
  H5T_class_t cls;
  hssize_t count;  // number of elements
  int rank;
};

std::optional<OpenAttr> open_attr(const Object& o, const std::string& name, const std::string& owner) {
  const std::string what = cat("cannot read ", attr_label(name, owner));
  if (check(H5Aexists(o.id(), name.c_str()), what, o.file(), "H5Aexists") == 0) return std::nullopt;
  OpenAttr r;
  r.attr = own(H5Aopen(o.id(), name.c_str(), H5P_DEFAULT), H5Aclose, what, o.file(), "H5Aopen");
  r.type = own(H5Aget_type(r.attr.get()), H5Tclose, what, o.file(), "H5Aget_type");
  Handle space = own(H5Aget_space(r.attr.get()), H5Sclose, what, o.file(), "H5Aget_space");
  r.cls = H5Tget_class(r.type.get());
  r.count = H5Sget_simple_extent_npoints(space.get());
  r.rank = check(H5Sget_simple_extent_ndims(space.get()), what, o.file(), "H5Sget_simple_extent_ndims");
  if (r.count < 0) raise(what, o.file(), "H5Sget_simple_extent_npoints");
  return r;
}

[[noreturn]] void wrong_attr(const Object& o, const std::string& name, const std::string& owner, const OpenAttr& a,
                             const char* expected) {
  fail(attr_label(name, owner), " in '", o.file(), "' is ", type_name(a.type.get()), " with ", a.count,
       " element(s): expected ", expected);
}

}  // namespace

bool Object::has_attr(const std::string& name) const {
  return check(H5Aexists(id(), name.c_str()), cat("cannot read ", attr_label(name, display())), file_, "H5Aexists") > 0;
}

std::vector<std::string> Object::attr_names() const {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* n, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(n);
    return 0;
  };
  check(H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, visit, &names),
        cat("cannot list the attributes of '", display(), "'"), file_, "H5Aiterate2");
  return names;
}

void Object::set_attr(const std::string& name, const std::string& value) {
  const std::string what = cat("cannot write ", attr_label(name, display()));
  // Fixed-length UTF-8, NUL-padded to a multiple of 32 bytes: "running" -> "complete" keeps the type,
  // so write_attr overwrites in place. (A variable-length string would put the text in the global
  // heap, which libhdf5 reads unchecked: see results/heap_guard.hpp.)
  const std::size_t width = (value.size() / 32 + 1) * 32;
  std::string padded = value;
  padded.resize(width, '\0');
  Handle type = own(H5Tcopy(H5T_C_S1), H5Tclose, what, file_, "H5Tcopy");
  check(H5Tset_size(type.get(), width), what, file_, "H5Tset_size");
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), what, file_, "H5Tset_strpad");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), what, file_, "H5Tset_cset");
  Handle space = own(H5Screate(H5S_SCALAR), H5Sclose, what, file_, "H5Screate");
  write_attr(*this, name, display(), type.get(), space.get(), type.get(), padded.data());
}

void Object::set_attr(const std::string& name, double value) {
  Handle space = own(H5Screate(H5S_SCALAR), H5Sclose, cat("cannot write ", attr_label(name, display())), file_,
                     "H5Screate");
  write_attr(*this, name, display(), H5T_IEEE_F64LE, space.get(), H5T_NATIVE_DOUBLE, &value);
}

void Object::set_attr(const std::string& name, std::int64_t value) {
  Handle space = own(H5Screate(H5S_SCALAR), H5Sclose, cat("cannot write ", attr_label(name, display())), file_,
                     "H5Screate");
  write_attr(*this, name, display(), H5T_STD_I64LE, space.get(), H5T_NATIVE_INT64, &value);
}

void Object::set_attr(const std::string& name, const std::vector<std::int32_t>& value) {
  const hsize_t n = value.size();
  // A zero-length simple dataspace is legal for attributes; HDF5 still wants a non-null buffer.
  const std::int32_t dummy = 0;
  Handle space = own(H5Screate_simple(1, &n, nullptr), H5Sclose, cat("cannot write ", attr_label(name, display())),
                     file_, "H5Screate_simple");
  write_attr(*this, name, display(), H5T_STD_I32LE, space.get(), H5T_NATIVE_INT32,
             value.empty() ? &dummy : value.data());
}

std::optional<std::string> Object::attr_string(const std::string& name) const {
  auto a = open_attr(*this, name, display());
  if (!a) return std::nullopt;
  if (a->cls != H5T_STRING || a->count != 1) wrong_attr(*this, name, display(), *a, "one string");
  const std::string what = cat("cannot read ", attr_label(name, display()));
  Handle mem = own(H5Tcopy(H5T_C_S1), H5Tclose, what, file_, "H5Tcopy");
  check(H5Tset_cset(mem.get(), H5Tget_cset(a->type.get())), what, file_, "H5Tset_cset");
  const int variable = check(H5Tis_variable_str(a->type.get()), what, file_, "H5Tis_variable_str");
  if (variable > 0) {
    if (fixed_strings_only_) {
      fail(attr_label(name, display()), " in '", file_, "' is a variable-length string, which this file must not hold: "
           "libhdf5 reads those from a global heap it does not check, so a damaged one can crash fp8moe. fp8moe writes "
           "fixed-length strings only (schema 2); a file written before (schema 1) must be rerun, and an attribute "
           "added with h5py must be a fixed-length one (numpy.bytes_ or h5py.string_dtype(length=N))");
    }
    check(H5Tset_size(mem.get(), H5T_VARIABLE), what, file_, "H5Tset_size");
    char* ptr = nullptr;
    check(H5Aread(a->attr.get(), mem.get(), &ptr), what, file_, "H5Aread");
    std::string out = ptr ? ptr : "";
    H5free_memory(ptr);
    return out;
  }
  // Fixed length: one byte more than stored so a NUL-padded full-width string keeps every char.
  const size_t size = H5Tget_size(a->type.get());
  constexpr size_t kMaxText = size_t{64} << 20;  // four times the largest scenario text fp8moe stores
  if (size == 0 || size > kMaxText) {
    fail(attr_label(name, display()), " in '", file_, "' claims a string of ", size, " bytes (at most ", kMaxText,
         " expected): the file is damaged");
  }
  check(H5Tset_size(mem.get(), size + 1), what, file_, "H5Tset_size");
  std::string buf(size + 1, '\0');
  check(H5Aread(a->attr.get(), mem.get(), buf.data()), what, file_, "H5Aread");
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

std::optional<double> Object::attr_double(const std::string& name) const {
  auto a = open_attr(*this, name, display());
  if (!a) return std::nullopt;
  if ((a->cls != H5T_FLOAT && a->cls != H5T_INTEGER) || a->count != 1) {
    wrong_attr(*this, name, display(), *a, "one number");
  }
  double v = 0;
  check(H5Aread(a->attr.get(), H5T_NATIVE_DOUBLE, &v), cat("cannot read ", attr_label(name, display())), file_,
        "H5Aread");
  return v;
}

std::optional<std::int64_t> Object::attr_int(const std::string& name) const {
  auto a = open_attr(*this, name, display());
  if (!a) return std::nullopt;
  if (a->cls != H5T_INTEGER || a->count != 1) wrong_attr(*this, name, display(), *a, "one integer");
  std::int64_t v = 0;
  check(H5Aread(a->attr.get(), H5T_NATIVE_INT64, &v), cat("cannot read ", attr_label(name, display())), file_,
        "H5Aread");
  return v;
}

std::optional<std::vector<std::int32_t>> Object::attr_i32_vector(const std::string& name) const {
  auto a = open_attr(*this, name, display());
  if (!a) return std::nullopt;
  if (a->cls != H5T_INTEGER || a->rank > 1) wrong_attr(*this, name, display(), *a, "a 1-D integer vector");
  std::vector<std::int64_t> wide(static_cast<std::size_t>(a->count));
  const bool u64 = H5Tget_sign(a->type.get()) == H5T_SGN_NONE && H5Tget_size(a->type.get()) == 8;
  if (!wide.empty()) {
    check(H5Aread(a->attr.get(), u64 ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, wide.data()),
          cat("cannot read ", attr_label(name, display())), file_, "H5Aread");
  }
  std::vector<std::int32_t> out(wide.size());
  for (std::size_t i = 0; i < wide.size(); ++i) {
    // An unsigned 64-bit value above INT64_MAX lands negative here and fails the check too.
    const bool bad = u64 ? static_cast<std::uint64_t>(wide[i]) > std::numeric_limits<std::int32_t>::max()
                         : wide[i] < std::numeric_limits<std::int32_t>::min() ||
                               wide[i] > std::numeric_limits<std::int32_t>::max();
    if (bad) {
      fail(attr_label(name, display()), " in '", file_, "': element ", i, " = ",
           u64 ? std::to_string(static_cast<std::uint64_t>(wide[i])) : std::to_string(wide[i]),
           " does not fit in int32");
    }
    out[i] = static_cast<std::int32_t>(wide[i]);
  }
  return out;
}

}  // namespace fp8moe::h5
