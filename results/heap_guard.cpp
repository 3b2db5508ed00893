// The global-heap check before libhdf5 reads variable-length strings (heap_guard.hpp).
#include "results/heap_guard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <map>
#include <vector>

#include "results/h5_detail.hpp"

namespace fp8moe::results {

using namespace fp8moe::h5::detail;
using fp8moe::h5::Handle;

namespace {

constexpr std::uint64_t kMinCollection = 4096;  // H5HG_MINSIZE: libhdf5 never writes a smaller one
constexpr std::uint64_t kMaxCollection = std::uint64_t{1} << 32;  // far above any collection libhdf5 makes

std::uint64_t decode_le(const std::uint8_t* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// A file opened for plain reads next to libhdf5's own handle.
class RawFile {
 public:
  explicit RawFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail("cannot check the strings of '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot check the strings of '", path, "': ", std::strerror(errno));
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~RawFile() { ::close(fd_); }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  std::uint64_t size() const { return size_; }
  void read(std::uint64_t off, std::uint8_t* dst, std::uint64_t n) const {
    while (n > 0) {
      const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(off));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) fail("cannot check the strings of '", path_, "': short read at byte ", off);
      dst += got;
      off += static_cast<std::uint64_t>(got);
      n -= static_cast<std::uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_;
  std::uint64_t size_ = 0;
};

struct Layout {
  std::size_t sizeof_addr = 8, sizeof_size = 8;
  std::uint64_t base = 0;  // the superblock's offset (a user block before it)
};

// One collection's objects: index -> size. Built under libhdf5's parsing rules
// (H5HG__cache_heap_deserialize), refusing where those rules would go wrong.
using Objects = std::map<std::uint32_t, std::uint64_t>;

class HeapChecker {
 public:
  HeapChecker(const RawFile& file, const Layout& lay, const std::string& path) : file_(file), lay_(lay), path_(path) {}

  const Objects& collection(std::uint64_t addr, const std::string& where) {
    auto it = seen_.find(addr);
    if (it != seen_.end()) return it->second;
    return seen_.emplace(addr, parse(addr, where)).first->second;
  }

 private:
  [[noreturn]] void bad(const std::string& where, std::uint64_t addr, const std::string& why) const {
    fail("'", path_, "' is damaged: ", where, " points into the global heap collection at byte ", addr, ", which ", why,
         "; libhdf5 cannot read such strings safely, so fp8moe refuses the file (rerun the sweep, or restore the file "
         "from a copy)");
  }

  Objects parse(std::uint64_t addr, const std::string& where) const {
    const std::size_t hdr = 8 + lay_.sizeof_size;                   // "GCOL", version, 3 reserved, size
    const std::size_t objhdr = 2 + 2 + 4 + lay_.sizeof_size;        // index, refcount, reserved, size
    const std::uint64_t eof = file_.size();
    if (addr == 0 || addr > eof || lay_.base > eof - addr || eof - addr - lay_.base < hdr) {
      bad(where, addr, "lies outside the file");
    }
    const std::uint64_t at = lay_.base + addr;
    std::vector<std::uint8_t> head(hdr);
    file_.read(at, head.data(), hdr);
    if (std::memcmp(head.data(), "GCOL", 4) != 0) bad(where, addr, "has no GCOL signature");
    if (head[4] != 1) bad(where, addr, cat("has version ", int(head[4]), " (1 expected)"));
    const std::uint64_t size = decode_le(head.data() + 8, lay_.sizeof_size);
    if (size < kMinCollection || size > kMaxCollection) {
      bad(where, addr, cat("claims ", size, " bytes (libhdf5 writes ", kMinCollection, " or more)"));
    }
    if (size > eof - at) bad(where, addr, cat("claims ", size, " bytes, past the end of the file"));
    std::vector<std::uint8_t> c(static_cast<std::size_t>(size));
    file_.read(at, c.data(), size);
    Objects objs;
    std::uint64_t p = hdr;
    while (p < size) {
      if (p + objhdr > size) break;  // a tail too small for an object header: free space
      const std::uint32_t idx = static_cast<std::uint32_t>(decode_le(&c[p], 2));
      const std::uint64_t osize = decode_le(&c[p + 8], lay_.sizeof_size);
      std::uint64_t need = 0;
      if (idx > 0) {
        if (osize > size) bad(where, addr, cat("holds object ", idx, " of ", osize, " bytes, larger than the collection"));
        need = objhdr + ((osize + 7) / 8) * 8;
        if (objs.count(idx)) bad(where, addr, cat("holds object ", idx, " twice"));
        objs[idx] = osize;
      } else {
        need = osize;  // the free-space object counts its own header
        if (need < objhdr) bad(where, addr, cat("holds a free-space object of ", osize, " bytes (libhdf5 would loop)"));
      }
      if (need > size - p) bad(where, addr, cat("holds object ", idx, " running past the collection's end"));
      p += need;
    }
    return objs;
  }

  const RawFile& file_;
  Layout lay_;
  std::string path_;
  std::map<std::uint64_t, Objects> seen_;
};

struct VlenMember {
  std::string name;
  std::size_t offset = 0;  // in the row as stored on disk
};

// The table's rows as stored: the string members' disk offsets and the disk row size.
struct RowLayout {
  std::vector<VlenMember> vlen;
  std::size_t disk_elem = 0;
};

const char* const kWhat = "cannot check the cases table's strings";

Layout file_layout(hid_t ds, const std::string& path) {
  Handle file = own(H5Iget_file_id(ds), H5Fclose, kWhat, path, "H5Iget_file_id");
  Handle fcpl = own(H5Fget_create_plist(file.get()), H5Pclose, kWhat, path, "H5Fget_create_plist");
  Layout lay;
  check(H5Pget_sizes(fcpl.get(), &lay.sizeof_addr, &lay.sizeof_size), kWhat, path, "H5Pget_sizes");
  hsize_t ub = 0;
  check(H5Pget_userblock(fcpl.get(), &ub), kWhat, path, "H5Pget_userblock");
  lay.base = ub;
  if (lay.sizeof_addr < 2 || lay.sizeof_addr > 8 || lay.sizeof_size < 2 || lay.sizeof_size > 8) {
    fail("'", path, "' uses ", lay.sizeof_addr, "-byte addresses and ", lay.sizeof_size,
         "-byte sizes: not an HDF5 layout fp8moe reads");
  }
  return lay;
}

// H5Dget_type gives the type laid out for memory (a variable-length string as a char*, later
// members shifted accordingly); on disk each such string is a descriptor of 4 + address + 4 bytes.
// Walk the members in offset order and shift them back (the inverse of libhdf5's H5T__set_loc).
RowLayout row_layout(hid_t ds, const Layout& lay, const std::string& path) {
  Handle type = own(H5Dget_type(ds), H5Tclose, kWhat, path, "H5Dget_type");
  if (H5Tget_class(type.get()) != H5T_COMPOUND) fail("'", path, "': the cases table is not a compound table");
  struct Member {
    std::size_t offset, size;
    bool vlen;
    std::string name;
  };
  std::vector<Member> members;
  const int n = check(H5Tget_nmembers(type.get()), kWhat, path, "H5Tget_nmembers");
  for (unsigned u = 0; u < static_cast<unsigned>(n); ++u) {
    Handle mt = own(H5Tget_member_type(type.get(), u), H5Tclose, kWhat, path, "H5Tget_member_type");
    const bool vstr = H5Tget_class(mt.get()) == H5T_STRING &&
                      check(H5Tis_variable_str(mt.get()), kWhat, path, "H5Tis_variable_str") > 0;
    char* name = H5Tget_member_name(type.get(), u);
    members.push_back({H5Tget_member_offset(type.get(), u), H5Tget_size(mt.get()), vstr, name ? name : "?"});
    H5free_memory(name);
  }
  std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.offset < b.offset; });
  const std::size_t disk = 4 + lay.sizeof_addr + 4;
  RowLayout rl;
  std::size_t shift = 0;
  for (const Member& m : members) {
    if (!m.vlen) continue;
    rl.vlen.push_back({m.name, m.offset + shift});
    shift += disk - m.size;
  }
  rl.disk_elem = H5Tget_size(type.get()) + shift;
  for (const VlenMember& m : rl.vlen) {
    if (m.offset + disk > rl.disk_elem) {
      fail("'", path, "': the string column '", m.name, "' overruns its row: the cases table is damaged");
    }
  }
  return rl;
}

// The fill value of the table, read from its object header's bytes: libhdf5 converts a defined
// fill value's variable-length strings through the global heap unchecked (H5Dget_create_plist,
// and every chunk it fills when a resumed sweep writes), so a defined one, which fp8moe never
// sets, is refused before any of that runs. Object header versions 1 and 2 (HDF5 File Format
// Specification 3.0, IV.A.1), their continuation blocks, the fill value messages old (0x0004) and
// new (0x0005, versions 1-3).
class FillCheck {
 public:
  FillCheck(const RawFile& raw, const Layout& lay, const std::string& path) : raw_(raw), lay_(lay), path_(path) {}

