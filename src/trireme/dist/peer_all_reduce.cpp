// PeerAllReduce: copy-engine all-reduce between the GPUs of one host (Note [peer all-reduce]).
// Built with NCCL only (the header needs the CUDA runtime).
#ifdef TRIREME_WITH_NCCL

#include "trireme/dist/peer_all_reduce.h"

#include <cuda.h>  // the stream memory operations' types; the functions come from the runtime
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/hex.h"
#include "trireme/kernels/cuda/peer_sum.h"

namespace trireme::dist {

namespace {

using Clock = std::chrono::steady_clock;

// cuStreamWaitValue32 and cuStreamWriteValue32, looked up through the runtime so that the
// library does not link libcuda itself.
using StreamValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
struct MemOps {
  StreamValue32 wait = nullptr;
  StreamValue32 write = nullptr;
  std::string error;  // why they are unusable
};

const MemOps& mem_ops() {
  static const MemOps ops = [] {
    MemOps m;
    auto find = [&](const char* name) -> StreamValue32 {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult status{};
      if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
          status != cudaDriverEntryPointSuccess || fn == nullptr) {
        m.error = str_cat("the CUDA driver has no ", name);
        return nullptr;
      }
      return reinterpret_cast<StreamValue32>(fn);
    };
    m.wait = find("cuStreamWaitValue32");
    m.write = find("cuStreamWriteValue32");
    return m;
  }();
  return ops;
}

void check_cu(CUresult r, const char* what) {
  TRIREME_CHECK(r == CUDA_SUCCESS, "peer all-reduce: ", what, " failed with CUDA driver error ", int(r));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

// A rank's flags: ready[j] and consumed[j] as written by peer j. They live in host shared
// memory (POSIX shm, mapped into every rank's process and registered with CUDA), so the host can
// read them (is everything consumed?) and write them (release()) without going through a GPU
// stream that may be blocked on one of them.
constexpr int kMaxRanks = cuda_kernels::kMaxPeerSumInputs;
struct Flags {
  std::atomic<uint32_t> ready[kMaxRanks];
  std::atomic<uint32_t> consumed[kMaxRanks];
};
constexpr size_t kFlagsBytes = 4096;
static_assert(sizeof(Flags) <= kFlagsBytes);

}  // namespace

struct PeerAllReduce::Impl {
  Options o;
  // Per rank (this one included): its staging region as mapped here, its flags as mapped here
  // and their device address.
  std::vector<char*> region;
  std::vector<Flags*> flags;
  std::vector<CUdeviceptr> flags_dev;
  std::string shm_name;
  uint32_t seq = 0;
  // The open staged op (Note [staged reduce-scatter], Note [staged all-gather]): its sequence
  // number (0: none open), what it is, and which of a reduce-scatter's chunks have gone out.
  uint32_t staged_seq = 0;
  const char* staged_kind = "";
  std::vector<bool> staged_sent;           // chunk j complete (its flag written)
  std::vector<int64_t> staged_sent_elems;  // how much of chunk j has gone (-1: not started)
  bool opened = false;  // the peers' regions are open (to be closed)
  // Recorded after a staged reduce-scatter's sum on the caller's stream, so that its slots are
  // freed from another stream (made on first use, reused: a wait takes the latest record).
  cudaEvent_t summed = nullptr;

  int64_t staging_bytes() const { return 2 * int64_t(o.size - 1) * o.capacity; }
  // Where rank `src`'s piece lands in rank `dst`'s region, for an op of parity p.
  char* slot(int dst, int src, uint32_t p) const {
    const int index = src < dst ? src : src - 1;
    return region[size_t(dst)] + (int64_t(p) * (o.size - 1) + index) * o.capacity;
  }
  CUdeviceptr ready_of(int owner, int from) const {
    return flags_dev[size_t(owner)] + CUdeviceptr(offsetof(Flags, ready) + sizeof(uint32_t) * size_t(from));
  }
  CUdeviceptr consumed_of(int owner, int from) const {
    return flags_dev[size_t(owner)] + CUdeviceptr(offsetof(Flags, consumed) + sizeof(uint32_t) * size_t(from));
  }

