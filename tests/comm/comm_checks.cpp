#include "comm_checks.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>

#include "reference/error.hpp"
#include "sim/backend/backend.hpp"
#include "sim/comm/fake_communicator.hpp"
#include "sim/mesh/placement.hpp"
#include "sim/plans/layer_plan.hpp"
#include "sim/runner/op_runner.hpp"

namespace fp8moe::test {

using namespace fp8moe::sim;
using I64 = std::int64_t;

void CheckLog::merge(const CheckLog& o) {
  problems.insert(problems.end(), o.problems.begin(), o.problems.end());
  calls += o.calls;
  order_sensitive += o.order_sensitive;
}

std::string CheckLog::summary() const {
  std::ostringstream os;
  os << problems.size() << " problem(s) in " << calls << " calls";
  for (std::size_t i = 0; i < problems.size() && i < 12; ++i) os << "\n  " << problems[i];
  return os.str();
}

namespace {

std::string gstr(const Group& g) {
  std::string s = "[";
  for (std::size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "]";
}

// The groups every check runs on: each dim's groups, the whole mesh, and the whole mesh reversed
// (a group of no mesh dim, in an order that is not rank order).
std::vector<Group> test_groups(const Mesh& mesh) {
  std::vector<Group> gs;
  for (int d = 0; d < mesh.ndim(); ++d) {
    for (const Group& g : mesh.groups(d)) gs.push_back(g);
  }
  Group all(static_cast<std::size_t>(mesh.world())), rev;
  for (int r = 0; r < mesh.world(); ++r) all[static_cast<std::size_t>(r)] = r;
  rev.assign(all.rbegin(), all.rend());
  gs.push_back(all);
  if (rev != all) gs.push_back(rev);
  return gs;
}

int position(const Group& g, int rank) {
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

// One comparison session: the real communicator next to a fake one fed the same calls.
struct Session {
  Communicator& comm;
  FakeCommunicator fake;
  std::mt19937_64 rng;
  CheckLog& log;
  std::uint64_t seed;
  int me;  // this process's rank

  // The fake mesh starts from zero, so the communicator under test does too: its CommStats are
  // compared with the fake's after every call of this session, not with earlier sessions'.
  Session(Communicator& c, std::uint64_t s, CheckLog& l)
      : comm(c), fake(c.mesh()), rng(s), log(l), seed(s), me(c.local_ranks().at(0)) {
    comm.reset_stats();
  }

  std::string where(const char* what, const Group& g) const {
    return cat(what, " on ", gstr(g), " of mesh ", comm.mesh().str(), " (seed ", seed, ", rank ", me, ")");
  }
  I64 uniform(I64 lo, I64 hi) { return std::uniform_int_distribution<I64>(lo, hi)(rng); }
  std::vector<std::byte> bytes(I64 n) {
    std::vector<std::byte> v(static_cast<std::size_t>(n));
    for (std::byte& b : v) b = static_cast<std::byte>(uniform(0, 255));
    return v;
  }
  // Values of many magnitudes, so that the order of a sum shows in its rounding.
  std::vector<float> floats(I64 n) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = std::ldexp(nd(rng), static_cast<int>(uniform(-8, 8)));
    return v;
  }

  void same_bytes(const void* a, const void* b, std::size_t n, const std::string& what) {
    if (n && std::memcmp(a, b, n) != 0) {
      const auto* x = static_cast<const unsigned char*>(a);
      const auto* y = static_cast<const unsigned char*>(b);
      std::size_t k = 0;
      while (x[k] == y[k]) ++k;
      log.bad(cat(what, ": byte ", k, " of ", n, " differs from the fake mesh's (", int(x[k]), " vs ", int(y[k]), ")"));
    }
  }
  void same_floats(const float* real, const float* ref, std::size_t n, const std::string& what) {
    for (std::size_t k = 0; k < n; ++k) {
      if (!std::isfinite(real[k])) {
        log.bad(cat(what, ": element ", k, " is not finite (", real[k], ")"));
        return;
      }
      if (std::memcmp(&real[k], &ref[k], sizeof(float)) != 0) {
        log.bad(cat(what, ": element ", k, " of ", n, " is ", real[k], ", the fake mesh's ", ref[k]));
        return;
      }
    }
  }
  void same_stats(const std::string& what) {
    ++log.calls;
    if (comm.stats().bytes_sent != fake.stats().bytes_sent || comm.stats().collectives != fake.stats().collectives) {
      std::string a, b;
      for (I64 v : comm.stats().bytes_sent) a += " " + std::to_string(v);
      for (I64 v : fake.stats().bytes_sent) b += " " + std::to_string(v);
      log.bad(cat(what, ": CommStats bytes [", a, " ] / ", comm.stats().collectives, " calls, the fake mesh's [", b, " ] / ",
                  fake.stats().collectives));
    }
  }

  void all_gather(const Group& g) {
    const std::size_t n = g.size();
    const int p = position(g, me);
    std::vector<std::vector<std::byte>> send(n), frecv(n);
    I64 total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      send[i] = bytes(uniform(0, 3) == 0 ? 0 : uniform(1, 40));  // uneven, some empty
      total += static_cast<I64>(send[i].size());
    }
    std::vector<ConstBytes> fs, rs;
    std::vector<Bytes> fr, rr;
    std::vector<std::byte> mine(static_cast<std::size_t>(total));
    for (std::size_t i = 0; i < n; ++i) {
      frecv[i].resize(static_cast<std::size_t>(total));
      fs.emplace_back(send[i]);
      fr.emplace_back(frecv[i]);
      const bool local = static_cast<int>(i) == p;
      rs.push_back(local ? ConstBytes(send[i]) : ConstBytes());
      rr.push_back(local ? Bytes(mine) : Bytes());
    }
    fake.all_gather(g, fs, fr);
    comm.all_gather(g, rs, rr);
    const std::string w = where("all_gather", g);
    if (p >= 0) same_bytes(mine.data(), frecv[static_cast<std::size_t>(p)].data(), mine.size(), w);
    same_stats(w);
  }

  void all_to_all(const Group& g) {
    const std::size_t n = g.size();
    const int p = position(g, me);
    std::vector<std::vector<std::vector<std::byte>>> send(n, std::vector<std::vector<std::byte>>(n)), frecv = send;
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        send[i][j] = bytes(uniform(0, 2) == 0 ? 0 : uniform(1, 24));
        frecv[j][i].resize(send[i][j].size());
      }
    }
    std::vector<std::vector<std::byte>> mine(n);
    std::vector<std::vector<ConstBytes>> fs(n), rs(n);
    std::vector<std::vector<Bytes>> fr(n), rr(n);
    for (std::size_t i = 0; i < n; ++i) {
      const bool local = static_cast<int>(i) == p;
      for (std::size_t j = 0; j < n; ++j) {
        fs[i].emplace_back(send[i][j]);
        fr[i].emplace_back(frecv[i][j]);
        rs[i].push_back(local ? ConstBytes(send[i][j]) : ConstBytes());
        if (local) mine[j].resize(frecv[i][j].size());
      }
      for (std::size_t j = 0; j < n; ++j) rr[i].push_back(local ? Bytes(mine[j]) : Bytes());
    }
    fake.all_to_all(g, fs, fr);
    comm.all_to_all(g, rs, rr);
    const std::string w = where("all_to_all", g);
    if (p >= 0) {
      for (std::size_t i = 0; i < n; ++i) {
        same_bytes(mine[i].data(), frecv[static_cast<std::size_t>(p)][i].data(), mine[i].size(), cat(w, " from member ", i));
      }
    }
    same_stats(w);
  }