  void run(hid_t ds) {
    H5O_info_t info{};
    check(H5Oget_info2(ds, &info, H5O_INFO_BASIC), kWhat, path_, "H5Oget_info2");
    const std::uint64_t at = header_at(info.addr);
    std::uint8_t head[6];
    raw_.read(at, head, 6);
    if (std::memcmp(head, "OHDR", 4) == 0) {
      if (head[4] != 2) damaged(cat("an object header of version ", int(head[4])));
      v2(at, head[5]);
    } else if (head[0] == 1) {
      v1(at);
    } else {
      damaged("an object header of no known version");
    }
  }

 private:
  [[noreturn]] void damaged(const std::string& what) const {
    fail("'", path_, "' is damaged: the cases table has ", what, ": rerun the sweep, or restore the file from a copy");
  }
  std::uint64_t header_at(std::uint64_t addr) const {
    if (addr == HADDR_UNDEF || addr > raw_.size() || lay_.base > raw_.size() - addr) damaged("its header outside the file");
    return lay_.base + addr;
  }
  std::vector<std::uint8_t> bytes(std::uint64_t at, std::uint64_t n) const {
    if (n > (std::uint64_t{1} << 24) || at > raw_.size() || n > raw_.size() - at) damaged("a header block outside the file");
    if (++blocks_ > 64) damaged("more than 64 header blocks");
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n));
    raw_.read(at, b.data(), n);
    return b;
  }
  // One message: continuation blocks are queued, fill values judged.
  void message(unsigned type, const std::uint8_t* d, std::size_t n, std::vector<std::pair<std::uint64_t, std::uint64_t>>& more) {
    auto need = [&](std::size_t k) {
      if (n < k) damaged(cat("a header message of type ", type, " shorter than its fields"));
    };
    if (type == 0x10) {
      need(lay_.sizeof_addr + lay_.sizeof_size);
      more.emplace_back(decode_le(d, lay_.sizeof_addr), decode_le(d + lay_.sizeof_addr, lay_.sizeof_size));
    } else if (type == 0x04) {  // old fill value: size, value
      need(4);
      if (decode_le(d, 4) != 0) defined();
    } else if (type == 0x05) {
      need(1);
      const unsigned version = d[0];
      if (version == 1 || version == 2) {
        need(4);
        if (version == 1 || d[3] != 0) {  // v2 stores a size only when the value is defined
          need(8);
          if (decode_le(d + 4, 4) != 0) defined();
        }
      } else if (version == 3) {
        need(2);
        if (d[1] & 0x20) {  // "fill value defined": a size and the value follow
          need(6);
          if (decode_le(d + 2, 4) != 0) defined();
        }
      } else {
        damaged(cat("a fill value message of version ", version));
      }
    }
  }
  [[noreturn]] void defined() const {
    damaged("a fill value, which fp8moe never sets (libhdf5 would read its strings from an unchecked heap)");
  }
  // Messages of a version-2 header or continuation block: type (1), size (2), flags (1), the
  // creation order (2) when the header tracks it, the data; a tail too small for a message is a gap.
  void v2_messages(const std::vector<std::uint8_t>& b, std::size_t p, std::size_t end, bool order,
                   std::vector<std::pair<std::uint64_t, std::uint64_t>>& more) {
    const std::size_t hdr = order ? 6 : 4;
    while (end - p >= hdr && p < end) {
      const unsigned type = b[p];
      const std::size_t size = static_cast<std::size_t>(decode_le(&b[p + 1], 2));
      p += hdr;
      if (size > end - p) damaged("a header message running past its block");
      message(type, &b[p], size, more);
      p += size;
    }
  }
  void v2(std::uint64_t at, std::uint8_t flags) {
    std::size_t p = 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
    const std::size_t width = std::size_t{1} << (flags & 3);
    const auto pre = bytes(at, p + width);
    const std::uint64_t chunk0 = decode_le(&pre[p], width);
    p += width;
    const auto b = bytes(at, p + chunk0);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> more;
    v2_messages(b, p, b.size(), (flags & 0x04) != 0, more);
    for (std::size_t i = 0; i < more.size(); ++i) {
      const auto [addr, len] = more[i];
      if (len < 8) damaged("a continuation block too small for its signature and checksum");
      const auto c = bytes(header_at(addr), len);
      if (std::memcmp(c.data(), "OCHK", 4) != 0) damaged("a continuation block without its OCHK signature");
      v2_messages(c, 4, c.size() - 4, (flags & 0x04) != 0, more);
    }
  }
  // Version 1: a 16-byte prefix (version, reserved, message count, reference count, header size,
  // padding), messages of type (2), size (2), flags (1), reserved (3), data.
  void v1_messages(const std::vector<std::uint8_t>& b, std::size_t p, std::vector<std::pair<std::uint64_t, std::uint64_t>>& more) {
    while (b.size() - p >= 8 && p < b.size()) {
      const unsigned type = static_cast<unsigned>(decode_le(&b[p], 2));
      const std::size_t size = static_cast<std::size_t>(decode_le(&b[p + 2], 2));
      p += 8;
      if (size > b.size() - p) damaged("a header message running past its block");
      message(type, &b[p], size, more);
      p += size;
    }
  }
  void v1(std::uint64_t at) {
    const auto pre = bytes(at, 16);
    const auto b = bytes(at, 16 + decode_le(&pre[8], 4));
    std::vector<std::pair<std::uint64_t, std::uint64_t>> more;
    v1_messages(b, 16, more);
    for (std::size_t i = 0; i < more.size(); ++i) v1_messages(bytes(header_at(more[i].first), more[i].second), 0, more);
  }

  const RawFile& raw_;
  Layout lay_;
  std::string path_;
  mutable int blocks_ = 0;
};