  // Whether every peer consumed all this rank sent it and sent all this rank consumed: then no
  // peer writes into this rank's region any more.
  bool quiet() const {
    const Flags& mine = *flags[size_t(o.rank)];
    for (int j = 0; j < o.size; ++j) {
      if (j == o.rank) continue;
      if (mine.ready[j].load() != seq || mine.consumed[j].load() != seq) return false;
    }
    return true;
  }
  bool released = false;

  ~Impl() {
    cuda::DeviceGuard guard(o.device);
    if (summed) cudaEventDestroy(summed);
    if (opened) {
      for (int j = 0; j < o.size; ++j)
        if (j != o.rank && region[size_t(j)]) cudaIpcCloseMemHandle(region[size_t(j)]);
    }
    for (Flags* f : flags) {
      if (!f) continue;
      cudaHostUnregister(f);
      ::munmap(f, kFlagsBytes);
    }
    if (!shm_name.empty()) ::shm_unlink(shm_name.c_str());
  }
};

namespace {

// This rank's flags page: created, sized and mapped; null (and why) when shm is unavailable.
Flags* make_shared_flags(const std::string& name, std::string* why) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    *why = str_cat("shm_open(", name, ") failed: ", std::strerror(errno));
    return nullptr;
  }
  void* p = MAP_FAILED;
  if (::ftruncate(fd, kFlagsBytes) == 0) p = ::mmap(nullptr, kFlagsBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    *why = str_cat("mapping ", name, " failed: ", std::strerror(errno));
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  std::memset(p, 0, kFlagsBytes);
  return static_cast<Flags*>(p);
}

Flags* open_shared_flags(const std::string& name, std::string* why) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    *why = str_cat("shm_open(", name, ") of a peer failed: ", std::strerror(errno));
    return nullptr;
  }
  void* p = ::mmap(nullptr, kFlagsBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    *why = str_cat("mapping a peer's ", name, " failed: ", std::strerror(errno));
    return nullptr;
  }
  return static_cast<Flags*>(p);
}

// Registers a flags page with CUDA and returns its device address (0 and why on failure).
CUdeviceptr register_flags(Flags* f, std::string* why) {
  cudaError_t e = cudaHostRegister(f, kFlagsBytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  void* dev = nullptr;
  if (e == cudaSuccess) e = cudaHostGetDevicePointer(&dev, f, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = str_cat("registering the flags with CUDA failed: ", cudaGetErrorString(e));
    return 0;
  }
  return reinterpret_cast<CUdeviceptr>(dev);
}

// This rank's answer in one round of the handshake, and everyone's.
std::vector<std::string> exchange(StoreClient& store, const std::string& key, const PeerAllReduce::Options& o,
                                  const std::string& mine) {
  store.set(str_cat(key, o.rank), mine);
  std::vector<std::string> all;
  for (int r = 0; r < o.size; ++r) {
    try {
      all.push_back(store.get(str_cat(key, r), o.timeout));
    } catch (const StoreTimeout&) {
      TRIREME_FAIL("peer all-reduce: rank ", o.rank, " did not hear from rank ", r, " of its group within ",
                   o.timeout.count(), " ms while setting up (", key, ")");
    }
  }
  return all;
}

std::string first_refusal(const std::vector<std::string>& answers) {
  for (size_t r = 0; r < answers.size(); ++r)
    if (answers[r].rfind("ok", 0) != 0) return str_cat("rank ", r, ": ", answers[r]);
  return "";
}

}  // namespace

