// CudaFakeCommunicator: every rank on one GPU (see the header for the staging rules). Each
// collective checks the whole call with FakeCommunicator's checks (communicator.hpp, inproc),
// declares its buffers, runs on their device images, and books CommStats with the same
// functions; tests/sim/test_cuda_fake_comm.cpp holds the two equal.
#include "sim/comm/cuda_fake_communicator.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/check.hpp"
#include "kernels/comm_reduce.hpp"
#include "reference/error.hpp"
#include "sim/comm/runtime_impl.hpp"
#include "sim/mesh/placement.hpp"

namespace fp8moe::sim {
namespace {

constexpr std::size_t kAlign = 256;        // every staged image starts 256-byte aligned (cudaMalloc's)
constexpr std::size_t kGrain = 1u << 20;   // the arena grows in whole MiB

std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

std::string describe(const char* what, const Group& g) {
  std::string s = cat("fake-gpu ", what, " over ranks [");
  for (std::size_t i = 0; i < g.size(); ++i) s += cat(i ? "," : "", g[i]);
  return s + "]";
}

// Makes `device` current for a scope and restores the caller's device after it.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    FP8MOE_CUDA_CHECK(cudaGetDevice(&prev_), "fake-gpu communicator");
    if (prev_ != device) FP8MOE_CUDA_CHECK(cudaSetDevice(device), "fake-gpu communicator on device ", device);
    changed_ = prev_ != device;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(prev_);  // never throws from a destructor
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

}  // namespace

// The CUDA state, and the device images of the collective in progress: declare every buffer
// (input / output / inout / scratch), begin() lays the staged ones out in the arena and uploads
// the host inputs, dev(i) is buffer i's image, end() downloads the host outputs and synchronizes.
struct CudaFakeCommunicator::Impl {
  struct Buf {
    const std::byte* host_in = nullptr;  // upload from here before the collective (host inputs)
    std::byte* host_out = nullptr;       // download to here after it (host outputs)
    std::byte* device = nullptr;         // the image: the caller's device memory, or an arena slot
    std::size_t bytes = 0;
    std::size_t offset = 0;              // in the arena, when staged
    bool staged = false;
  };

  int device = 0;
  cudaStream_t stream = nullptr;
  std::byte* arena = nullptr;
  std::size_t capacity = 0;
  int allocations = 0;
  std::string what;               // the collective in progress, for error messages
  std::vector<Buf> bufs;
  std::vector<std::byte> meta;    // host image of the reduction tables; lives until the call synchronizes

  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    if (arena) cudaFree(arena);
    if (stream) cudaStreamDestroy(stream);
  }

  void start(std::string w) {
    what = std::move(w);
    bufs.clear();
    meta.clear();
  }

  // The caller's pointer when it is device memory of this device (used in place), else nullptr.
  std::byte* device_image(const void* p) const {
    if (!p) return nullptr;
    cudaPointerAttributes a{};
    FP8MOE_CUDA_CHECK(cudaPointerGetAttributes(&a, p), what);
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return nullptr;
    if (a.device != device) {
      fail(what, ": a buffer lives on CUDA device ", a.device, " but this fake-gpu communicator runs on device ", device);
    }
    return static_cast<std::byte*>(const_cast<void*>(p));
  }

  int add(const std::byte* in, std::byte* out, std::size_t bytes) {
    Buf b;
    b.bytes = bytes;
    if (bytes > 0) {
      b.device = device_image(in ? static_cast<const void*>(in) : out);
      b.staged = b.device == nullptr;
      if (b.staged) {
        b.host_in = in;
        b.host_out = out;
      }
    }
    bufs.push_back(b);
    return static_cast<int>(bufs.size() - 1);
  }
  int input(const std::byte* p, std::size_t bytes) { return add(p, nullptr, bytes); }
  int output(std::byte* p, std::size_t bytes) { return add(nullptr, p, bytes); }
  int inout(std::byte* p, std::size_t bytes) { return add(p, p, bytes); }
  int scratch(std::size_t bytes) {
    Buf b;
    b.bytes = bytes;
    b.staged = bytes > 0;
    bufs.push_back(b);
    return static_cast<int>(bufs.size() - 1);
  }