  void broadcast(const Group& g, int root) {
    const std::size_t n = g.size();
    const int p = position(g, me);
    const I64 size = uniform(0, 4) == 0 ? 0 : uniform(1, 50);
    std::vector<std::vector<std::byte>> fb(n);
    for (std::size_t i = 0; i < n; ++i) fb[i] = bytes(size);  // non-roots hold garbage to overwrite
    std::vector<std::byte> mine = p >= 0 ? fb[static_cast<std::size_t>(p)] : std::vector<std::byte>();
    std::vector<Bytes> f, r;
    for (std::size_t i = 0; i < n; ++i) {
      f.emplace_back(fb[i]);
      r.push_back(static_cast<int>(i) == p ? Bytes(mine) : Bytes());
    }
    fake.broadcast(g, root, f);
    comm.broadcast(g, root, r);
    const std::string w = cat(where("broadcast", g), " from position ", root);
    if (p >= 0) same_bytes(mine.data(), fb[static_cast<std::size_t>(p)].data(), mine.size(), w);
    same_stats(w);
  }

  // Counts how often the data tells the two orders apart (fp32 sums of three or more members).
  void note_order(const std::vector<const float*>& in, int n, int owner, I64 count, const ReduceOptions& opt) {
    if (n < 3 || count == 0 || opt.dtype != ReduceDtype::fp32) return;
    std::vector<float> a(static_cast<std::size_t>(count)), b(a.size());
    reduce_chunk(in.data(), n, owner, count, {ReduceOrder::ascending, opt.dtype}, a.data());
    reduce_chunk(in.data(), n, owner, count, {ReduceOrder::ring, opt.dtype}, b.data());
    if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) ++log.order_sensitive;
  }

  void reduce_scatter(const Group& g, const ReduceOptions& opt) {
    const std::size_t n = g.size();
    const int p = position(g, me);
    std::vector<I64> counts(n);
    I64 total = 0;
    for (I64& c : counts) total += c = uniform(0, 3) == 0 ? 0 : uniform(1, 9);
    std::vector<std::vector<float>> send(n), frecv(n);
    for (std::size_t i = 0; i < n; ++i) {
      send[i] = floats(total);
      frecv[i].assign(static_cast<std::size_t>(counts[i]), 0.0f);
    }
    std::vector<float> mine(p >= 0 ? static_cast<std::size_t>(counts[static_cast<std::size_t>(p)]) : 0);
    std::vector<ConstFloats> fs, rs;
    std::vector<Floats> fr, rr;
    for (std::size_t i = 0; i < n; ++i) {
      const bool local = static_cast<int>(i) == p;
      fs.emplace_back(send[i]);
      fr.emplace_back(frecv[i]);
      rs.push_back(local ? ConstFloats(send[i]) : ConstFloats());
      rr.push_back(local ? Floats(mine) : Floats());
    }
    fake.reduce_scatter(g, fs, fr, counts, opt);
    comm.reduce_scatter(g, rs, rr, counts, opt);
    const std::string w = cat(where("reduce_scatter", g), " ", reduce_order_name(opt.order), "/", reduce_dtype_name(opt.dtype));
    if (p >= 0) same_floats(mine.data(), frecv[static_cast<std::size_t>(p)].data(), mine.size(), w);
    same_stats(w);
    I64 off = 0;
    for (std::size_t j = 0; j < n; ++j) {
      std::vector<const float*> in;
      for (std::size_t i = 0; i < n; ++i) in.push_back(send[i].data() + off);
      note_order(in, static_cast<int>(n), static_cast<int>(j), counts[j], opt);
      off += counts[j];
    }
  }

  void all_reduce(const Group& g, I64 count, const ReduceOptions& opt) {
    const std::size_t n = g.size();
    const int p = position(g, me);
    std::vector<std::vector<float>> fio(n);
    for (std::size_t i = 0; i < n; ++i) fio[i] = floats(count);
    std::vector<float> mine = p >= 0 ? fio[static_cast<std::size_t>(p)] : std::vector<float>();
    std::vector<std::vector<float>> orig = fio;
    std::vector<Floats> f, r;
    for (std::size_t i = 0; i < n; ++i) {
      f.emplace_back(fio[i]);
      r.push_back(static_cast<int>(i) == p ? Floats(mine) : Floats());
    }
    fake.all_reduce(g, f, opt);
    comm.all_reduce(g, r, opt);
    const std::string w = cat(where("all_reduce", g), " of ", count, " values ", reduce_order_name(opt.order), "/",
                              reduce_dtype_name(opt.dtype));
    if (p >= 0) same_floats(mine.data(), fio[static_cast<std::size_t>(p)].data(), mine.size(), w);
    same_stats(w);
    std::vector<const float*> in;
    for (const auto& v : orig) in.push_back(v.data());
    note_order(in, static_cast<int>(n), 0, count, opt);
  }
};

