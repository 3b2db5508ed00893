// The sweep store over the HDF5 C API: the `cases` compound table and the commit protocol.
#include "results/store.hpp"

#include <cstdlib>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <set>

#include "results/h5_detail.hpp"
#include "results/heap_guard.hpp"
#include "results/output_file.hpp"

namespace fp8moe::results {

using namespace fp8moe::h5::detail;

namespace {

// The row as HDF5 sees it in memory: strings as char* (variable-length), numbers as they are.
struct Pod {
#define FP8MOE_S(n) const char* n;
#define FP8MOE_I8(n) std::int8_t n;
#define FP8MOE_I32(n) std::int32_t n;
#define FP8MOE_I64(n) std::int64_t n;
#define FP8MOE_U64(n) std::uint64_t n;
#define FP8MOE_F64(n) double n;
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_I8, FP8MOE_I32, FP8MOE_I64, FP8MOE_U64, FP8MOE_F64)
#undef FP8MOE_S
#undef FP8MOE_I8
#undef FP8MOE_I32
#undef FP8MOE_I64
#undef FP8MOE_U64
#undef FP8MOE_F64
};

constexpr const char* kTable = "cases";
constexpr hsize_t kChunkRows = 256;
// What a commit or a status update can add besides the rows' chunks and strings: chunk-index
// B-tree nodes, object-header continuations, a new global-heap collection (4 KiB each).
constexpr std::int64_t kMetadataSlack = 64 * 1024;

// Memory (native) or file (little-endian) compound type of a row.
h5::Handle row_type(bool file_type, const std::string& path) {
  h5::Handle str = own(H5Tcopy(H5T_C_S1), H5Tclose, "cannot make the string type", path, "H5Tcopy");
  check(H5Tset_size(str.get(), H5T_VARIABLE), "cannot make the string type", path, "H5Tset_size");
  check(H5Tset_cset(str.get(), H5T_CSET_UTF8), "cannot make the string type", path, "H5Tset_cset");
  h5::Handle t = own(H5Tcreate(H5T_COMPOUND, sizeof(Pod)), H5Tclose, "cannot make the cases type", path, "H5Tcreate");
  const hid_t s = str.get();
  const hid_t i8 = file_type ? H5T_STD_I8LE : H5T_NATIVE_INT8, i32 = file_type ? H5T_STD_I32LE : H5T_NATIVE_INT32,
              i64 = file_type ? H5T_STD_I64LE : H5T_NATIVE_INT64, u64 = file_type ? H5T_STD_U64LE : H5T_NATIVE_UINT64,
              f64 = file_type ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
  auto insert = [&](const char* name, std::size_t off, hid_t type) {
    check(H5Tinsert(t.get(), name, off, type), cat("cannot add column '", name, "'"), path, "H5Tinsert");
  };
#define FP8MOE_S(n) insert(#n, offsetof(Pod, n), s);
#define FP8MOE_I8(n) insert(#n, offsetof(Pod, n), i8);
#define FP8MOE_I32(n) insert(#n, offsetof(Pod, n), i32);
#define FP8MOE_I64(n) insert(#n, offsetof(Pod, n), i64);
#define FP8MOE_U64(n) insert(#n, offsetof(Pod, n), u64);
#define FP8MOE_F64(n) insert(#n, offsetof(Pod, n), f64);
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_I8, FP8MOE_I32, FP8MOE_I64, FP8MOE_U64, FP8MOE_F64)
#undef FP8MOE_S
#undef FP8MOE_I8
#undef FP8MOE_I32
#undef FP8MOE_I64
#undef FP8MOE_U64
#undef FP8MOE_F64
  if (file_type) {
    // The file type packs the columns (h5py gives a compact numpy dtype); memory keeps Pod's layout.
    check(H5Tpack(t.get()), "cannot pack the cases type", path, "H5Tpack");
  }
  return t;
}

Pod to_pod(const CaseRow& r) {
  Pod p{};
#define FP8MOE_S(n) p.n = r.n.c_str();
#define FP8MOE_N(n) p.n = r.n;
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N)
#undef FP8MOE_S
#undef FP8MOE_N
  return p;
}

CaseRow from_pod(const Pod& p) {
  CaseRow r;
#define FP8MOE_S(n) r.n = p.n ? p.n : "";
#define FP8MOE_N(n) r.n = p.n;
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N)
#undef FP8MOE_S
#undef FP8MOE_N
  return r;
}

