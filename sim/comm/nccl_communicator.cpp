#include "sim/comm/nccl_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace fp8moe::sim::nccl {

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult(unknown)";
  }
}

void check(ncclResult_t r, const char* call, int rank, const std::string& ctx, ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  fail("NCCL error: rank ", rank, ": ", call, " returned ", result_name(r), " (", ncclGetErrorString(r), ")",
       last && *last ? std::string(": ") + last : std::string(), " [", ctx, "]");
}

void check_cuda(cudaError_t e, const char* call, int rank, const std::string& ctx) {
  if (e == cudaSuccess) return;
  fail("CUDA error: rank ", rank, ": ", call, " returned ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") [", ctx,
       "]");
}

// The call's text in the message: FP8MOE_NCCL(ctx, ncclSend(...), "sizes ...").
#define FP8MOE_NCCL(rank, comm, call, ...) ::fp8moe::sim::nccl::check((call), #call, (rank), ::fp8moe::cat(__VA_ARGS__), (comm))
#define FP8MOE_CUDA(rank, call, ...) ::fp8moe::sim::nccl::check_cuda((call), #call, (rank), ::fp8moe::cat(__VA_ARGS__))

void set_multicast_env() {
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  ::setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  ::setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
}

std::string nccl_version() {
  int v = 0;
  FP8MOE_NCCL(-1, nullptr, ncclGetVersion(&v), "version query");
  return cat(v / 10000, ".", v / 100 % 100, ".", v % 100);  // NCCL >= 2.9: X * 10000 + Y * 100 + Z
}

std::string device_description(int device) {
  cudaDeviceProp p{};
  FP8MOE_CUDA(-1, cudaGetDeviceProperties(&p, device), "device ", device);
  char bus[64] = {};
  FP8MOE_CUDA(-1, cudaDeviceGetPCIBusId(bus, sizeof bus, device), "device ", device);
  return cat(p.name, " (", bus, ")");
}

namespace {

ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// ---- RankContext ----

RankContext::~RankContext() {
  try {
    destroy();
  } catch (...) {  // teardown: nothing left to report to
  }
}

void RankContext::init(const ncclUniqueId& id) {
  FP8MOE_CUDA(rank, cudaSetDevice(device), "device ", device);
  if (!stream) FP8MOE_CUDA(rank, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "device ", device);
  ncclConfig_t cfg = nonblocking_config();
  FP8MOE_NCCL(rank, comm, ncclCommInitRankConfig(&comm, world, id, rank, &cfg), "world ", world, ", device ", device);
  wait(cat("ncclCommInitRankConfig (world ", world, ", device ", device, ")"), comm, nullptr, false);
}

void RankContext::wait(const std::string& what, ncclComm_t a, ncclComm_t b, bool on_stream) {
  const auto start = std::chrono::steady_clock::now();
  for (long spin = 0;; ++spin) {
    bool done = true;
    for (ncclComm_t c : {a, b}) {
      if (!c) continue;
      ncclResult_t st = ncclSuccess;
      FP8MOE_NCCL(rank, c, ncclCommGetAsyncError(c, &st), what);
      if (st == ncclInProgress) {
        done = false;
      } else if (st != ncclSuccess) {
        const char* last = ncclGetLastError(c);
        abort_and_throw(cat("NCCL error: rank ", rank, ": ", what, ": ", result_name(st), " (", ncclGetErrorString(st),
                            ")", last && *last ? std::string(": ") + last : std::string(), "; communicators aborted"),
                        false);
      }
    }
    // The communicators first: once they report success their work is on the stream.
    if (done && on_stream) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaErrorNotReady) {
        done = false;
      } else if (q != cudaSuccess) {
        abort_and_throw(cat("CUDA error: rank ", rank, ": ", what, ": cudaStreamQuery returned ", cudaGetErrorName(q), " (",
                            cudaGetErrorString(q), "); communicators aborted"),
                        false);
      }
    }
    if (done) return;
    if (abort && abort->load()) {
      abort_and_throw(cat("rank ", rank, ": ", what, " was aborted because another rank failed"), true);
    }
    if (seconds_since(start) > timeout_s) {
      abort_and_throw(cat("rank ", rank, ": ", what, " did not finish within ", timeout_s,
                          " s (a rank died, stalled or made a different call); NCCL communicators aborted"),
                      false);
    }
    if (spin < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spin < 20000 ? 20 : 200));
    }
  }
}