constexpr ReduceOptions kOptions[] = {{ReduceOrder::ascending, ReduceDtype::fp32},
                                      {ReduceOrder::ring, ReduceDtype::fp32},
                                      {ReduceOrder::ascending, ReduceDtype::bf16},
                                      {ReduceOrder::ring, ReduceDtype::bf16}};

}  // namespace

void check_collectives(Communicator& comm, std::uint64_t seed, CheckLog& log) {
  Session s(comm, seed, log);
  for (const Group& g : test_groups(comm.mesh())) {
    const I64 n = static_cast<I64>(g.size());
    for (int rep = 0; rep < 3; ++rep) s.all_gather(g);
    for (int rep = 0; rep < 3; ++rep) s.all_to_all(g);
    for (int root = 0; root < static_cast<int>(n); ++root) s.broadcast(g, root);
    for (const ReduceOptions& opt : kOptions) {
      for (int rep = 0; rep < 2; ++rep) s.reduce_scatter(g, opt);
      for (I64 count : {I64{1}, n - 1, I64{7}, I64{33}}) s.all_reduce(g, count, opt);
    }
  }
}

void check_size_errors(Communicator& comm, CheckLog& log) {
  const Mesh& mesh = comm.mesh();
  const int me = comm.local_ranks().at(0);
  const Group g = mesh.groups(0).front();
  const std::size_t n = g.size();
  const std::size_t bad = n - 1;  // this member receives into a buffer one byte short
  std::vector<std::vector<std::byte>> send(n, std::vector<std::byte>(8, std::byte{7})), recv(n);
  for (std::size_t i = 0; i < n; ++i) recv[i].resize(8 * n - (i == bad ? 1 : 0));
  FakeCommunicator fake(mesh);
  auto spans = [&](bool all) {
    std::vector<ConstBytes> s;
    std::vector<Bytes> r;
    for (std::size_t i = 0; i < n; ++i) {
      const bool use = all || g[i] == me;
      s.push_back(use ? ConstBytes(send[i]) : ConstBytes());
      r.push_back(use ? Bytes(recv[i]) : Bytes());
    }
    return std::make_pair(s, r);
  };
  std::string fake_msg, real_msg;
  try {
    auto [s, r] = spans(true);
    fake.all_gather(g, s, r);
  } catch (const Error& e) {
    fake_msg = e.what();
  }
  try {
    auto [s, r] = spans(false);
    comm.all_gather(g, s, r);
  } catch (const Error& e) {
    real_msg = e.what();
  }
  const std::string w = cat("size error on ", gstr(g), " of mesh ", mesh.str(), " (rank ", me, ")");
  ++log.calls;
  if (fake_msg.empty()) log.bad(w + ": the fake mesh raised nothing");
  if (real_msg != fake_msg) log.bad(cat(w, ": raised '", real_msg, "', the fake mesh '", fake_msg, "'"));
  // Still usable: the same call with the right size.
  recv[bad].resize(8 * n);
  auto [s, r] = spans(false);
  try {
    comm.all_gather(g, s, r);
    const int p = position(g, me);
    for (std::size_t k = 0; p >= 0 && k < 8 * n; ++k) {
      if (recv[static_cast<std::size_t>(p)][k] != std::byte{7}) {
        log.bad(cat(w, ": the call after the error gave a wrong byte ", k));
        break;
      }
    }
  } catch (const std::exception& e) {
    log.bad(cat(w, ": the call after the error failed: ", e.what()));
  }
}