  // Grows the arena to hold `need` bytes (rounded up to kGrain); keeps it when it already does.
  void reserve(std::size_t need) {
    if (need <= capacity) return;
    const std::size_t want = round_up(need, kGrain);
    FP8MOE_CUDA_CHECK(cudaStreamSynchronize(stream), what, ": before growing the staging arena");
    if (arena) FP8MOE_CUDA_CHECK(cudaFree(arena), what, ": freeing the staging arena of ", capacity, " bytes");
    arena = nullptr;
    capacity = 0;
    kernels::require_device_memory(want, cat(what, " (staging arena of ", want, " bytes)"));
    void* p = nullptr;
    FP8MOE_CUDA_CHECK(cudaMalloc(&p, want), what, ": staging arena of ", want, " bytes");
    arena = static_cast<std::byte*>(p);
    capacity = want;
    ++allocations;
  }

  void begin() {
    std::size_t need = 0;
    for (Buf& b : bufs) {
      if (!b.staged) continue;
      b.offset = need;
      need += round_up(b.bytes, kAlign);
    }
    reserve(need);
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      Buf& b = bufs[i];
      if (!b.staged) continue;
      b.device = arena + b.offset;
      if (b.host_in) {
        FP8MOE_CUDA_CHECK(cudaMemcpyAsync(b.device, b.host_in, b.bytes, cudaMemcpyHostToDevice, stream), what,
                          ": uploading buffer ", i, " of ", b.bytes, " bytes");
      }
    }
  }

  std::byte* dev(int i) const { return bufs[static_cast<std::size_t>(i)].device; }

  // dst == src happens for an in-place all_gather on device memory: nothing to move (and
  // cudaMemcpy's areas must not overlap).
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes, const char* which) {
    if (bytes == 0 || dst == src) return;
    FP8MOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), what, ": ", which, ", ",
                      bytes, " bytes");
  }

  // Uploads the reduction tables (member pointers, chunks) into scratch buffer `slot` and launches
  // the reduction kernel.
  void reduce(int slot, const std::vector<const float*>& members, const std::vector<kernels::CommReduceChunk>& chunks,
              const ReduceOptions& opt) {
    if (chunks.empty()) return;
    const std::size_t ptr_bytes = round_up(members.size() * sizeof(const float*), alignof(kernels::CommReduceChunk));
    const std::size_t chunk_bytes = chunks.size() * sizeof(kernels::CommReduceChunk);
    if (ptr_bytes + chunk_bytes > bufs[static_cast<std::size_t>(slot)].bytes) fail(what, ": reduction table slot too small");
    meta.assign(ptr_bytes + chunk_bytes, std::byte{0});
    std::memcpy(meta.data(), members.data(), members.size() * sizeof(const float*));
    std::memcpy(meta.data() + ptr_bytes, chunks.data(), chunk_bytes);
    std::byte* d = dev(slot);
    FP8MOE_CUDA_CHECK(cudaMemcpyAsync(d, meta.data(), meta.size(), cudaMemcpyHostToDevice, stream), what,
                      ": uploading the reduction tables, ", meta.size(), " bytes");
    std::int64_t max_count = 0;
    for (const auto& c : chunks) max_count = std::max(max_count, c.count);
    kernels::comm_reduce_chunks(reinterpret_cast<const float* const*>(d), static_cast<int>(members.size()),
                                reinterpret_cast<const kernels::CommReduceChunk*>(d + ptr_bytes),
                                static_cast<int>(chunks.size()), max_count,
                                opt.order,
                                opt.dtype == ReduceDtype::bf16, stream);
  }
  static std::size_t table_bytes(std::size_t members, std::size_t chunks) {
    return round_up(members * sizeof(const float*), alignof(kernels::CommReduceChunk)) +
           chunks * sizeof(kernels::CommReduceChunk);
  }

  void end() {
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      const Buf& b = bufs[i];
      if (!b.staged || !b.host_out) continue;
      FP8MOE_CUDA_CHECK(cudaMemcpyAsync(b.host_out, b.device, b.bytes, cudaMemcpyDeviceToHost, stream), what,
                        ": downloading buffer ", i, " of ", b.bytes, " bytes");
    }
    FP8MOE_CUDA_CHECK(cudaStreamSynchronize(stream), what);
  }
};