void RankContext::abort_all() {
  cudaSetDevice(device);
  for (auto& kv : dims) {
    if (kv.second) ncclCommAbort(kv.second);
  }
  for (auto& kv : groups) {
    if (kv.second) ncclCommAbort(kv.second);
  }
  if (comm) ncclCommAbort(comm);
  dims.clear();
  groups.clear();
  comm = nullptr;
  broken = true;
}

void RankContext::abort_and_throw(const std::string& msg, bool peer) {
  abort_all();
  if (peer) throw PeerAborted(msg);
  throw Error(msg);
}

void RankContext::destroy() { destroy_all({this}); }

void destroy_all(const std::vector<RankContext*>& ranks) {
  // Finalize every communicator first (non-blocking), wait for all, then destroy: one thread may
  // hold every rank of a world, and a rank's finalize waits for its peers'.
  struct Item {
    RankContext* r;
    ncclComm_t c;
  };
  std::vector<Item> items;
  for (RankContext* r : ranks) {
    if (!r) continue;
    cudaSetDevice(r->device);
    for (auto& kv : r->dims) {
      if (kv.second) items.push_back({r, kv.second});
    }
    for (auto& kv : r->groups) {
      if (kv.second) items.push_back({r, kv.second});
    }
    if (r->comm) items.push_back({r, r->comm});
    r->dims.clear();
    r->groups.clear();
    r->comm = nullptr;
  }
  std::vector<bool> ok(items.size(), true);
  for (std::size_t i = 0; i < items.size(); ++i) {
    cudaSetDevice(items[i].r->device);
    const ncclResult_t f = ncclCommFinalize(items[i].c);
    ok[i] = f == ncclSuccess || f == ncclInProgress;
  }
  const auto start = std::chrono::steady_clock::now();
  for (bool pending = true; pending;) {
    pending = false;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!ok[i]) continue;
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(items[i].c, &st) != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
        ok[i] = false;
      } else if (st == ncclInProgress) {
        pending = true;
      }
    }
    if (pending && seconds_since(start) > 30) break;
    if (pending) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    cudaSetDevice(items[i].r->device);
    ncclResult_t st = ncclInProgress;
    if (ok[i]) ncclCommGetAsyncError(items[i].c, &st);
    if (ok[i] && st == ncclSuccess) {
      ncclCommDestroy(items[i].c);
    } else {
      ncclCommAbort(items[i].c);
    }
  }
  for (RankContext* r : ranks) {
    if (!r) continue;
    cudaSetDevice(r->device);
    if (r->send_stage) cudaFree(r->send_stage);
    if (r->recv_stage) cudaFree(r->recv_stage);
    if (r->stream) cudaStreamDestroy(r->stream);
    r->send_stage = r->recv_stage = nullptr;
    r->send_cap = r->recv_cap = 0;
    r->stream = nullptr;
  }
}

void RankContext::ensure_stage(std::size_t send_bytes, std::size_t recv_bytes) {
  auto grow = [&](void*& p, std::size_t& cap, std::size_t need, const char* which) {
    if (need <= cap) return;
    const std::size_t to = std::max({need, 2 * cap, std::size_t{1} << 20});
    if (p) FP8MOE_CUDA(rank, cudaFree(p), which, " staging buffer of ", cap, " bytes");
    p = nullptr;
    cap = 0;
    FP8MOE_CUDA(rank, cudaMalloc(&p, to), which, " staging buffer of ", to, " bytes on device ", device);
    cap = to;
  };
  grow(send_stage, send_cap, send_bytes, "send");
  grow(recv_stage, recv_cap, recv_bytes, "receive");
}