// Rows per chunk of an unfiltered, one-dimensional chunked table (how fp8moe writes it).
std::uint64_t chunk_rows_of(hid_t ds, std::size_t disk_elem, const std::string& path) {
  Handle dcpl = own(H5Dget_create_plist(ds), H5Pclose, kWhat, path, "H5Dget_create_plist");
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) {
    fail("'", path, "': the cases table is not chunked as fp8moe writes it: the file is damaged");
  }
  if (check(H5Pget_nfilters(dcpl.get()), kWhat, path, "H5Pget_nfilters") != 0) {
    fail("'", path, "': the cases table has filters fp8moe never sets: the file is damaged");
  }
  hsize_t rows = 0;
  if (H5Pget_chunk(dcpl.get(), 1, &rows) != 1 || rows == 0) {
    fail("'", path, "': the cases table's chunks are not one-dimensional: the file is damaged");
  }
  if (rows > (std::uint64_t{1} << 30) / disk_elem) {
    fail("'", path, "': the cases table's chunks of ", rows, " rows are implausible: the file is damaged");
  }
  return rows;
}

// The raw bytes of the chunk starting at row `first`, located through the chunk index and read
// here, bounded by the buffer (H5Dread_chunk trusts the index's size and writes past a buffer of
// the right size: found by the fuzzer).
void read_chunk(hid_t ds, std::uint64_t first, const RawFile& raw, const Layout& lay, std::vector<std::uint8_t>& buf,
                const std::string& path) {
  const hsize_t offset = first;
  unsigned filter_mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t stored = 0;
  check(H5Dget_chunk_info_by_coord(ds, &offset, &filter_mask, &addr, &stored), cat(kWhat, " (rows from ", first, ")"),
        path, "H5Dget_chunk_info_by_coord");
  if (addr == HADDR_UNDEF || stored != buf.size() || filter_mask != 0) {
    fail("'", path, "': the cases table's chunk at row ", first, " is ", addr == HADDR_UNDEF ? "missing" : "damaged",
         " (", stored, " bytes stored, ", buf.size(), " expected): the file is damaged");
  }
  if (addr > raw.size() || lay.base > raw.size() - addr || raw.size() - addr - lay.base < stored) {
    fail("'", path, "': the cases table's chunk at row ", first, " lies outside the file: the file is damaged");
  }
  raw.read(lay.base + addr, buf.data(), stored);
}