std::unique_ptr<PeerAllReduce> PeerAllReduce::create(StoreClient& store, const Options& options,
                                                     std::string* why_not) {
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  const Options& o = impl->o;
  cuda::DeviceGuard guard(o.device);
  impl->region.assign(size_t(o.size), nullptr);
  impl->flags.assign(size_t(o.size), nullptr);
  impl->flags_dev.assign(size_t(o.size), 0);

  // Round 1: can this rank take part, and where are its region and flags.
  std::string why;
  // By default only for 2 ranks, where one push each way moves what NCCL's ring does and was
  // measured faster; with more, every rank pushes its whole tensor to every peer ((n-1) x the
  // ring's n/(2(n-1)) share of the bytes), so mode on has to ask for it.
  if (o.mode == PeerAllReduceMode::off) why = "turned off (peer all-reduce mode off)";
  if (why.empty() && o.size != 2 && o.mode != PeerAllReduceMode::on)
    why = str_cat("the group has ", o.size, " ranks (peer all-reduce mode on allows 3 to 8)");
  if (why.empty() && (o.size < 2 || o.size > kMaxRanks)) why = str_cat("the group has ", o.size, " ranks (2 to 8)");
  if (why.empty() && (o.capacity <= 0 || o.capacity % 256 != 0)) why = str_cat("capacity ", o.capacity, " bytes");
  if (why.empty() && !mem_ops().error.empty()) why = mem_ops().error;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  char bus[64] = {};
  if (why.empty() && cudaDeviceGetPCIBusId(bus, sizeof(bus), o.device) != cudaSuccess) why = "no PCI bus id";
  cudaIpcMemHandle_t handle{};
  if (why.empty()) {
    void* base = nullptr;
    if (cudaMalloc(&base, size_t(impl->staging_bytes())) != cudaSuccess) {
      cudaGetLastError();
      why = str_cat("cannot allocate ", impl->staging_bytes() >> 20, " MiB of staging memory");
    } else {
      impl->region[size_t(o.rank)] = static_cast<char*>(base);
      if (cudaIpcGetMemHandle(&handle, base) != cudaSuccess) {
        cudaGetLastError();
        why = "cudaIpcGetMemHandle failed";
      }
    }
  }
  if (why.empty()) {
    // Load the sum kernels now. CUDA loads a kernel at its first launch (lazy loading), and
    // loading waits for the device to go idle: a first launch queued behind a wait for a peer
    // that never comes would block the host inside the group's lock, so the watchdog could not
    // abort the op (the tests' timeout and dead-peer cases hung this way).
    char* base = impl->region[size_t(o.rank)];
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      // The 16-byte vector kernels for 2 inputs and for any number, and the scalar one.
      for (auto [p, inputs] : {std::pair{base, 2}, std::pair{base, 3}, std::pair{base + dtype_size(d), 2}}) {
        const void* same[3] = {p, p, p};
        cuda_kernels::peer_sum(p, same, inputs, 1, d, false, nullptr);
      }
    }
    if (cudaDeviceSynchronize() != cudaSuccess) why = str_cat("the sum kernel failed: ", cudaGetErrorString(cudaGetLastError()));
  }
  if (why.empty()) {
    impl->shm_name = str_cat("/trireme-peer-", ::getpid(), "-", std::hash<std::string>()(o.key_prefix) % 1000000007);
    impl->flags[size_t(o.rank)] = make_shared_flags(impl->shm_name, &why);
    if (!impl->flags[size_t(o.rank)]) impl->shm_name.clear();
  }
  if (why.empty()) impl->flags_dev[size_t(o.rank)] = register_flags(impl->flags[size_t(o.rank)], &why);
  const std::string mine =
      why.empty() ? str_cat("ok|", host, "|", bus, "|", impl->shm_name, "|", to_hex(&handle, sizeof(handle))) : why;
  std::vector<std::string> answers = exchange(store, o.key_prefix + "info/", o, mine);

  // Round 2: every rank maps every peer's region and flags, and says whether it could.
  std::string refusal = first_refusal(answers);
  std::string verdict = refusal.empty() ? "ok" : "skip";
  if (refusal.empty()) {
    for (int j = 0; j < o.size && verdict == "ok"; ++j) {
      if (j == o.rank) continue;
      const auto parts = split(answers[size_t(j)], '|');
      cudaIpcMemHandle_t peer_handle{};
      int peer_device = -1, access = 0;
      if (parts.size() != 5 || !from_hex(parts[4], &peer_handle, sizeof(peer_handle))) {
        verdict = str_cat("rank ", j, " sent a malformed answer");
      } else if (parts[1] != host) {
        verdict = str_cat("rank ", j, " is on host ", parts[1], ", this one on ", host);
      } else if (cudaDeviceGetByPCIBusId(&peer_device, parts[2].c_str()) != cudaSuccess) {
        cudaGetLastError();
        verdict = str_cat("rank ", j, "'s GPU (", parts[2], ") is not visible here");
      } else if (cudaDeviceCanAccessPeer(&access, o.device, peer_device) != cudaSuccess || !access) {
        cudaGetLastError();
        verdict = str_cat("cuda:", o.device, " cannot access rank ", j, "'s GPU");
      } else {
        void* peer = nullptr;
        if (cudaIpcOpenMemHandle(&peer, peer_handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
          cudaGetLastError();
          verdict = str_cat("cannot map rank ", j, "'s staging memory (cudaIpcOpenMemHandle)");
        } else {
          impl->region[size_t(j)] = static_cast<char*>(peer);
          impl->opened = true;
          impl->flags[size_t(j)] = open_shared_flags(parts[3], &verdict);
          if (impl->flags[size_t(j)]) {
            impl->flags_dev[size_t(j)] = register_flags(impl->flags[size_t(j)], &verdict);
            if (impl->flags_dev[size_t(j)] == 0) {
              ::munmap(impl->flags[size_t(j)], kFlagsBytes);
              impl->flags[size_t(j)] = nullptr;
            }
          }
          if (!impl->flags[size_t(j)] && verdict == "ok") verdict = "cannot map a peer's flags";
        }
      }
    }
  }
  // A self-test of the stream memory operations on the flags: one write and one wait.
  if (verdict == "ok") {
    cudaStream_t s = nullptr;
    TRIREME_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const CUdeviceptr probe = impl->consumed_of(o.rank, o.rank);  // the slot no peer writes
    CUresult w = mem_ops().write(reinterpret_cast<CUstream>(s), probe, 7, CU_STREAM_WRITE_VALUE_DEFAULT);
    CUresult v = w == CUDA_SUCCESS ? mem_ops().wait(reinterpret_cast<CUstream>(s), probe, 7, CU_STREAM_WAIT_VALUE_GEQ)
                                   : w;
    const cudaError_t done = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    if (v != CUDA_SUCCESS || done != cudaSuccess || impl->flags[size_t(o.rank)]->consumed[o.rank].load() != 7) {
      cudaGetLastError();
      verdict = str_cat("stream memory operations on host-mapped flags do not work here (driver error ", int(v), ")");
    }
  }
  const std::vector<std::string> verdicts = exchange(store, o.key_prefix + "verdict/", o, verdict);
  // Every rank has opened what it needed (or given up): the names can go.
  if (!impl->shm_name.empty()) {
    ::shm_unlink(impl->shm_name.c_str());
    impl->shm_name.clear();
  }
  refusal = refusal.empty() ? first_refusal(verdicts) : refusal;
  if (!refusal.empty()) {
    if (why_not) *why_not = refusal;
    if (impl->region[size_t(o.rank)]) {
      // A peer may have mapped it; nothing was ever written through that mapping.
      cudaFree(impl->region[size_t(o.rank)]);
      impl->region[size_t(o.rank)] = nullptr;
    }
    return nullptr;
  }
  return std::unique_ptr<PeerAllReduce>(new PeerAllReduce(std::move(impl)));
}