h5::Handle open_table(const h5::File& f) {
  if (!f.is_dataset(kTable)) fail("'", f.file(), "' has no 'cases' table: it is not a complete fp8moe sweep file");
  return own(H5Dopen2(f.id(), kTable, H5P_DEFAULT), H5Dclose, "cannot open the cases table", f.file(), "H5Dopen2");
}

hsize_t table_rows(hid_t ds, const std::string& path) {
  h5::Handle space = own(H5Dget_space(ds), H5Sclose, "cannot read the cases table's size", path, "H5Dget_space");
  hsize_t n = 0;
  check(H5Sget_simple_extent_dims(space.get(), &n, nullptr), "cannot read the cases table's size", path,
        "H5Sget_simple_extent_dims");
  return n;
}

// Files written before 2026-12-05 spell a promoted mode "hopper-tc/cublas" in `mode` and
// `case_key`; fp8moe now writes "hopper-tc:cublas" everywhere (flags, groups, table). Old rows are
// read in the new spelling so that a baseline, a gate and a resumed sweep see one name.
CaseRow canonical_mode_spelling(CaseRow r) {
  for (const std::string m : {"promote-fp32/", "hopper-tc/"}) {
    if (r.mode.starts_with(m)) r.mode[m.size() - 1] = ':';
    const std::string key = "mode=" + m;
    for (std::size_t at = r.case_key.find(key); at != std::string::npos; at = r.case_key.find(key, at + key.size())) {
      r.case_key[at + key.size() - 1] = ':';
    }
  }
  return r;
}

std::vector<CaseRow> read_rows(hid_t ds, hsize_t n, const std::string& path) {
  std::vector<CaseRow> out;
  if (n == 0) return out;
  h5::Handle mem = row_type(false, path);
  std::vector<Pod> pods(n);
  h5::Handle fspace = own(H5Dget_space(ds), H5Sclose, "cannot read the cases table", path, "H5Dget_space");
  const hsize_t start = 0;
  check(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr), "cannot read the cases table",
        path, "H5Sselect_hyperslab");
  h5::Handle mspace = own(H5Screate_simple(1, &n, nullptr), H5Sclose, "cannot read the cases table", path, "H5Screate_simple");
  // libhdf5 trusts the global heap behind the strings: check it first (heap_guard.hpp).
  check_vlen_strings(ds, n, path);
  if (H5Dread(ds, mem.get(), mspace.get(), fspace.get(), H5P_DEFAULT, pods.data()) < 0) {
    // Strings of the rows read before the failure are HDF5's allocations: free them first
    // (found by tests/fuzz's result-file reader as a leak).
    H5Dvlen_reclaim(mem.get(), mspace.get(), H5P_DEFAULT, pods.data());
    check(-1, "cannot read the cases table (its columns are not fp8moe's)", path, "H5Dread");
  }
  out.reserve(n);
  for (const Pod& p : pods) out.push_back(canonical_mode_spelling(from_pod(p)));
  H5Dvlen_reclaim(mem.get(), mspace.get(), H5P_DEFAULT, pods.data());
  return out;
}

std::int64_t attr_int_or(const h5::Object& o, const char* name, std::int64_t dflt) {
  const auto v = o.attr_int(name);
  return v ? *v : dflt;
}

}  // namespace

const std::vector<std::string>& case_columns() {
  static const std::vector<std::string> cols = [] {
    std::vector<std::string> c;
#define FP8MOE_C(n) c.push_back(#n);
    FP8MOE_CASE_COLUMNS(FP8MOE_C, FP8MOE_C, FP8MOE_C, FP8MOE_C, FP8MOE_C, FP8MOE_C)
#undef FP8MOE_C
    return c;
  }();
  return cols;
}

std::optional<double> column_number(const CaseRow& r, const std::string& column) {
#define FP8MOE_S(n)
#define FP8MOE_N(n) \
  if (column == #n) return static_cast<double>(r.n);
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N)
#undef FP8MOE_S
#undef FP8MOE_N
  return std::nullopt;
}