CudaFakeCommunicator::CudaFakeCommunicator(Mesh mesh) : Communicator(std::move(mesh)), impl_(std::make_unique<Impl>()) {
  if (kernels::cuda_device_count() == 0) {
    fail("--runtime fake-gpu (mesh ", mesh_.str(), ") needs a CUDA device, but cudaGetDeviceCount found none: ",
         "use --runtime fake, or run on a GPU machine");
  }
  FP8MOE_CUDA_CHECK(cudaGetDevice(&impl_->device), "fake-gpu communicator for mesh ", mesh_.str());
  FP8MOE_CUDA_CHECK(cudaStreamCreate(&impl_->stream), "fake-gpu communicator for mesh ", mesh_.str(), " on device ",
                    impl_->device);
}

CudaFakeCommunicator::~CudaFakeCommunicator() = default;

std::size_t CudaFakeCommunicator::arena_bytes() const { return impl_->capacity; }
int CudaFakeCommunicator::arena_allocations() const { return impl_->allocations; }

std::vector<int> CudaFakeCommunicator::local_ranks() const { return inproc::all_ranks(mesh_); }

void CudaFakeCommunicator::all_gather(const Group& g, std::span<const ConstBytes> send, std::span<const Bytes> recv) {
  const std::size_t total = inproc::check_all_gather(g, send, recv);
  const std::size_t n = g.size();
  {
    const DeviceScope scope(impl_->device);
    Impl& im = *impl_;
    im.start(describe("all_gather", g));
    std::vector<int> s(n), r(n);
    for (std::size_t i = 0; i < n; ++i) s[i] = im.input(send[i].data(), send[i].size());
    for (std::size_t j = 0; j < n; ++j) r[j] = im.output(recv[j].data(), total);
    im.begin();
    for (std::size_t j = 0; j < n; ++j) {
      std::size_t off = 0;
      for (std::size_t i = 0; i < n; ++i) {
        im.copy(im.dev(r[j]) + off, im.dev(s[i]), send[i].size(), "member shard into a receive buffer");
        off += send[i].size();
      }
    }
    im.end();
  }
  inproc::book_all_gather(stats_, g, send);
}

void CudaFakeCommunicator::all_to_all(const Group& g, const std::vector<std::vector<ConstBytes>>& send,
                                      const std::vector<std::vector<Bytes>>& recv) {
  inproc::check_all_to_all(g, send, recv);
  const std::size_t n = g.size();
  {
    const DeviceScope scope(impl_->device);
    Impl& im = *impl_;
    im.start(describe("all_to_all", g));
    std::vector<int> s(n * n), r(n * n);  // (i, j) at i * n + j: member i to member j
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        s[i * n + j] = im.input(send[i][j].data(), send[i][j].size());
        r[i * n + j] = im.output(recv[j][i].data(), recv[j][i].size());
      }
    }
    im.begin();
    for (std::size_t k = 0; k < n * n; ++k) {
      im.copy(im.dev(r[k]), im.dev(s[k]), send[k / n][k % n].size(), "member to member");
    }
    im.end();
  }
  inproc::book_all_to_all(stats_, g, send);
}

void CudaFakeCommunicator::broadcast(const Group& g, int root_pos, std::span<const Bytes> bufs) {
  const std::size_t bytes = inproc::check_broadcast(g, root_pos, bufs);
  const std::size_t n = g.size(), root = static_cast<std::size_t>(root_pos);
  {
    const DeviceScope scope(impl_->device);
    Impl& im = *impl_;
    im.start(describe("broadcast", g));
    std::vector<int> b(n);
    for (std::size_t j = 0; j < n; ++j) b[j] = j == root ? im.input(bufs[j].data(), bytes) : im.output(bufs[j].data(), bytes);
    im.begin();
    for (std::size_t j = 0; j < n; ++j) {
      if (j != root) im.copy(im.dev(b[j]), im.dev(b[root]), bytes, "root into a member");
    }
    im.end();
  }
  inproc::book_broadcast(stats_, g, root_pos, bytes);
}