namespace {

// A device buffer holding a copy of host bytes, through the suite's DeviceMemory.
struct Dev {
  const DeviceMemory& m;
  void* p;
  std::size_t n;
  Dev(const DeviceMemory& mm, const void* host, std::size_t bytes) : m(mm), p(mm.alloc(bytes ? bytes : 1)), n(bytes) {
    if (bytes) m.to_device(p, host, bytes);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { m.release(p); }
  std::byte* b() const { return static_cast<std::byte*>(p); }
  template <class T>
  std::vector<T> get() const {
    std::vector<T> v(n / sizeof(T));
    if (n) m.to_host(v.data(), p, n);
    return v;
  }
};

}  // namespace

void check_device_buffers(Communicator& comm, std::uint64_t seed, const DeviceMemory& mem, CheckLog& log) {
  Session s(comm, seed, log);
  for (const Group& g : test_groups(comm.mesh())) {
    const std::size_t n = g.size();
    const int p = position(g, s.me);
    // all_gather, device send and receive buffers
    {
      std::vector<std::vector<std::byte>> send(n), frecv(n);
      I64 total = 0;
      for (auto& v : send) total += static_cast<I64>((v = s.bytes(s.uniform(0, 40))).size());
      std::vector<ConstBytes> fs, rs;
      std::vector<Bytes> fr, rr;
      std::unique_ptr<Dev> ds, dr;
      for (std::size_t i = 0; i < n; ++i) {
        frecv[i].resize(static_cast<std::size_t>(total));
        fs.emplace_back(send[i]);
        fr.emplace_back(frecv[i]);
        if (static_cast<int>(i) == p) {
          ds = std::make_unique<Dev>(mem, send[i].data(), send[i].size());
          dr = std::make_unique<Dev>(mem, frecv[i].data(), static_cast<std::size_t>(total));  // zeros
          rs.emplace_back(ds->b(), send[i].size());
          rr.emplace_back(dr->b(), static_cast<std::size_t>(total));
        } else {
          rs.emplace_back();
          rr.emplace_back();
        }
      }
      s.fake.all_gather(g, fs, fr);
      comm.all_gather(g, rs, rr);
      const std::string w = s.where("all_gather (device buffers)", g);
      if (p >= 0) {
        const auto got = dr->get<std::byte>();
        s.same_bytes(got.data(), frecv[static_cast<std::size_t>(p)].data(), got.size(), w);
      }
      s.same_stats(w);
    }
    // all_reduce and reduce_scatter, device buffers, ring order
    for (const ReduceOptions& opt : kOptions) {
      const I64 count = 29;
      std::vector<std::vector<float>> fio(n);
      for (auto& v : fio) v = s.floats(count);
      std::unique_ptr<Dev> d;
      std::vector<Floats> f, r;
      for (std::size_t i = 0; i < n; ++i) {
        if (static_cast<int>(i) == p) {
          d = std::make_unique<Dev>(mem, fio[i].data(), fio[i].size() * sizeof(float));
          r.emplace_back(reinterpret_cast<float*>(d->p), fio[i].size());
        } else {
          r.emplace_back();
        }
        f.emplace_back(fio[i]);
      }
      s.fake.all_reduce(g, f, opt);
      comm.all_reduce(g, r, opt);
      const std::string w = s.where("all_reduce (device buffers)", g);
      if (p >= 0) {
        const auto got = d->get<float>();
        s.same_floats(got.data(), fio[static_cast<std::size_t>(p)].data(), got.size(), w);
      }
      s.same_stats(w);
    }
    // reduce_scatter and broadcast, device buffers
    for (const ReduceOptions& opt : kOptions) {
      std::vector<I64> counts(n);
      I64 total = 0;
      for (I64& c : counts) total += c = s.uniform(0, 9);
      std::vector<std::vector<float>> send(n), frecv(n);
      for (std::size_t i = 0; i < n; ++i) {
        send[i] = s.floats(total);
        frecv[i].assign(static_cast<std::size_t>(counts[i]), 0.0f);
      }
      std::unique_ptr<Dev> ds, dr;
      std::vector<ConstFloats> fs, rs;
      std::vector<Floats> fr, rr;
      for (std::size_t i = 0; i < n; ++i) {
        fs.emplace_back(send[i]);
        fr.emplace_back(frecv[i]);
        if (static_cast<int>(i) == p) {
          ds = std::make_unique<Dev>(mem, send[i].data(), send[i].size() * sizeof(float));
          dr = std::make_unique<Dev>(mem, frecv[i].data(), frecv[i].size() * sizeof(float));
          rs.emplace_back(reinterpret_cast<const float*>(ds->p), send[i].size());
          rr.emplace_back(reinterpret_cast<float*>(dr->p), frecv[i].size());
        } else {
          rs.emplace_back();
          rr.emplace_back();
        }
      }
      s.fake.reduce_scatter(g, fs, fr, counts, opt);
      comm.reduce_scatter(g, rs, rr, counts, opt);
      const std::string w = s.where("reduce_scatter (device buffers)", g);
      if (p >= 0) {
        const auto got = dr->get<float>();
        s.same_floats(got.data(), frecv[static_cast<std::size_t>(p)].data(), got.size(), w);
      }
      s.same_stats(w);
    }
    for (int root = 0; root < static_cast<int>(n); ++root) {
      const I64 size = s.uniform(1, 50);
      std::vector<std::vector<std::byte>> fb(n);
      for (auto& v : fb) v = s.bytes(size);
      std::unique_ptr<Dev> d;
      std::vector<Bytes> f, r;
      for (std::size_t i = 0; i < n; ++i) {
        if (static_cast<int>(i) == p) {
          d = std::make_unique<Dev>(mem, fb[i].data(), fb[i].size());
          r.emplace_back(d->b(), fb[i].size());
        } else {
          r.emplace_back();
        }
        f.emplace_back(fb[i]);
      }
      s.fake.broadcast(g, root, f);
      comm.broadcast(g, root, r);
      const std::string w = cat(s.where("broadcast (device buffer)", g), " from position ", root);
      if (p >= 0) {
        const auto got = d->get<std::byte>();
        s.same_bytes(got.data(), fb[static_cast<std::size_t>(p)].data(), got.size(), w);
      }
      s.same_stats(w);
    }
    // all_to_all, device pieces
    {
      std::vector<std::vector<std::vector<std::byte>>> send(n, std::vector<std::vector<std::byte>>(n)), frecv = send;
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          send[i][j] = s.bytes(s.uniform(0, 24));
          frecv[j][i].resize(send[i][j].size());
        }
      }
      std::vector<std::unique_ptr<Dev>> ds, dr;
      std::vector<std::vector<ConstBytes>> fs(n), rs(n);
      std::vector<std::vector<Bytes>> fr(n), rr(n);
      for (std::size_t i = 0; i < n; ++i) {
        const bool local = static_cast<int>(i) == p;
        for (std::size_t j = 0; j < n; ++j) {
          fs[i].emplace_back(send[i][j]);
          fr[i].emplace_back(frecv[i][j]);
          if (local) {
            ds.push_back(std::make_unique<Dev>(mem, send[i][j].data(), send[i][j].size()));
            dr.push_back(std::make_unique<Dev>(mem, frecv[i][j].data(), frecv[i][j].size()));
            rs[i].emplace_back(ds.back()->b(), send[i][j].size());
            rr[i].emplace_back(dr.back()->b(), frecv[i][j].size());
          } else {
            rs[i].emplace_back();
            rr[i].emplace_back();
          }
        }
      }
      s.fake.all_to_all(g, fs, fr);
      comm.all_to_all(g, rs, rr);
      const std::string w = s.where("all_to_all (device buffers)", g);
      for (std::size_t i = 0; p >= 0 && i < n; ++i) {
        const auto got = dr[i]->get<std::byte>();
        s.same_bytes(got.data(), frecv[static_cast<std::size_t>(p)][i].data(), got.size(), cat(w, " from member ", i));
      }
      s.same_stats(w);
    }
  }
}