PeerAllReduce::PeerAllReduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerAllReduce::~PeerAllReduce() {
  Impl& s = *impl_;
  // Frees this rank's staging memory only when no peer can write into it any more (Note [peer
  // all-reduce]); the peers finish their last ops a little after this rank, so give them a moment.
  // After a failure, or when they do not finish, everything is left mapped: a copy still queued
  // on a stream must not land in memory that was handed out again.
  bool quiet = !s.released && s.quiet();
  for (const auto deadline = Clock::now() + std::chrono::milliseconds(2000); !s.released && !quiet &&
                                                                             Clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    quiet = s.quiet();
  }
  if (!quiet) {
    (void)impl_.release();  // leaked on purpose
    return;
  }
  cuda::DeviceGuard guard(s.o.device);
  cudaFree(s.region[size_t(s.o.rank)]);
}

bool PeerAllReduce::accepts(const Tensor& t, ReduceOp op) {
  return (op == ReduceOp::sum || op == ReduceOp::avg) && t.is_contiguous() &&
         cuda_kernels::peer_sum_supports(t.dtype());
}

namespace {

// The two halves of one op k of the protocol (Note [peer all-reduce]), queued on `stream`:
// push() sends `bytes` from src into this rank's slot on peer j (steps 1-2); gather_then()
// waits for every peer's piece and runs combine(slots), slots[q] being where rank q's landed
// (slots[me] unused), then frees the slots (steps 3-5). push() in its three steps, for a
// staged reduce-scatter that sends a chunk in parts:
void wait_for_slot(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k, int j) {
  if (k > 2)
    check_cu(mem_ops().wait(reinterpret_cast<CUstream>(stream), s.consumed_of(s.o.rank, j), k - 2,
                            CU_STREAM_WAIT_VALUE_GEQ),
             "waiting for a peer");
}
void copy_to_slot(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k, int j, size_t at, const void* src,
                  size_t bytes) {
  if (bytes == 0) return;
  TRIREME_CUDA_CHECK(cudaMemcpyAsync(s.slot(j, s.o.rank, k & 1) + at, src, bytes, cudaMemcpyDeviceToDevice, stream));
}
void signal_ready(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k, int j) {
  check_cu(mem_ops().write(reinterpret_cast<CUstream>(stream), s.ready_of(j, s.o.rank), k, CU_STREAM_WRITE_VALUE_DEFAULT),
           "signalling a peer");
}
void push(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k, int j, const void* src, size_t bytes) {
  wait_for_slot(s, stream, k, j);
  copy_to_slot(s, stream, k, j, 0, src, bytes);
  signal_ready(s, stream, k, j);
}

// Steps 3 and 5 apart, for the staged all-gather whose slots are read between them.
void wait_for_peers(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k, const void** slots) {
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  for (int j = 0; j < s.o.size; ++j) {
    if (j == s.o.rank) continue;
    check_cu(mem_ops().wait(cu_stream, s.ready_of(s.o.rank, j), k, CU_STREAM_WAIT_VALUE_GEQ), "waiting for a peer");
    slots[j] = s.slot(s.o.rank, j, k & 1);
  }
}

void release_slots(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k) {
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  for (int j = 0; j < s.o.size; ++j) {
    if (j == s.o.rank) continue;
    check_cu(mem_ops().write(cu_stream, s.consumed_of(j, s.o.rank), k, CU_STREAM_WRITE_VALUE_DEFAULT), "signalling a peer");
  }
}

template <class Combine>
void gather_then(PeerAllReduce::Impl& s, cudaStream_t stream, uint32_t k, Combine&& combine) {
  const void* slots[kMaxRanks] = {};
  wait_for_peers(s, stream, k, slots);
  combine(slots);
  release_slots(s, stream, k);
}

// One whole op for a piece of `bytes` per peer: source(j) is what goes to peer j.
template <class Source, class Combine>
void peer_round(PeerAllReduce::Impl& s, cudaStream_t stream, size_t bytes, Source&& source, Combine&& combine) {
  const uint32_t k = ++s.seq;
  for (int j = 0; j < s.o.size; ++j)
    if (j != s.o.rank) push(s, stream, k, j, source(j), bytes);
  gather_then(s, stream, k, combine);
}

}  // namespace