void CudaFakeCommunicator::reduce_scatter(const Group& g, std::span<const ConstFloats> send, std::span<const Floats> recv,
                                          std::span<const std::int64_t> counts, const ReduceOptions& opt) {
  inproc::check_reduce_scatter(g, send, recv, counts);
  const std::size_t n = g.size();
  {
    const DeviceScope scope(impl_->device);
    Impl& im = *impl_;
    im.start(describe("reduce_scatter", g));
    std::vector<int> s(n), r(n);
    for (std::size_t i = 0; i < n; ++i) {
      s[i] = im.input(reinterpret_cast<const std::byte*>(send[i].data()), send[i].size_bytes());
    }
    for (std::size_t j = 0; j < n; ++j) r[j] = im.output(reinterpret_cast<std::byte*>(recv[j].data()), recv[j].size_bytes());
    const int tables = im.scratch(Impl::table_bytes(n, n));
    im.begin();
    std::vector<const float*> members(n);
    for (std::size_t i = 0; i < n; ++i) members[i] = reinterpret_cast<const float*>(im.dev(s[i]));
    std::vector<kernels::CommReduceChunk> chunks;
    std::int64_t off = 0;
    for (std::size_t j = 0; j < n; ++j) {
      if (counts[j] > 0) chunks.push_back({off, counts[j], reinterpret_cast<float*>(im.dev(r[j])), static_cast<int>(j)});
      off += counts[j];
    }
    im.reduce(tables, members, chunks, opt);
    im.end();
  }
  inproc::book_reduce_scatter(stats_, g, counts, opt);
}

void CudaFakeCommunicator::all_reduce(const Group& g, std::span<const Floats> inout, const ReduceOptions& opt) {
  const std::int64_t count = inproc::check_all_reduce(g, inout);
  const std::size_t n = g.size();
  {
    const DeviceScope scope(impl_->device);
    Impl& im = *impl_;
    im.start(describe("all_reduce", g));
    std::vector<int> io(n);
    for (std::size_t i = 0; i < n; ++i) io[i] = im.inout(reinterpret_cast<std::byte*>(inout[i].data()), inout[i].size_bytes());
    const std::size_t result_bytes = static_cast<std::size_t>(count) * sizeof(float);
    const int result = im.scratch(result_bytes);
    const int tables = im.scratch(Impl::table_bytes(n, n));
    im.begin();
    std::vector<const float*> members(n);
    for (std::size_t i = 0; i < n; ++i) members[i] = reinterpret_cast<const float*>(im.dev(io[i]));
    float* out = reinterpret_cast<float*>(im.dev(result));
    // As FakeCommunicator: a ring all-reduce is a reduce-scatter of n chunks (chunk c owned by c)
    // then an all-gather; ascending is one chunk.
    std::vector<kernels::CommReduceChunk> chunks;
    for (std::size_t c = 0; c < n; ++c) {
      const Range rg = opt.order == ReduceOrder::ring ? chunk(count, static_cast<int>(n), static_cast<int>(c))
                                                      : Range{c == 0 ? 0 : count, count};
      if (rg.size() > 0) chunks.push_back({rg.begin, rg.size(), out + rg.begin, static_cast<int>(c)});
    }
    im.reduce(tables, members, chunks, opt);
    for (std::size_t i = 0; i < n; ++i) {
      im.copy(im.dev(io[i]), reinterpret_cast<const std::byte*>(out), result_bytes, "the reduced values into a member");
    }
    im.end();
  }
  inproc::book_all_reduce(stats_, g, count, opt);
}

namespace detail {

std::unique_ptr<Communicator> make_fake_gpu_communicator(const Mesh& mesh) {
  return std::make_unique<CudaFakeCommunicator>(mesh);
}

}  // namespace detail
}  // namespace fp8moe::sim
