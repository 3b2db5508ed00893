// results/heap_guard: a damaged global heap behind the cases table's strings is refused with one
// message instead of reaching libhdf5 (which hangs, overflows a buffer or segfaults on it; the
// fuzzer's three findings are replayed here). Each damage is applied to a fresh file of random
// rows, and the undamaged file must read back exactly what was written.
#include <doctest/doctest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "reference/error.hpp"
#include "results/h5_test_util.hpp"
#include "results/store.hpp"
#include "support/test_support.hpp"

namespace {

using fp8moe::results::CaseRow;

std::vector<unsigned char> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<unsigned char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
std::uint64_t get_le(const std::vector<unsigned char>& b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[at + static_cast<std::size_t>(i)];
  return v;
}
void put_le(std::vector<unsigned char>& b, std::size_t at, int n, std::uint64_t v) {
  for (int i = 0; i < n; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
}

// Random text from an alphabet without 'G' (so "GCOL" can only be a collection's signature),
// lengths from empty to past one 4 KiB collection.
std::string random_text(std::mt19937_64& rng) {
  static const char alphabet[] = "abcdefhijklmnopqrstuvwxyz0123456789 =,[]()/:;.";
  std::uniform_int_distribution<int> len_pick(0, 9);
  const int pick = len_pick(rng);
  const std::size_t len = pick == 0 ? 0 : pick < 8 ? std::uniform_int_distribution<std::size_t>(1, 200)(rng)
                                                   : std::uniform_int_distribution<std::size_t>(3000, 9000)(rng);
  std::uniform_int_distribution<std::size_t> ch(0, sizeof alphabet - 2);
  std::string s(len, ' ');
  for (char& c : s) c = alphabet[ch(rng)];
  return s;
}

std::vector<CaseRow> random_rows(std::uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<CaseRow> rows(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    CaseRow& r = rows[static_cast<std::size_t>(i)];
    r.case_id = i / 3;
    r.case_key = random_text(rng);
    r.scenario = random_text(rng);
    r.placements = random_text(rng);
    r.message = random_text(rng);
    r.offs = random_text(rng);
    r.status = "ok";
    r.sqnr_db = std::uniform_real_distribution<double>(-10, 200)(rng);
    r.seed = rng();
  }
  return rows;
}

std::string write_sweep(const fp8moe::test::TempDir& dir, const std::vector<CaseRow>& rows) {
  const std::string path = dir.file("sweep.h5");
  auto w = fp8moe::results::SweepWriter::create(path, {{"tool_version", "test"}}, static_cast<std::int64_t>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); i += 3) {
    w.commit(std::vector<CaseRow>(rows.begin() + static_cast<std::ptrdiff_t>(i),
                                  rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + 3))));
  }
  w.finish("complete", "");
  return path;
}

// The collections in the file: offsets of "GCOL" followed by version 1.
std::vector<std::size_t> collections(const std::vector<unsigned char>& b) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i + 16 <= b.size(); ++i) {
    if (std::memcmp(&b[i], "GCOL", 4) == 0 && b[i + 4] == 1) at.push_back(i);
  }
  return at;
}

struct HeapObject {
  std::size_t at;  // the object header's offset in the file
  std::uint32_t index;
  std::uint64_t size;
};
// Walks one collection as the HDF5 file format specification lays it out (8-byte lengths).
std::vector<HeapObject> objects(const std::vector<unsigned char>& b, std::size_t col) {
  const std::uint64_t size = get_le(b, col + 8, 8);
  std::vector<HeapObject> out;
  std::size_t p = col + 16;
  while (p + 16 <= col + size) {
    const HeapObject o{p, static_cast<std::uint32_t>(get_le(b, p, 2)), get_le(b, p + 8, 8)};
    out.push_back(o);
    if (o.index == 0) break;  // free space runs to the end
    p += 16 + (o.size + 7) / 8 * 8;
  }
  return out;
}