namespace {

// Calls fn(first, n) for consecutive pieces [first, first + n) of `numel` elements of `elem`
// bytes, each at most one staging slot.
template <class Fn>
void for_each_piece(int64_t numel, int64_t elem, int64_t capacity, Fn&& fn) {
  const int64_t piece = capacity / elem;
  for (int64_t first = 0; first < numel; first += piece) fn(first, std::min(piece, numel - first));
}

// out = the ranks' pieces summed in rank order: this rank's from `own`, the others' from their
// slots (so every rank adds the same numbers in the same order).
void sum_in_rank_order(void* out, const void* own, const void* const* slots, int size, int me, int64_t n, DType dtype,
                       ReduceOp op, cudaStream_t stream, const Tensor& bias = Tensor(),
                       const Tensor& residual = Tensor()) {
  const void* inputs[kMaxRanks] = {};
  for (int q = 0; q < size; ++q) inputs[q] = q == me ? own : slots[q];
  cuda_kernels::peer_sum(out, inputs, size, n, dtype, op == ReduceOp::avg, stream,
                         bias.defined() ? bias.data_ptr() : nullptr, bias.defined() ? bias.numel() : 0,
                         residual.defined() ? residual.data_ptr() : nullptr, /*max_blocks=*/0);
}

}  // namespace