namespace {

bool same_tensor(const TensorD& a, const TensorD& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.numel() * sizeof(double)) == 0;
}
bool same_tensor(const TensorF& a, const TensorF& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.numel() * sizeof(float)) == 0;
}
bool same_metric(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void compare_reports(const ScenarioReport& real, const ScenarioReport& fake, const std::string& w, CheckLog& log) {
  if (real.comm_bytes_max_rank != fake.comm_bytes_max_rank) {
    log.bad(cat(w, ": comm_bytes_max_rank ", real.comm_bytes_max_rank, ", the fake mesh's ", fake.comm_bytes_max_rank));
  }
  if (real.tensors.size() != fake.tensors.size()) {
    log.bad(cat(w, ": ", real.tensors.size(), " tensor reports, the fake mesh's ", fake.tensors.size()));
    return;
  }
  for (std::size_t i = 0; i < real.tensors.size(); ++i) {
    const auto& a = real.tensors[i];
    const auto& b = fake.tensors[i];
    if (!same_metric(a.vs_single.sqnr_db, b.vs_single.sqnr_db) || !same_metric(a.vs_hp64.sqnr_db, b.vs_hp64.sqnr_db) ||
        !same_metric(a.vs_single.bitwise_equal_frac, b.vs_single.bitwise_equal_frac)) {
      log.bad(cat(w, ": ", a.tensor, " vs single ", a.vs_single.sqnr_db, " dB (fake ", b.vs_single.sqnr_db, "), vs hp64 ",
                  a.vs_hp64.sqnr_db, " dB (fake ", b.vs_hp64.sqnr_db, ")"));
    }
  }
  if (real.strategy != fake.strategy) log.bad(cat(w, ": strategy '", real.strategy, "', the fake mesh's '", fake.strategy, "'"));
}

// One placement per mesh dim, the same on every dim.
Placements every_dim(const Mesh& m, Placement p) { return Placements(static_cast<std::size_t>(m.ndim()), p); }

}  // namespace