// The table read as `report` and `--resume` do (`sweep` = false: without open_sweep's checks of
// the attributes, for the schema-1 artifacts whose attributes are variable-length).
std::string read_error(const std::string& path, bool sweep = true) {
  try {
    const auto f = sweep ? fp8moe::results::open_sweep(path) : fp8moe::h5::File::open(path);
    (void)fp8moe::results::read_cases(f);
  } catch (const fp8moe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("undamaged random rows read back exactly, strings and numbers") {
  const std::uint64_t seed = fp8moe::test::seed_for(161);
  INFO("seed " << seed);
  fp8moe::test::TempDir dir(seed);
  const auto rows = random_rows(seed, 40);
  const std::string path = write_sweep(dir, rows);
  REQUIRE(collections(slurp(path)).size() >= 2);  // long strings spill into further collections
  const auto back = fp8moe::results::read_cases(fp8moe::results::open_sweep(path));
  REQUIRE(back.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(back[i].case_key == rows[i].case_key);
    CHECK(back[i].scenario == rows[i].scenario);
    CHECK(back[i].placements == rows[i].placements);
    CHECK(back[i].message == rows[i].message);
    CHECK(back[i].offs == rows[i].offs);
    CHECK(back[i].seed == rows[i].seed);
    CHECK(back[i].sqnr_db == rows[i].sqnr_db);
  }
}

TEST_CASE("each kind of global-heap damage is refused with a message naming the file and the damage") {
  const std::uint64_t seed = fp8moe::test::seed_for(162);
  INFO("seed " << seed);
  fp8moe::test::TempDir dir(seed);
  const std::string path = write_sweep(dir, random_rows(seed, 40));
  const auto clean = slurp(path);
  // A collection with a free-space object at its end and an object whose size is not a multiple of
  // 8 minus one (so that size + 1 keeps its padded slot: the walk stays intact and only the size
  // check can catch that damage).
  std::size_t col = 0;
  HeapObject first{}, free_space{};
  bool found = false;
  for (const std::size_t c : collections(clean)) {
    const auto objs = objects(clean, c);
    if (objs.empty() || objs.back().index != 0) continue;
    for (const HeapObject& o : objs) {
      if (o.index > 0 && o.size % 8 != 0 && o.size % 8 != 7) {
        col = c, first = o, free_space = objs.back(), found = true;
        break;
      }
    }
    if (found) break;
  }
  REQUIRE(found);

  struct Damage {
    const char* name;
    void (*apply)(std::vector<unsigned char>&, std::size_t col, const HeapObject& first, const HeapObject& free_space);
    const char* expect;
  };
  const Damage damages[] = {
      {"signature zeroed (libhdf5 re-reads it for every string: minutes)",
       [](auto& b, std::size_t c, const HeapObject&, const HeapObject&) { std::memset(&b[c], 0, 4); }, "no GCOL signature"},
      {"version 2", [](auto& b, std::size_t c, const HeapObject&, const HeapObject&) { b[c + 4] = 2; }, "has version 2"},
      {"object size far past the collection (libhdf5 memcpys it: overflow)",
       [](auto& b, std::size_t, const HeapObject& o, const HeapObject&) { put_le(b, o.at + 8, 8, std::uint64_t{365072220167}); },
       "larger than the collection"},
      {"object size one more than its string (libhdf5 writes past the string's buffer)",
       [](auto& b, std::size_t, const HeapObject& o, const HeapObject&) { put_le(b, o.at + 8, 8, o.size + 1); },
       "heap object holds"},
      {"free-space object of size 0 (libhdf5's parser loops forever)",
       [](auto& b, std::size_t, const HeapObject&, const HeapObject& f) { put_le(b, f.at + 8, 8, 0); }, "would loop"},
      {"object renumbered (a string's object is missing)",
       [](auto& b, std::size_t, const HeapObject& o, const HeapObject&) { put_le(b, o.at, 2, 60000); }, "no such object"},
      {"collection size past the end of the file",
       [](auto& b, std::size_t c, const HeapObject&, const HeapObject&) { put_le(b, c + 8, 8, b.size()); },
       "past the end of the file"},
      {"collection size below libhdf5's minimum",
       [](auto& b, std::size_t c, const HeapObject&, const HeapObject&) { put_le(b, c + 8, 8, 64); }, "claims 64 bytes"},
  };
  for (const Damage& d : damages) {
    const std::string label = d.name;
    INFO("damage: " << label);
    MESSAGE("damage: " << label);
    auto bytes = clean;
    d.apply(bytes, col, first, free_space);
    const std::string damaged = dir.file("damaged.h5");
    spit(damaged, bytes);
    const std::string err = read_error(damaged);
    CHECK(err.find(d.expect) != std::string::npos);
    CHECK(err.find(damaged) != std::string::npos);
    CHECK(err.find("is damaged") != std::string::npos);
  }
}

TEST_CASE("an empty string's descriptor is checked too: libhdf5 reads its heap object whatever the length") {
  // Found by CI's run of fuzz_results (SEGV in H5HG_read): libhdf5 1.10 reads the heap object of
  // every descriptor with a non-zero collection address, an empty string's too (H5T__conv_vlen
  // calls the read for a length of 0), and H5HG_read indexes the collection's object table with
  // the descriptor's index unchecked. The guard used to skip descriptors of length 0.
  const std::uint64_t seed = fp8moe::test::seed_for(164);
  INFO("seed " << seed);
  fp8moe::test::TempDir dir(seed);
  const std::string path = write_sweep(dir, random_rows(seed, 40));
  auto bytes = slurp(path);
  // An empty string's descriptor: {length 0, a collection's address, the index of one of its
  // objects of size 0}, found in the table's chunks by its bytes.
  std::size_t at = 0;
  for (const std::size_t c : collections(bytes)) {
    for (const HeapObject& o : objects(bytes, c)) {
      if (o.index == 0 || o.size != 0) continue;
      std::vector<unsigned char> d(16, 0);
      for (int i = 0; i < 8; ++i) d[4 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(c >> (8 * i));
      for (int i = 0; i < 4; ++i) d[12 + static_cast<std::size_t>(i)] = static_cast<unsigned char>(o.index >> (8 * i));
      const auto it = std::search(bytes.begin(), bytes.end(), d.begin(), d.end());
      if (it != bytes.end()) at = static_cast<std::size_t>(it - bytes.begin());
      if (at) break;
    }
    if (at) break;
  }
  REQUIRE_MESSAGE(at != 0, "no empty string among the random rows (seed " << seed << ")");
  put_le(bytes, at + 12, 4, 4000000000u);  // an index far past the collection's objects
  const std::string damaged = dir.file("damaged.h5");
  spit(damaged, bytes);
  const std::string err = read_error(damaged);
  CHECK(err.find("names object 4000000000") != std::string::npos);
  CHECK(err.find("no such object") != std::string::npos);
  CHECK(err.find(damaged) != std::string::npos);
  // The undamaged file still reads, its empty strings empty.
  const auto back = fp8moe::results::read_cases(fp8moe::results::open_sweep(path));
  CHECK(back.size() == 40);
}

TEST_CASE("a cases table with a fill value is refused before libhdf5 converts it (read and resume)") {
  // fp8moe never sets a fill value; libhdf5 would convert a defined one's strings through the
  // global heap unchecked (H5Dget_create_plist, and every chunk a resumed sweep's write fills).
  // The table is rebuilt here with one, as a damaged fill message would read.
  const std::uint64_t seed = fp8moe::test::seed_for(165);
  INFO("seed " << seed);
  fp8moe::test::TempDir dir(seed);
  const std::string path = write_sweep(dir, random_rows(seed, 7));
  CHECK(read_error(path).empty());  // fp8moe's own file passes the check
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    const hid_t old = H5Dopen2(f, "cases", H5P_DEFAULT);
    const hid_t type = H5Dget_type(old);  // strings as char*: a fill buffer of that layout
    const hid_t space = H5Dget_space(old);
    const std::size_t size = H5Tget_size(type);
    std::vector<unsigned char> fill(size, 0);
    static const char kText[] = "fill";
    for (unsigned m = 0; m < static_cast<unsigned>(H5Tget_nmembers(type)); ++m) {
      const hid_t mt = H5Tget_member_type(type, m);
      if (H5Tget_class(mt) == H5T_STRING && H5Tis_variable_str(mt) > 0) {
        const char* ptr = kText;
        std::memcpy(&fill[H5Tget_member_offset(type, m)], &ptr, sizeof ptr);
      }
      H5Tclose(mt);
    }
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk = 256;
    REQUIRE(H5Pset_chunk(dcpl, 1, &chunk) >= 0);
    REQUIRE(H5Pset_fill_value(dcpl, type, fill.data()) >= 0);
    const hid_t made = H5Dcreate2(f, "cases_filled", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(made >= 0);
    H5Dclose(made);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(old);
    REQUIRE(H5Ldelete(f, "cases", H5P_DEFAULT) >= 0);
    REQUIRE(H5Lmove(f, "cases_filled", f, "cases", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
  }
  const std::string err = read_error(path);
  CHECK(err.find("a fill value, which fp8moe never sets") != std::string::npos);
  CHECK(err.find(path) != std::string::npos);
  std::string resume_err;
  try {
    (void)fp8moe::results::SweepWriter::resume(path);
  } catch (const fp8moe::Error& e) {
    resume_err = e.what();
  }
  CHECK(resume_err.find("a fill value, which fp8moe never sets") != std::string::npos);
}

TEST_CASE("the result-file fuzzer's libhdf5 findings are refused, not crashed on") {
  // tests/results/damaged/*.h5.xz: libFuzzer artifacts of fuzz_results (issue 16), schema-1 files
  // (variable-length attributes, refused by open_sweep since schema 2), so their table is read
  // directly, as the schema-1 reader did. Before the guard: `fp8moe report` spun for minutes on the first, segfaulted on the second (an ASan heap
  // overflow reading 365072220167 bytes) and leaked on the third.
  const char* cases[][2] = {
      {"fuzz_results-timeout-hdf5-global-heap.h5.xz", "would loop"},
      {"fuzz_results-overflow-hdf5-global-heap.h5.xz", "larger than the collection"},
      {"fuzz_results-leak-read_rows-vlen.h5.xz", "no GCOL signature"},
      // Found against the guard's first version, which read chunks with H5Dread_chunk: libhdf5
      // wrote the index's 129085 bytes into a buffer of the chunk's 129024 (ASan overflow).
      {"fuzz_results-overflow-hdf5-read-chunk.h5.xz", "129085 bytes stored, 129024 expected"},
  };
  fp8moe::test::TempDir dir(fp8moe::test::seed_for(163));
  for (const auto& c : cases) {
    INFO("artifact " << c[0]);
    const std::string xz = std::string(FP8MOE_TEST_DATA_DIR) + "/damaged/" + c[0];
    const std::string h5 = dir.file("artifact.h5");
    const std::string cmd = "xz -dc '" + xz + "' > '" + h5 + "'";
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "needs xz (xz-utils) and " << xz);
    const bool schema1 = std::string(c[0]).find("read-chunk") == std::string::npos;
    if (schema1) CHECK(read_error(h5).find("schema 1") != std::string::npos);  // written before schema 2
    const std::string err = read_error(h5, /*sweep=*/!schema1);
    CHECK(err.find(c[1]) != std::string::npos);
    CHECK(err.find("is damaged") != std::string::npos);
  }
}

TEST_CASE("string attributes: fixed-length up to a 16 MiB scenario text: variable-length refused in sweep files only") {
  const std::uint64_t seed = fp8moe::test::seed_for(164);
  INFO("seed " << seed);
  fp8moe::test::TempDir dir(seed);
  std::mt19937_64 rng(seed);
  const std::string path = write_sweep(dir, random_rows(seed, 3));
  {
    // Sizes around the 32-byte padding steps, the 64 KiB compact-attribute limit, and the largest
    // scenario text fp8moe stores (16 MiB), with multi-byte UTF-8.
    auto f = fp8moe::h5::File::open(path, /*writable=*/true);
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{65537},
                                std::size_t{16} << 20}) {
      std::string v(n, 'x');
      for (std::size_t i = 0; i + 2 <= n; i += 97) v.replace(i, 2, "\xc3\xa9");
      if (n > 0) v[std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)] = 'q';
      f.set_attr("text_" + std::to_string(n), v);
      CHECK(f.attr_string("text_" + std::to_string(n)) == v);
    }
    f.set_attr("status", "running");
    f.set_attr("status", "complete");  // rewritten in place, same padded type
    f.close();
  }
  {
    const auto f = fp8moe::results::open_sweep(path);
    CHECK(fp8moe::results::sweep_status(f) == "complete");
    CHECK(f.attr_string("text_16777216").value().size() == (std::size_t{16} << 20));
  }

  // A variable-length attribute, as h5py writes a str: read in any other file, refused in a sweep file.
  {
    const hid_t h = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(h, "note", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = "added with h5py";
    REQUIRE(H5Awrite(a, t, &text) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    H5Fclose(h);
  }
  CHECK(fp8moe::h5::File::open(path).attr_string("note") == std::string("added with h5py"));
  try {
    (void)fp8moe::results::open_sweep(path).attr_string("note");
    FAIL("a variable-length attribute of a sweep file was read");
  } catch (const fp8moe::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("attribute 'note'") != std::string::npos);
    CHECK(m.find("variable-length") != std::string::npos);
    CHECK(m.find("numpy.bytes_") != std::string::npos);
  }
}

TEST_CASE("rows written before 2026-12-05 spell promoted modes with '/': read in today's ':' spelling") {
  const std::uint64_t seed = fp8moe::test::seed_for(167);
  INFO("seed " << seed);
  fp8moe::test::TempDir dir(seed);
  auto rows = random_rows(seed, 6);
  const char* old_modes[] = {"hopper-tc/cublas", "promote-fp32/deepgemm", "exact", "hopper-tc:deepgemm", "bf16", "hp64"};
  const char* new_modes[] = {"hopper-tc:cublas", "promote-fp32:deepgemm", "exact", "hopper-tc:deepgemm", "bf16", "hp64"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].mode = old_modes[i];
    rows[i].case_key = std::string("level=op placements=A=[R] seed=3 mode=") + old_modes[i] + " scenario=hopper-tc/x";
  }
  const auto back = fp8moe::results::read_cases(fp8moe::results::open_sweep(write_sweep(dir, rows)));
  REQUIRE(back.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(back[i].mode == new_modes[i]);
    // Only the mode's value changes: another key's text with the same letters stays as written.
    CHECK(back[i].case_key == std::string("level=op placements=A=[R] seed=3 mode=") + new_modes[i] + " scenario=hopper-tc/x");
  }
}