void PeerAllReduce::all_reduce(const Tensor& t, ReduceOp op, cudaStream_t stream) {
  check_no_staged_op("all_reduce");
  const Options& o = impl_->o;
  const int64_t elem = int64_t(dtype_size(t.dtype()));
  char* data = static_cast<char*>(t.data_ptr());
  for_each_piece(t.numel(), elem, o.capacity, [&](int64_t first, int64_t n) {
    char* x = data + first * elem;
    peer_round(*impl_, stream, size_t(n * elem), [&](int) { return x; }, [&](const void* const* slots) {
      sum_in_rank_order(x, x, slots, o.size, o.rank, n, t.dtype(), op, stream);
    });
  });
}

void PeerAllReduce::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, cudaStream_t stream) {
  check_no_staged_op("reduce_scatter");
  const Options& o = impl_->o;
  const int64_t elem = int64_t(dtype_size(input.dtype())), chunk = output.numel();
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  for_each_piece(chunk, elem, o.capacity, [&](int64_t first, int64_t n) {
    // Rank j sums the j-th chunks: this rank's goes to j, j's own stays there.
    auto part_for = [&](int j) { return in + (int64_t(j) * chunk + first) * elem; };
    peer_round(*impl_, stream, size_t(n * elem), part_for, [&](const void* const* slots) {
      sum_in_rank_order(out + first * elem, part_for(o.rank), slots, o.size, o.rank, n, input.dtype(), op, stream);
    });
  });
}

void PeerAllReduce::all_gather(const Tensor& output, const Tensor& input, cudaStream_t stream) {
  check_no_staged_op("all_gather");
  const Options& o = impl_->o;
  const int64_t elem = int64_t(dtype_size(input.dtype())), m = input.numel();
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  for_each_piece(m, elem, o.capacity, [&](int64_t first, int64_t n) {
    const char* mine = in + first * elem;
    auto to = [&](int q) { return out + (int64_t(q) * m + first) * elem; };
    const uint32_t k = ++impl_->seq;
    for (int j = 0; j < o.size; ++j)
      if (j != o.rank) push(*impl_, stream, k, j, mine, size_t(n * elem));
    // This rank's own rows while the peers' are still on their way (none for an in-place gather).
    if (to(o.rank) != mine)
      TRIREME_CUDA_CHECK(cudaMemcpyAsync(to(o.rank), mine, size_t(n * elem), cudaMemcpyDeviceToDevice, stream));
    gather_then(*impl_, stream, k, [&](const void* const* slots) {
      for (int q = 0; q < o.size; ++q)
        if (q != o.rank)
          TRIREME_CUDA_CHECK(cudaMemcpyAsync(to(q), slots[q], size_t(n * elem), cudaMemcpyDeviceToDevice, stream));
    });
  });
}

bool PeerAllReduce::can_stage(const Tensor& output, const Tensor& input, ReduceOp op) const {
  return accepts(input, op) && output.numel() * int64_t(dtype_size(output.dtype())) <= impl_->o.capacity;
}

void PeerAllReduce::begin_staged_reduce_scatter() {
  check_no_staged_op("a staged reduce_scatter");
  impl_->staged_seq = ++impl_->seq;
  impl_->staged_kind = "reduce_scatter";
  impl_->staged_sent.assign(size_t(impl_->o.size), false);
  impl_->staged_sent_elems.assign(size_t(impl_->o.size), -1);
}

