// Pinned host memory (see pinned.h and Note [pinned copies]): CPU storage page-locked with
// cudaHostRegister, and a table of the pinned ranges with the events of copies still using them.
#include "trireme/cuda/pinned.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"

namespace trireme::cuda {
namespace {

// One page-locked range: its length and the events of the copies queued on it.
struct PinnedRange {
  size_t bytes = 0;
  std::vector<cudaEvent_t> uses;
};

struct PinnedTable {
  std::mutex mu;
  std::map<uintptr_t, PinnedRange> ranges;  // by start address

  // The range holding [p, p + n), or end().
  std::map<uintptr_t, PinnedRange>::iterator find(uintptr_t p, size_t n) {
    auto it = ranges.upper_bound(p);
    if (it == ranges.begin()) return ranges.end();
    --it;
    return p + n <= it->first + it->second.bytes ? it : ranges.end();
  }
};

// Copies the elements of a CPU tensor, in row-major order, into contiguous `out` of its dtype,
// a row at a time. (This layer sits below the kernels, so it cannot call the copy kernel.)
void gather_into(const Tensor& t, Tensor& out) {
  const size_t elem = t.element_size();
  const auto* src = static_cast<const std::byte*>(t.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  if (t.is_contiguous()) {
    std::memcpy(dst, src, size_t(t.numel()) * elem);
    return;
  }
  const int64_t nd = t.dim(), cols = t.size(nd - 1), col_stride = t.stride(nd - 1);
  std::vector<int64_t> idx(size_t(nd), 0);
  for (int64_t done = 0; done < t.numel(); done += cols) {
    int64_t row = 0;
    for (int64_t d = 0; d + 1 < nd; ++d) row += idx[size_t(d)] * t.stride(d);
    if (col_stride == 1) {
      std::memcpy(dst, src + row * int64_t(elem), size_t(cols) * elem);
      dst += size_t(cols) * elem;
    } else {
      for (int64_t c = 0; c < cols; ++c, dst += elem) {
        std::memcpy(dst, src + (row + c * col_stride) * int64_t(elem), elem);
      }
    }
    for (int64_t d = nd - 2; d >= 0; --d) {  // next row, odometer-style
      if (++idx[size_t(d)] < t.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
}

PinnedTable& table() {
  static PinnedTable* t = new PinnedTable();  // never destroyed: pinned tensors may outlive statics
  return *t;
}

size_t page_size() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

// Called when the last tensor on a pinned storage goes: waits for the copies still using it,
// unpins it, then frees it. Errors are ignored: this runs in destructors, possibly at exit.
void release(uintptr_t start, Storage* storage) {
  std::vector<cudaEvent_t> uses;
  {
    std::lock_guard lock(table().mu);
    auto it = table().ranges.find(start);
    if (it != table().ranges.end()) {
      uses = std::move(it->second.uses);
      table().ranges.erase(it);
    }
  }
  for (cudaEvent_t e : uses) {
    cudaEventSynchronize(e);
    cudaEventDestroy(e);
  }
  cudaHostUnregister(reinterpret_cast<void*>(start));
  delete storage;
}

}  // namespace

Tensor empty_pinned(const Shape& sizes, DType dtype) {
  for (int64_t s : sizes) TRIREME_CHECK(s >= 0, "empty_pinned: negative size in shape ", sizes);
  TRIREME_CHECK(is_available(), "empty_pinned: pinned memory needs a usable GPU (", unavailable_reason(), ")");
  const int64_t numel = shape_numel(sizes);
  const size_t page = page_size();
  // Whole pages of our own: a page shared with another allocation could be registered twice.
  const size_t span = (std::max<size_t>(size_t(numel) * dtype_size(dtype), 1) + page - 1) / page * page;
  auto* storage = new Storage(span + page, Device::cpu());
  const uintptr_t base = reinterpret_cast<uintptr_t>(storage->data());
  const uintptr_t start = (base + page - 1) / page * page;
  cudaError_t err = cudaHostRegister(reinterpret_cast<void*>(start), span, cudaHostRegisterDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    delete storage;
    TRIREME_FAIL("empty_pinned: cannot page-lock ", span, " bytes (", cudaGetErrorString(err), ")");
  }
  {
    std::lock_guard lock(table().mu);
    table().ranges[start] = PinnedRange{span, {}};
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = StoragePtr(storage, [start](Storage* s) { release(start, s); });
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->numel = numel;
  impl->dtype = dtype;
  impl->offset = int64_t(start - base) / int64_t(dtype_size(dtype));  // base is 64-byte aligned
  return Tensor(std::move(impl));
}

Tensor pin_memory(const Tensor& t) {
  TRIREME_CHECK(t.defined(), "pin_memory: the input is undefined");
  TRIREME_CHECK(t.device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got one on ", t.device());
  if (t.is_contiguous() && is_pinned(t)) return t;
  Tensor out = empty_pinned(t.sizes(), t.dtype());
  gather_into(t, out);
  return out;
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return false;
  std::lock_guard lock(table().mu);
  const size_t bytes = size_t(t.numel()) * t.element_size();
  return table().find(reinterpret_cast<uintptr_t>(t.data_ptr()), bytes) != table().ranges.end();
}

bool pinned_record_use(const void* ptr, size_t bytes, const Stream& stream) {
  std::lock_guard lock(table().mu);
  auto it = table().find(reinterpret_cast<uintptr_t>(ptr), bytes);
  if (it == table().ranges.end()) return false;
  std::vector<cudaEvent_t>& uses = it->second.uses;
  // Drop the events of copies already done, so a buffer reused every step keeps a short list.
  std::erase_if(uses, [](cudaEvent_t e) {
    if (cudaEventQuery(e) != cudaSuccess) {
      cudaGetLastError();  // cudaErrorNotReady is not an error to keep
      return false;
    }
    cudaEventDestroy(e);
    return true;
  });
  DeviceGuard g(stream.device());
  cudaEvent_t e = nullptr;
  TRIREME_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  TRIREME_CUDA_CHECK(cudaEventRecord(e, stream.handle()));
  uses.push_back(e);
  return true;
}

}  // namespace trireme::cuda