// One string descriptor {length, collection address, object index}: its object must exist in a
// valid collection and hold exactly `length` bytes. A descriptor is null only by its address:
// libhdf5 reads the object of every descriptor whose address is not 0, an empty string's too
// (H5T__conv_vlen calls the read for a length of 0, and H5HG_read indexes the object table
// unchecked: a SEGV found by the fuzzer), into a buffer sized by the length.
void check_descriptor(const std::uint8_t* d, const Layout& lay, HeapChecker& heaps, const std::string& where,
                      const std::string& path) {
  const std::uint64_t len = decode_le(d, 4);
  const std::uint64_t addr = decode_le(d + 4, lay.sizeof_addr);
  if (addr == 0) return;  // a null string: libhdf5 reads nothing
  const auto idx = static_cast<std::uint32_t>(decode_le(d + 4 + lay.sizeof_addr, 4));
  const Objects& objs = heaps.collection(addr, where);
  const auto it = objs.find(idx);
  if (idx == 0 || it == objs.end()) {
    fail("'", path, "' is damaged: ", where, " names object ", idx, " of the global heap collection at byte ", addr,
         ", which has no such object: rerun the sweep, or restore the file from a copy");
  }
  if (it->second != len) {
    fail("'", path, "' is damaged: ", where, " is a string of ", len, " bytes but its heap object holds ", it->second,
         " (libhdf5 would read past its buffer): rerun the sweep, or restore the file from a copy");
  }
}

}  // namespace

void check_fill_value(h5::Id ds, const std::string& path) {
  const Layout lay = file_layout(ds, path);
  const RawFile raw(path);
  FillCheck(raw, lay, path).run(ds);
}

void check_vlen_strings(h5::Id ds, std::uint64_t rows, const std::string& path) {
  if (rows == 0) return;
  const Layout lay = file_layout(ds, path);
  const RawFile raw(path);
  const RowLayout rl = row_layout(ds, lay, path);
  if (rl.vlen.empty()) return;
  const std::uint64_t chunk_rows = chunk_rows_of(ds, rl.disk_elem, path);
  HeapChecker heaps(raw, lay, path);
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(chunk_rows * rl.disk_elem));
  for (std::uint64_t first = 0; first < rows; first += chunk_rows) {
    read_chunk(ds, first, raw, lay, buf, path);
    for (std::uint64_t r = first; r < std::min<std::uint64_t>(rows, first + chunk_rows); ++r) {
      const std::uint8_t* row = buf.data() + (r - first) * rl.disk_elem;
      for (const VlenMember& m : rl.vlen) check_descriptor(row + m.offset, lay, heaps, cat("row ", r, " column '", m.name, "'"), path);
    }
  }
}

}  // namespace fp8moe::results