void check_op_runs(Communicator& comm, std::uint64_t seed, CheckLog& log) {
  const Mesh& mesh = comm.mesh();
  struct Template {
    const char* name;
    Pass pass;
    Placement lhs, rhs;
    ReduceOptions reduce;
  };
  const Template templates[] = {
      {"fwd, contraction sharded (Partial out)", Pass::fwd, Placement::S(1), Placement::S(2), {ReduceOrder::ring, ReduceDtype::fp32}},
      {"fwd, contraction sharded, bf16 ascending", Pass::fwd, Placement::S(1), Placement::S(2), {ReduceOrder::ascending, ReduceDtype::bf16}},
      {"fwd, output features sharded", Pass::fwd, Placement::R(), Placement::S(1), {}},
      {"dgrad, contraction sharded (Partial out)", Pass::dgrad, Placement::S(1), Placement::S(1), {ReduceOrder::ring, ReduceDtype::fp32}},
      {"wgrad, dOut sharded on N", Pass::wgrad, Placement::S(1), Placement::R(), {}},
      {"fwd, W sharded on experts (redistributed)", Pass::fwd, Placement::R(), Placement::S(0), {ReduceOrder::ring, ReduceDtype::fp32}},
  };
  for (const Template& t : templates) {
    CaseSpec sc;
    sc.mesh = mesh.str();
    sc.pass = t.pass;
    sc.lhs = every_dim(mesh, t.lhs);
    sc.rhs = every_dim(mesh, t.rhs);
    sc.set_op_shape(OpShape{2, 256, 256, 512});
    sc.offs = {128, 256};
    sc.seed = seed;
    sc.reduce = t.reduce;
    const std::string w = cat("run_op ", t.name, " on mesh ", mesh.str(), " (seed ", seed, ", rank ", comm.local_ranks().at(0), ")");
    auto be = make_backend("reference");
    OpRun real, fake;
    std::string real_err, fake_err;
    try {
      real = run_op(sc, *be, &comm);
    } catch (const std::exception& e) {
      real_err = e.what();
    }
    try {
      fake = run_op(sc, *be);
    } catch (const std::exception& e) {
      fake_err = e.what();
    }
    ++log.calls;
    if (real_err != fake_err) {
      log.bad(cat(w, ": raised '", real_err, "', the fake mesh '", fake_err, "'"));
      continue;
    }
    if (!fake_err.empty()) continue;  // rejected on both, with the same reason
    if (!same_tensor(real.out, fake.out)) log.bad(w + ": the gathered output differs from the fake mesh's");
    for (std::size_t k = 0; k < real.out.data.size(); ++k) {
      if (!std::isfinite(real.out.data[k])) {
        log.bad(cat(w, ": output element ", k, " is not finite"));
        break;
      }
    }
    for (int r : comm.local_ranks()) {
      if (!same_tensor(real.local.at(static_cast<std::size_t>(r)), fake.local.at(static_cast<std::size_t>(r)))) {
        log.bad(cat(w, ": rank ", r, "'s local pass differs from the fake mesh's"));
      }
    }
    compare_reports(real.report, fake.report, w, log);
  }
}