namespace {

using I64 = std::int64_t;

constexpr std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

class NcclTransport final : public RankTransport {
 public:
  NcclTransport(const Mesh& mesh, RankContext& ctx) : mesh_(mesh), c_(ctx) {}
  std::string name() const override { return "nccl"; }

  void exchange_headers(std::span<const I64> mine, std::span<I64> all, const CommCall& call) override {
    const std::string what = call.describe(mesh_) + " (size agreement)";
    const std::size_t mb = mine.size_bytes(), ab = all.size_bytes();
    c_.ensure_stage(mb, ab);
    FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(c_.send_stage, mine.data(), mb, cudaMemcpyHostToDevice, c_.stream), what, ", ", mb,
                " bytes");
    FP8MOE_NCCL(c_.rank, c_.comm, ncclAllGather(c_.send_stage, c_.recv_stage, mine.size(), ncclInt64, c_.comm, c_.stream),
                what, ", ", mine.size(), " int64 per rank");
    c_.wait(what, c_.comm, nullptr, true);
    FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(all.data(), c_.recv_stage, ab, cudaMemcpyDeviceToHost, c_.stream), what, ", ", ab,
                " bytes");
    c_.wait(what, nullptr, nullptr, true);
  }

  void prepare_group(const Group& g, const CommCall& call) override {
    if (g.size() > 1) comm_for(g, call);
  }

  void all_gatherv(const Group& g, int me, ConstBytes mine, Bytes recv, std::span<const I64> sizes,
                   const CommCall& call) override {
    const std::string what = cat(call.describe(mesh_), " (", mine.size(), " bytes from this rank, ", recv.size(), " in all)");
    const std::size_t n = g.size();
    const bool sdev = on_device(mine.data()), rdev = on_device(recv.data());
    c_.ensure_stage(sdev ? 0 : mine.size(), rdev ? 0 : recv.size());
    const std::byte* s = sdev ? mine.data() : static_cast<const std::byte*>(c_.send_stage);
    std::byte* d = rdev ? recv.data() : static_cast<std::byte*>(c_.recv_stage);
    if (!sdev && !mine.empty()) h2d(c_.send_stage, mine.data(), mine.size(), what);
    std::vector<std::size_t> off(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) off[i + 1] = off[i] + static_cast<std::size_t>(sizes[i]);
    const std::size_t m = static_cast<std::size_t>(me);
    ncclComm_t comm = n > 1 ? comm_for(g, call) : nullptr;
    if (comm) {
      FP8MOE_NCCL(c_.rank, comm, ncclGroupStart(), what);
      for (std::size_t j = 0; j < n; ++j) {
        if (j == m) continue;
        const int peer = static_cast<int>(j);
        if (sizes[m] > 0) {
          FP8MOE_NCCL(c_.rank, comm, ncclSend(s, static_cast<std::size_t>(sizes[m]), ncclUint8, peer, comm, c_.stream), what,
                      ", to member ", j);
        }
        if (sizes[j] > 0) {
          FP8MOE_NCCL(c_.rank, comm,
                      ncclRecv(d + off[j], static_cast<std::size_t>(sizes[j]), ncclUint8, peer, comm, c_.stream), what,
                      ", ", sizes[j], " bytes from member ", j);
        }
      }
      FP8MOE_NCCL(c_.rank, comm, ncclGroupEnd(), what);
      c_.wait(what, comm, nullptr, false);
    }
    if (sizes[m] > 0) d2d(d + off[m], s, static_cast<std::size_t>(sizes[m]), what);
    c_.wait(what, comm, nullptr, true);
    if (!rdev && !recv.empty()) d2h(recv.data(), c_.recv_stage, recv.size(), what);
  }

  void all_to_allv(const Group& g, int me, std::span<const ConstBytes> to, std::span<const Bytes> from,
                   const CommCall& call) override {
    const std::size_t n = g.size(), m = static_cast<std::size_t>(me);
    I64 out = 0, in = 0;
    for (std::size_t j = 0; j < n; ++j) {
      out += static_cast<I64>(to[j].size());
      in += static_cast<I64>(from[j].size());
    }
    const std::string what = cat(call.describe(mesh_), " (", out, " bytes out, ", in, " in)");
    // Where each piece lies on the device: its own memory, or a slot of the staging buffers.
    std::vector<const std::byte*> s(n);
    std::vector<std::byte*> d(n);
    std::vector<bool> sdev(n), rdev(n);
    std::size_t so = 0, ro = 0;
    std::vector<std::size_t> soff(n), roff(n);
    for (std::size_t j = 0; j < n; ++j) {
      sdev[j] = on_device(to[j].data());
      rdev[j] = on_device(from[j].data());
      soff[j] = so;
      roff[j] = ro;
      if (!sdev[j]) so += align_up(to[j].size());
      if (!rdev[j]) ro += align_up(from[j].size());
    }
    c_.ensure_stage(so, ro);
    for (std::size_t j = 0; j < n; ++j) {
      s[j] = sdev[j] ? to[j].data() : static_cast<const std::byte*>(c_.send_stage) + soff[j];
      d[j] = rdev[j] ? from[j].data() : static_cast<std::byte*>(c_.recv_stage) + roff[j];
      if (!sdev[j] && !to[j].empty()) h2d(const_cast<std::byte*>(s[j]), to[j].data(), to[j].size(), what);
    }
    ncclComm_t comm = n > 1 ? comm_for(g, call) : nullptr;
    if (comm) {
      FP8MOE_NCCL(c_.rank, comm, ncclGroupStart(), what);
      for (std::size_t j = 0; j < n; ++j) {
        if (j == m) continue;
        const int peer = static_cast<int>(j);
        if (!to[j].empty()) {
          FP8MOE_NCCL(c_.rank, comm, ncclSend(s[j], to[j].size(), ncclUint8, peer, comm, c_.stream), what, ", ",
                      to[j].size(), " bytes to member ", j);
        }
        if (!from[j].empty()) {
          FP8MOE_NCCL(c_.rank, comm, ncclRecv(d[j], from[j].size(), ncclUint8, peer, comm, c_.stream), what, ", ",
                      from[j].size(), " bytes from member ", j);
        }
      }
      FP8MOE_NCCL(c_.rank, comm, ncclGroupEnd(), what);
      c_.wait(what, comm, nullptr, false);
    }
    if (!to[m].empty()) d2d(d[m], s[m], to[m].size(), what);
    c_.wait(what, comm, nullptr, true);
    bool copied = false;
    for (std::size_t j = 0; j < n; ++j) {
      if (rdev[j] || from[j].empty()) continue;
      FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(from[j].data(), d[j], from[j].size(), cudaMemcpyDeviceToHost, c_.stream), what,
                  ", ", from[j].size(), " bytes from member ", j);
      copied = true;
    }
    if (copied) c_.wait(what, nullptr, nullptr, true);
  }

  void broadcast(const Group& g, int me, int root, Bytes buf, const CommCall& call) override {
    if (g.size() == 1 || buf.empty()) return;
    const std::string what = cat(call.describe(mesh_), " (", buf.size(), " bytes from position ", root, ")");
    const bool dev = on_device(buf.data());
    c_.ensure_stage(0, dev ? 0 : buf.size());
    std::byte* d = dev ? buf.data() : static_cast<std::byte*>(c_.recv_stage);
    if (!dev && me == root) h2d(d, buf.data(), buf.size(), what);
    ncclComm_t comm = comm_for(g, call);
    FP8MOE_NCCL(c_.rank, comm, ncclBroadcast(d, d, buf.size(), ncclUint8, root, comm, c_.stream), what);
    c_.wait(what, comm, nullptr, false);
    c_.wait(what, comm, nullptr, true);
    if (!dev && me != root) d2h(buf.data(), d, buf.size(), what);
  }

  void copy(Bytes dst, ConstBytes src) override {
    if (src.empty()) return;
    if (!on_device(dst.data()) && !on_device(src.data())) {
      std::memcpy(dst.data(), src.data(), src.size());
      return;
    }
    FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(dst.data(), src.data(), src.size(), cudaMemcpyDefault, c_.stream), "local copy of ",
                src.size(), " bytes");
    c_.wait("a local copy", nullptr, nullptr, true);
  }

 private:
  bool on_device(const void* p) const {
    if (!p) return false;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
      return false;
    }
    return (a.type == cudaMemoryTypeDevice && a.device == c_.device) || a.type == cudaMemoryTypeManaged;
  }

  void h2d(void* dst, const void* src, std::size_t n, const std::string& what) {
    FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c_.stream), what, ", staging ", n, " bytes in");
  }
  void d2d(void* dst, const void* src, std::size_t n, const std::string& what) {
    FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c_.stream), what, ", ", n,
                " bytes to itself");
  }
  void d2h(void* dst, const void* src, std::size_t n, const std::string& what) {
    FP8MOE_CUDA(c_.rank, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c_.stream), what, ", staging ", n,
                " bytes out");
    c_.wait(what, nullptr, nullptr, true);
  }

  // This rank's communicator for group g (nullptr when it is no member). A group of a mesh dim:
  // one ncclCommSplit of the mesh per dim, every rank taking its own group's colour; any other
  // group: a split with NCCL_SPLIT_NOCOLOR outside it. All ranks make the same calls, so the
  // caches agree and every split is called by every rank at once.
  ncclComm_t comm_for(const Group& g, const CommCall& call) {
    const int n = static_cast<int>(g.size());
    for (int d = 0; d < mesh_.ndim(); ++d) {
      if (mesh_.size(d) != n || mesh_.group(g[0], d) != g) continue;
      const std::string key = cat(mesh_.str(), "/", d);
      auto it = c_.dims.find(key);
      if (it == c_.dims.end()) {
        const std::vector<std::vector<int>> all = mesh_.groups(d);
        const std::vector<int> mine = mesh_.group(c_.rank, d);
        int colour = 0;
        while (all[static_cast<std::size_t>(colour)] != mine) ++colour;
        it = c_.dims.emplace(key, split(colour, mesh_.coord(c_.rank, d), call)).first;
      }
      return std::find(g.begin(), g.end(), c_.rank) != g.end() ? it->second : nullptr;
    }
    auto it = c_.groups.find(g);
    if (it == c_.groups.end()) {
      const auto pos = std::find(g.begin(), g.end(), c_.rank);
      const bool member = pos != g.end();
      it = c_.groups.emplace(g, split(member ? 0 : NCCL_SPLIT_NOCOLOR, member ? static_cast<int>(pos - g.begin()) : 0, call))
               .first;
    }
    return it->second;
  }

  ncclComm_t split(int colour, int key, const CommCall& call) {
    ncclConfig_t cfg = nonblocking_config();
    ncclComm_t c = nullptr;
    const std::string what = cat(call.describe(mesh_), " (ncclCommSplit, colour ", colour, ")");
    FP8MOE_NCCL(c_.rank, c_.comm, ncclCommSplit(c_.comm, colour, key, &c, &cfg), what);
    c_.wait(what, c_.comm, c, false);
    return c;
  }

  const Mesh mesh_;
  RankContext& c_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Mesh& mesh, RankContext& ctx) {
  if (!ctx.comm) fail("nccl communicator: rank ", ctx.rank, " has no NCCL communicator (not initialised or aborted)");
  if (ctx.world != mesh.world()) fail("nccl communicator: rank ", ctx.rank, " was set up for ", ctx.world, " ranks, mesh ", mesh.str(), " has ", mesh.world());
  FP8MOE_CUDA(ctx.rank, cudaSetDevice(ctx.device), "device ", ctx.device);
  return std::make_unique<RankCommunicator>(mesh, ctx.rank, std::make_unique<NcclTransport>(mesh, ctx));
}

}  // namespace fp8moe::sim::nccl
