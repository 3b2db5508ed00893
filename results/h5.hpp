#pragma once
// A small RAII wrapper over the HDF5 C API (reference/SPEC.md 14.1). Every HDF5 call is checked; HDF5's own
// error-stack printing is switched off and failures throw fp8moe::Error with the call, the file
// and the object, e.g. "cannot open dataset 'W' in 'x.h5': no such dataset (datasets here: A, offs)".
//
// The header does not include hdf5.h: ids are plain int64 (hid_t is int64_t in HDF5 >= 1.10,
// static_asserted in h5.cpp), so users of the wrapper need no HDF5 include path of their own.
//
// Reading accepts what PyTorch/h5py users write: float32, float64, float16 (decoded exactly in
// software), and bfloat16 stored as a 2-byte integer dataset marked with the string attribute
// dtype="bfloat16" (numpy has no bfloat16).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/tensor.hpp"

namespace fp8moe::h5 {

using Id = std::int64_t;  // hid_t

// Owns one HDF5 id and closes it with the matching H5?close function. Move-only.
class Handle {
 public:
  using Closer = int (*)(Id);  // herr_t (*)(hid_t)

  Handle() = default;
  Handle(Id id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  Id get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  // Forgets the id without closing it (File::abandon).
  void release() { id_ = -1; }
  // Closes now and reports the close function's status (< 0 on failure); destructors ignore it.
  int reset() {
    int rc = 0;
    if (id_ >= 0 && close_) rc = close_(id_);
    id_ = -1;
    return rc;
  }

 private:
  Id id_ = -1;
  Closer close_ = nullptr;
};

// Something that carries attributes: a group, a file's root group or a dataset. `file` and `path`
// are kept for error messages only.
class Object {
 public:
  Id id() const { return h_.get(); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }  // "/" for the root, "/g/W" below it

  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  // Writing replaces an existing attribute of that name. Strings are fixed-length UTF-8, NUL-padded
  // to a multiple of 32 bytes (so a short status rewritten in place keeps its type; h5py gives them
  // back as bytes), integers int64, vectors 1-D int32. No variable-length string is ever written:
  // libhdf5 reads those from a global heap it does not validate (results/heap_guard.hpp).
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, const char* value) { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, double value);
  void set_attr(const std::string& name, std::int64_t value);
  void set_attr(const std::string& name, int value) { set_attr(name, static_cast<std::int64_t>(value)); }
  void set_attr(const std::string& name, const std::vector<std::int32_t>& value);
  // std::nullopt when absent; Error when present with a type that does not convert.
  // Fixed or variable length; variable-length is refused (Error naming the attribute) on objects of
  // a file opened with File::refuse_variable_strings.
  std::optional<std::string> attr_string(const std::string& name) const;
  std::optional<double> attr_double(const std::string& name) const;        // any float or integer scalar
  std::optional<std::int64_t> attr_int(const std::string& name) const;     // any integer scalar
  std::optional<std::vector<std::int32_t>> attr_i32_vector(const std::string& name) const;  // range-checked

 protected:
  Object() = default;
  Object(Handle h, std::string file, std::string path)
      : h_(std::move(h)), file_(std::move(file)), path_(std::move(path)) {}
  // "W" for a child of the root, "g/W" below it: how messages name objects.
  std::string display() const;
  friend class Group;  // children inherit fixed_strings_only_

  Handle h_;
  std::string file_;
  std::string path_;
  bool fixed_strings_only_ = false;
};

class Dataset : public Object {
 public:
  std::vector<std::int64_t> shape() const;
  // "float32", "float64", "float16", "uint16", "int32", "string", ...: for messages and checks.
  std::string dtype_name() const;
  TensorF read_f32() const;
  Tensor<std::int32_t> read_i32() const;
  // The stored values unconverted: the dataset's type must be exactly T's (class, width and sign;
  // any byte order). T as for Group::write.
  template <class T>
  Tensor<T> read_exact() const;

 private:
  friend class Group;
  Dataset(Handle h, std::string file, std::string path) : Object(std::move(h), std::move(file), std::move(path)) {}
};

class Group : public Object {
 public:
  Group create_group(const std::string& name);
  Group open_group(const std::string& name) const;
  // True when every component of the slash-separated `name` exists (dataset or group).
  bool exists(const std::string& name) const;
  bool is_dataset(const std::string& name) const;
  bool is_group(const std::string& name) const;
  std::vector<std::string> datasets() const;  // names of this group's direct datasets
  std::vector<std::string> groups() const;    // names of this group's direct subgroups

  // Writes a contiguous dataset of the tensor's shape (a rank-0 tensor with one element is a
  // scalar). T: float, double, uint8_t, uint16_t, int32_t, int64_t. Error if `name` exists.
  template <class T>
  Dataset write(const std::string& name, const Tensor<T>& t);
  Dataset open_dataset(const std::string& name) const;

  TensorF read_f32(const std::string& name) const { return open_dataset(name).read_f32(); }
  Tensor<std::int32_t> read_i32(const std::string& name) const { return open_dataset(name).read_i32(); }
  std::vector<std::int64_t> shape(const std::string& name) const { return open_dataset(name).shape(); }
  template <class T>
  Tensor<T> read_exact(const std::string& name) const { return open_dataset(name).template read_exact<T>(); }

 protected:
  Group(Handle h, std::string file, std::string path) : Object(std::move(h), std::move(file), std::move(path)) {}
  std::string child_path(const std::string& name) const;
};

// "1.10.8": the HDF5 library linked in, for provenance attributes (SPEC.md 14.2).
std::string library_version();

class File : public Group {
 public:
  // Truncates an existing file. Written in the HDF5 1.8 file format (object headers with
  // checksums; attributes over 64 KiB, such as a stored scenario text, in dense storage).
  static File create(const std::string& path);
  static File open(const std::string& path, bool writable = false);

  void flush();  // H5Fflush: what was written so far survives a killed writer (SPEC.md 14.1)
  // Flush and close, checked; the destructor closes too but cannot report failure. HDF5's default
  // (weak) close degree keeps the file open while any group or dataset of it is: let those go
  // first where the bytes must be final, e.g. before renaming a temporary file into place.
  void close();
  // Lets the file go without closing it: after a failed write (a full disk) H5Fclose would retry
  // the flush and could write half of the metadata over the last consistent state on disk. HDF5's
  // atexit handler is off (h5.cpp), so the leaked id does no harm at exit.
  void abandon() { h_.release(); }
  // From now on attr_string refuses variable-length strings here and in every group and dataset
  // opened from this file afterwards: for files that must not reach libhdf5's unchecked global-heap
  // reads (fp8moe's sweep results, whose attributes are all fixed-length).
  void refuse_variable_strings() { fixed_strings_only_ = true; }
  // The name messages use, after the file was renamed while open (PATH.tmp -> PATH).
  void set_name(const std::string& path) { file_ = path; }

 private:
  File(Handle h, std::string path) : Group(std::move(h), path, "/") {}
};

}  // namespace fp8moe::h5