void check_layer_run(Communicator& comm, const std::string& plan, std::uint64_t seed, CheckLog& log) {
  CaseSpec c;
  c.mesh = comm.mesh().str();
  c.plan = plan;
  c.seed = seed;
  c.experts = 4;
  c.dim = 256;
  c.hidden = 256;
  c.tokens = 512;
  c.offs = {128, 256, 384, 512};
  c.gemm.mode = Mode::promote_fp32;
  c.reduce = {ReduceOrder::ring, ReduceDtype::fp32};
  c.lr = 0.25f;
  const std::string w = cat("run_layer plan ", plan, " on mesh ", c.mesh, " (seed ", seed, ", rank ", comm.local_ranks().at(0), ")");
  LayerRun real, fake;
  ScenarioReport rr, fr;
  std::string real_err, fake_err;
  try {
    rr = run_layer(c, &real, nullptr, nullptr, &comm);
  } catch (const std::exception& e) {
    real_err = e.what();
  }
  try {
    fr = run_layer(c, &fake);
  } catch (const std::exception& e) {
    fake_err = e.what();
  }
  ++log.calls;
  if (!fake_err.empty() || real_err != fake_err) {
    log.bad(cat(w, ": raised '", real_err, "', the fake mesh '", fake_err, "'"));
    return;
  }
  const auto a = named_outputs(real.out), b = named_outputs(fake.out);
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!same_tensor(*a[i].second, *b[i].second)) log.bad(cat(w, ": ", a[i].first, " differs from the fake mesh's"));
    for (float v : a[i].second->data) {
      if (!std::isfinite(v)) {
        log.bad(cat(w, ": ", a[i].first, " has a non-finite value"));
        break;
      }
    }
  }
  if (a.size() != b.size() || a.empty()) log.bad(cat(w, ": ", a.size(), " outputs, the fake mesh's ", b.size()));
  compare_reports(rr, fr, w, log);
}

}  // namespace fp8moe::test