void PeerAllReduce::send_staged_part(const Tensor& input, int j, int64_t end, cudaStream_t stream) {
  Impl& s = *impl_;
  check_staged("reduce_scatter");
  TRIREME_CHECK(j >= 0 && j < s.o.size && j != s.o.rank && !s.staged_sent[size_t(j)], "peer reduce-scatter: chunk ", j,
                " is not one this rank still has to send (rank ", s.o.rank, " of ", s.o.size, ")");
  const int64_t chunk = input.numel() / s.o.size, elem = int64_t(dtype_size(input.dtype()));
  int64_t& sent = s.staged_sent_elems[size_t(j)];
  TRIREME_CHECK(end >= std::max<int64_t>(sent, 0) && end <= chunk, "peer reduce-scatter: chunk ", j,
                " announced written up to element ", end, " after ", std::max<int64_t>(sent, 0), " (of ", chunk,
                "): parts go in order");
  if (sent < 0) {  // the first part: the peer's slot must be free first
    wait_for_slot(s, stream, s.staged_seq, j);
    sent = 0;
  }
  copy_to_slot(s, stream, s.staged_seq, j, size_t(sent * elem),
               static_cast<const char*>(input.data_ptr()) + (j * chunk + sent) * elem, size_t((end - sent) * elem));
  sent = end;
}

void PeerAllReduce::send_staged_chunk(const Tensor& input, int j, cudaStream_t stream) {
  send_staged_part(input, j, input.numel() / impl_->o.size, stream);
  signal_ready(*impl_, stream, impl_->staged_seq, j);
  impl_->staged_sent[size_t(j)] = true;
}

void PeerAllReduce::finish_staged_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                 cudaStream_t stream, const Tensor& bias, const Tensor& residual,
                                                 cudaStream_t release_stream) {
  Impl& s = *impl_;
  check_staged("reduce_scatter");
  for (int j = 0; j < s.o.size; ++j)
    if (j != s.o.rank && !s.staged_sent[size_t(j)]) send_staged_chunk(input, j, stream);
  const uint32_t k = s.staged_seq;
  s.staged_seq = 0;
  const int64_t n = output.numel();
  const char* own = static_cast<const char*>(input.data_ptr()) + s.o.rank * n * int64_t(dtype_size(input.dtype()));
  const void* slots[kMaxRanks] = {};
  wait_for_peers(s, stream, k, slots);
  TRIREME_CHECK(!residual.defined() || (residual.numel() == n && residual.dtype() == output.dtype() &&
                                         residual.is_contiguous()),
                "peer reduce-scatter: the residual ", residual.sizes(), " must be a contiguous ", output.dtype(),
                " tensor of the output's ", n, " elements");
  sum_in_rank_order(output.data_ptr(), own, slots, s.o.size, s.o.rank, n, input.dtype(), op, stream, bias, residual);
  if (release_stream == nullptr || release_stream == stream) {
    release_slots(s, stream, k);
    return;
  }
  // The flag writes go to host memory and hold their stream for microseconds: not the caller's,
  // whose next kernel would wait for them.
  if (!s.summed) TRIREME_CUDA_CHECK(cudaEventCreateWithFlags(&s.summed, cudaEventDisableTiming));
  TRIREME_CUDA_CHECK(cudaEventRecord(s.summed, stream));
  TRIREME_CUDA_CHECK(cudaStreamWaitEvent(release_stream, s.summed, 0));
  release_slots(s, release_stream, k);
}

const void* PeerAllReduce::staged_others_sum(const Tensor& input, const Tensor& scratch, cudaStream_t stream) {
  Impl& s = *impl_;
  check_staged("reduce_scatter");
  for (int j = 0; j < s.o.size; ++j)
    if (j != s.o.rank && !s.staged_sent[size_t(j)]) send_staged_chunk(input, j, stream);
  const void* slots[kMaxRanks] = {};
  wait_for_peers(s, stream, s.staged_seq, slots);
  if (s.o.size == 2) return slots[1 - s.o.rank];
  const int64_t n = input.numel() / s.o.size;
  TRIREME_CHECK(scratch.defined() && scratch.numel() == n && scratch.dtype() == input.dtype() && scratch.is_contiguous(),
                "peer reduce-scatter: the others' sum needs a contiguous ", input.dtype(), " scratch tensor of ", n,
                " elements");
  const void* others[kMaxRanks] = {};
  int count = 0;
  for (int q = 0; q < s.o.size; ++q)
    if (q != s.o.rank) others[count++] = slots[q];
  cuda_kernels::peer_sum(scratch.data_ptr(), others, count, n, input.dtype(), /*average=*/false, stream, nullptr, 0,
                         nullptr, 0);
  return scratch.data_ptr();
}