std::optional<std::string> column_text(const CaseRow& r, const std::string& column) {
#define FP8MOE_S(n) \
  if (column == #n) return r.n;
#define FP8MOE_I(n) \
  if (column == #n) return std::to_string(r.n);
#define FP8MOE_F(n)                                                           \
  if (column == #n) {                                                         \
    if (std::isnan(r.n)) return std::string("nan");                          \
    if (std::isinf(r.n)) return std::string(r.n > 0 ? "inf" : "-inf");       \
    char buf[64];                                                             \
    std::snprintf(buf, sizeof buf, "%.17g", r.n);                             \
    return std::string(buf);                                                  \
  }
  FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_I, FP8MOE_I, FP8MOE_I, FP8MOE_I, FP8MOE_F)
#undef FP8MOE_S
#undef FP8MOE_I
#undef FP8MOE_F
  return std::nullopt;
}

std::string case_group_name(std::int64_t case_id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "case_%06lld", static_cast<long long>(case_id));
  return buf;
}

SweepWriter SweepWriter::create(const std::string& path, const Attrs& provenance, std::int64_t cases_total) {
  // The caller builds it as PATH.tmp and renames it once its header is flushed (OutputFile): a
  // kill during creation leaves no half-made PATH (the open file follows the rename).
  SweepWriter w(h5::File::create(path), path);
  h5::File& f = w.file_;
  w.dirty_ = true;
  f.set_attr("format", kFormatTag);
  f.set_attr("schema_version", kSchemaVersion);
  f.set_attr("status", "running");
  f.set_attr("status_message", "");
  for (const auto& [k, v] : provenance) {
    // The counts are numbers (SCHEMA.md), the rest text.
    static const std::set<std::string> kNumeric{"git_dirty", "cpu_cores", "omp_threads", "launch_world"};
    char* end = nullptr;
    const long long n = kNumeric.count(k) && !v.empty() ? std::strtoll(v.c_str(), &end, 10) : 0;
    if (kNumeric.count(k) && end && *end == '\0') {
      f.set_attr(k, static_cast<std::int64_t>(n));
    } else {
      f.set_attr(k, v);
    }
  }
  f.set_attr("cases_total", cases_total);
  f.set_attr("cases_done", std::int64_t{0});
  f.set_attr("rows_committed", std::int64_t{0});

  h5::Handle ftype = row_type(true, path);
  const hsize_t zero = 0, unlimited = H5S_UNLIMITED;
  h5::Handle space = own(H5Screate_simple(1, &zero, &unlimited), H5Sclose, "cannot create the cases table", path,
                         "H5Screate_simple");
  h5::Handle dcpl = own(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create the cases table", path, "H5Pcreate");
  check(H5Pset_chunk(dcpl.get(), 1, &kChunkRows), "cannot create the cases table", path, "H5Pset_chunk");
  h5::Handle ds = own(H5Dcreate2(f.id(), kTable, ftype.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                      H5Dclose, "cannot create the cases table", path, "H5Dcreate2");
  w.row_bytes_ = static_cast<std::int64_t>(H5Tget_size(ftype.get()));
  f.flush();
  w.dirty_ = false;
  return w;
}

void SweepWriter::moved_to(const std::string& path) {
  disk_ = path;
  file_.set_name(path);
}

void SweepWriter::reserve(std::int64_t bytes, const std::string& what) {
  const std::int64_t target = file_size(disk_) + bytes;
  if (const int e = try_reserve_space(disk_, target)) {
    const std::set<std::int64_t>& ids = case_ids_;
    fail_io("cannot write ", what, " to '", file_.file(), "': ", errno_message(e), " (reserving ", (bytes + 1023) / 1024,
            " KiB); the file keeps its ", ids.size(), " committed case(s): free space, then fp8moe sweep --resume ",
            file_.file());
  }
}

std::int64_t SweepWriter::commit_bytes(const std::vector<CaseRow>& rows) const {
  const auto ceil_chunks = [](std::int64_t n) { return (n + static_cast<std::int64_t>(kChunkRows) - 1) / kChunkRows; };
  const std::int64_t end = committed_ + static_cast<std::int64_t>(rows.size());
  const std::int64_t chunks = ceil_chunks(end) - ceil_chunks(committed_);
  std::int64_t strings = 0;
  for (const CaseRow& r : rows) {
#define FP8MOE_S(n) strings += static_cast<std::int64_t>(r.n.size()) + 32;
#define FP8MOE_N(n)
    FP8MOE_CASE_COLUMNS(FP8MOE_S, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N, FP8MOE_N)
#undef FP8MOE_S
#undef FP8MOE_N
  }
  return chunks * static_cast<std::int64_t>(kChunkRows) * row_bytes_ + 2 * strings + kMetadataSlack;
}

SweepWriter SweepWriter::resume(const std::string& path) {
  { (void)open_sweep(path); }  // the checks, read-only, before anything is changed
  SweepWriter w(h5::File::open(path, /*writable=*/true), path);
  h5::File& f = w.file_;
  const std::int64_t committed = attr_int_or(f, "rows_committed", 0);
  {
    h5::Handle ds = open_table(f);
    check_fill_value(ds.get(), path);  // before H5Dset_extent and the writes that fill chunks
    const hsize_t n = table_rows(ds.get(), path);
    if (committed < 0 || static_cast<std::int64_t>(n) < committed) {
      fail("'", path, "' is a corrupt fp8moe sweep file: it claims ", committed, " committed rows but its table has ", n,
           ": it cannot be resumed; rerun the sweep");
    }
    {
      h5::Handle ftype = own(H5Dget_type(ds.get()), H5Tclose, "cannot read the cases table's type", path, "H5Dget_type");
      w.row_bytes_ = static_cast<std::int64_t>(H5Tget_size(ftype.get()));
    }
    w.reserve(kMetadataSlack, "the resumed status");
    w.dirty_ = true;
    if (static_cast<std::int64_t>(n) > committed) {
      const hsize_t keep = static_cast<hsize_t>(committed);
      check(H5Dset_extent(ds.get(), &keep), "cannot drop the cut-off case's rows", path, "H5Dset_extent");
    }
    w.rows_ = read_rows(ds.get(), static_cast<hsize_t>(committed), path);
    for (const CaseRow& r : w.rows_) w.case_ids_.insert(r.case_id);
  }
  w.committed_ = committed;
  std::set<std::string> done;
  for (const CaseRow& r : w.rows_) done.insert(case_group_name(r.case_id));
  for (const char* kind : {"blocks", "tensors"}) {
    if (!f.is_group(kind)) continue;
    const h5::Group g = f.open_group(kind);
    for (const std::string& name : g.groups()) {
      if (done.count(name)) continue;
      const std::string p = std::string("/") + kind + "/" + name;
      check(H5Ldelete(f.id(), p.c_str(), H5P_DEFAULT), cat("cannot drop the cut-off group '", p, "'"), path, "H5Ldelete");
    }
  }
  f.set_attr("status", "running");
  f.set_attr("status_message", "");
  f.flush();
  w.dirty_ = false;
  return w;
}

h5::Group SweepWriter::case_group(const std::string& kind, std::int64_t case_id) {
  dirty_ = true;
  if (!file_.is_group(kind)) (void)file_.create_group(kind);
  h5::Group parent = file_.open_group(kind);
  const std::string name = case_group_name(case_id);
  if (parent.is_group(name)) {
    fail("'", file_.file(), "' has a group ", kind, "/", name, " already: was this case run twice?");
  }
  return parent.create_group(name);
}

void SweepWriter::commit(const std::vector<CaseRow>& rows) {
  const std::string& path = file_.file();
  const std::int64_t id = rows.empty() ? -1 : rows.front().case_id;
  reserve(commit_bytes(rows), id < 0 ? std::string("the case counters") : cat("case ", id));
  dirty_ = true;
  if (!rows.empty()) {
    h5::Handle ds = open_table(file_);
    h5::Handle mem = row_type(false, path);
    std::vector<Pod> pods;
    pods.reserve(rows.size());
    for (const CaseRow& r : rows) pods.push_back(to_pod(r));
    const hsize_t start = static_cast<hsize_t>(committed_), count = rows.size(), total = start + count;
    check(H5Dset_extent(ds.get(), &total), "cannot grow the cases table", path, "H5Dset_extent");
    h5::Handle fspace = own(H5Dget_space(ds.get()), H5Sclose, "cannot write the cases table", path, "H5Dget_space");
    check(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
          "cannot write the cases table", path, "H5Sselect_hyperslab");
    h5::Handle mspace = own(H5Screate_simple(1, &count, nullptr), H5Sclose, "cannot write the cases table", path,
                            "H5Screate_simple");
    check(H5Dwrite(ds.get(), mem.get(), mspace.get(), fspace.get(), H5P_DEFAULT, pods.data()),
          "cannot write the cases table", path, "H5Dwrite");
    committed_ = static_cast<std::int64_t>(total);
    rows_.insert(rows_.end(), rows.begin(), rows.end());
    for (const CaseRow& r : rows) case_ids_.insert(r.case_id);
  }
  file_.set_attr("rows_committed", committed_);
  file_.set_attr("cases_done", static_cast<std::int64_t>(case_ids_.size()));
  file_.flush();
  dirty_ = false;
}

void SweepWriter::copy_group(const h5::File& src, const std::string& path) {
  const auto slash = path.find('/', 1);
  if (path.empty() || path[0] != '/' || slash == std::string::npos) fail("copy_group: '", path, "' is not /kind/name");
  const std::string kind = path.substr(1, slash - 1);
  if (!file_.is_group(kind)) (void)file_.create_group(kind);
  if (file_.exists(path.substr(1))) fail("'", file_.file(), "' has ", path, " already: two inputs hold the same case");
  dirty_ = true;
  check(H5Ocopy(src.id(), path.c_str(), file_.id(), path.c_str(), H5P_DEFAULT, H5P_DEFAULT),
        cat("cannot copy ", path, " from '", src.file(), "'"), file_.file(), "H5Ocopy");
}

void SweepWriter::finish(const std::string& status, const std::string& message) {
  reserve(kMetadataSlack + 2 * static_cast<std::int64_t>(message.size()), cat("the final status '", status, "'"));
  dirty_ = true;
  file_.set_attr("status_message", message);
  file_.set_attr("status", status);
  file_.close();
  dirty_ = false;
}

void SweepWriter::fail_quietly(const std::string& message) noexcept {
  try {
    if (dirty_) {
      file_.abandon();  // what is on disk is the last flush; closing would write over it
      return;
    }
    finish("failed", message);
  } catch (const std::exception&) {
    // No room for the status even: close untouched (nothing is dirty), or abandon if that fails.
    try {
      if (dirty_) {
        file_.abandon();
      } else {
        file_.close();
      }
    } catch (const std::exception&) {
    }
  }
}

h5::File open_sweep(const std::string& path) {
  h5::File f = h5::File::open(path);
  // Schema 2 holds fixed-length string attributes only; refusing variable-length ones keeps every
  // attribute read away from libhdf5's unchecked global heap (the table's strings are checked by
  // heap_guard before they are read).
  f.refuse_variable_strings();
  const std::int64_t v = attr_int_or(f, "schema_version", 0);
  if (v > kSchemaVersion) fail("'", path, "' has schema version ", v, ", newer than this fp8moe's ", kSchemaVersion, ": update fp8moe");
  if (v == 1) {
    fail("'", path, "' is an fp8moe sweep result of schema 1 (fp8moe before 2026-12-05), whose variable-length string "
         "attributes this fp8moe does not read (libhdf5 cannot read them safely from a damaged file): rerun the sweep "
         "with this fp8moe, or read the old file with h5py (notebooks/fp8moe_results.py reads both)");
  }
  const auto tag = f.has_attr("format") ? f.attr_string("format") : std::nullopt;
  if (!tag || *tag != kFormatTag) {
    fail("'", path, "' is not an fp8moe sweep result (no root attribute format = ", kFormatTag,
         "): give a file written by `fp8moe sweep`");
  }
  return f;
}

std::string attr_text_or(const h5::File& f, const std::string& name, const std::string& dflt) {
  try {
    return f.attr_string(name).value_or(dflt);
  } catch (const Error&) {
    return dflt;
  }
}

std::string sweep_status(const h5::File& f) { return attr_text_or(f, "status", "incomplete"); }

std::vector<CaseRow> read_cases(const h5::File& f) {
  h5::Handle ds = open_table(f);
  check_fill_value(ds.get(), f.file());
  const hsize_t n = table_rows(ds.get(), f.file());
  const std::int64_t committed = attr_int_or(f, "rows_committed", static_cast<std::int64_t>(n));
  if (committed < 0) {
    fail("'", f.file(), "' is a corrupt fp8moe sweep file: rows_committed = ", committed, ": rerun the sweep");
  }
  return read_rows(ds.get(), std::min<hsize_t>(n, static_cast<hsize_t>(committed)), f.file());
}

}  // namespace fp8moe::results