void PeerAllReduce::release_staged_reduce_scatter(cudaStream_t release_stream) {
  check_staged("reduce_scatter");
  const uint32_t k = impl_->staged_seq;
  impl_->staged_seq = 0;
  release_slots(*impl_, release_stream, k);
}

bool PeerAllReduce::can_stage_gather(const Tensor& input) const {
  return input.is_contiguous() && input.numel() * int64_t(dtype_size(input.dtype())) <= impl_->o.capacity;
}

void PeerAllReduce::begin_staged_all_gather(const Tensor& input, cudaStream_t stream) {
  check_no_staged_op("a staged all_gather");
  Impl& s = *impl_;
  const uint32_t k = ++s.seq;
  for (int j = 0; j < s.o.size; ++j)
    if (j != s.o.rank) push(s, stream, k, j, input.data_ptr(), size_t(input.numel()) * dtype_size(input.dtype()));
  const void* slots[kMaxRanks] = {};
  wait_for_peers(s, stream, k, slots);
  s.staged_seq = k;
  s.staged_kind = "all_gather";
}

void* PeerAllReduce::staged_slot(int q) const {
  check_staged("all_gather");
  TRIREME_CHECK(q >= 0 && q < impl_->o.size && q != impl_->o.rank, "peer all-gather: no slot for rank ", q);
  return impl_->slot(impl_->o.rank, q, impl_->staged_seq & 1);
}

void PeerAllReduce::fill_staged_all_gather(const Tensor& output, const Tensor& input, cudaStream_t stream) {
  check_staged("all_gather");
  const size_t bytes = size_t(input.numel()) * dtype_size(input.dtype());
  char* out = static_cast<char*>(output.data_ptr());
  for (int q = 0; q < impl_->o.size; ++q) {
    const void* from = q == impl_->o.rank ? input.data_ptr() : staged_slot(q);
    if (out + q * bytes != from)
      TRIREME_CUDA_CHECK(cudaMemcpyAsync(out + q * bytes, from, bytes, cudaMemcpyDeviceToDevice, stream));
  }
}

void PeerAllReduce::fill_staged_others(const Tensor& others, cudaStream_t stream) {
  check_staged("all_gather");
  const Options& o = impl_->o;
  const size_t bytes = size_t(others.numel()) * dtype_size(others.dtype()) / size_t(o.size - 1);
  char* out = static_cast<char*>(others.data_ptr());
  for (int q = 0, slot = 0; q < o.size; ++q) {
    if (q == o.rank) continue;
    TRIREME_CUDA_CHECK(cudaMemcpyAsync(out + size_t(slot++) * bytes, staged_slot(q), bytes, cudaMemcpyDeviceToDevice, stream));
  }
}

void PeerAllReduce::finish_staged_all_gather(cudaStream_t stream) {
  check_staged("all_gather");
  release_slots(*impl_, stream, impl_->staged_seq);
  impl_->staged_seq = 0;
}

void PeerAllReduce::check_no_staged_op(const char* what) const {
  TRIREME_CHECK(impl_->staged_seq == 0, "peer all-reduce: ", what, " issued while a staged ", impl_->staged_kind,
                " is open (finish it first: its peers wait for it in order)");
}

void PeerAllReduce::check_staged(const char* kind) const {
  TRIREME_CHECK(impl_->staged_seq != 0 && std::strcmp(impl_->staged_kind, kind) == 0, "peer all-reduce: no staged ",
                kind, " is open");
}

void PeerAllReduce::release() noexcept {
  Impl& s = *impl_;
  s.released = true;
  Flags& mine = *s.flags[size_t(s.o.rank)];
  const uint32_t far = s.seq + (1u << 30);
  for (int j = 0; j < s.o.size; ++j) {
    mine.ready[j].store(far);
    mine.consumed[j].store(far);
  }
}

}  // namespace trireme::dist

#endif  // TRIREME_WITH_NCCL
