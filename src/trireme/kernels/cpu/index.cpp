// CPU index_select (gather of slices along a dim) and index_add (its scatter-add backward).
#include <cstring>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/index.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// The index values as i64, checked against `size` before any data is touched.
std::vector<int64_t> read_indices(const char* op, const Tensor& index, int64_t size) {
  std::vector<int64_t> idx(size_t(index.numel()));
  const int64_t st = index.numel() > 0 ? index.stride(0) : 1;
  dispatch_dtype(index.dtype(), [&]<class I>() {
    if constexpr (std::is_same_v<I, int64_t> || std::is_same_v<I, int32_t>) {
      const I* p = index.data<I>();
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t(p[int64_t(i) * st]);
    } else {
      TRIREME_FAIL(op, ": index must be i64 or i32, got ", index.dtype());
    }
  });
  for (size_t i = 0; i < idx.size(); ++i) {
    TRIREME_CHECK(idx[i] >= 0 && idx[i] < size, op, ": index ", idx[i], " (at position ", i,
                  ") is out of range for a dimension of size ", size);
  }
  return idx;
}

template <class T>
void index_select_cpu(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  const std::vector<int64_t> idx = read_indices("index_select", index, x.size(dim));
  const int64_t n = int64_t(idx.size());
  if (out.numel() == 0) return;
  T* o = out.data<T>();
  if (x.is_contiguous()) {
    // Contiguous: each (outer, i) pair is one memcpy of `inner` elements.
    const Split3 sp = split_at(x.sizes(), dim);
    const T* px = x.data<T>();
    parallel_for(sp.outer * n, sp.inner, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t oi = r / n, i = r % n;
        std::memcpy(o + r * sp.inner, px + (oi * sp.size + idx[size_t(i)]) * sp.inner, size_t(sp.inner) * sizeof(T));
      }
    });
    return;
  }
  // Any strides: per index, a strided copy of the selected slice into out's slice.
  Shape sizes = x.sizes(), xs = x.strides();
  sizes.erase(sizes.begin() + dim);
  xs.erase(xs.begin() + dim);
  Shape os = out.strides();
  os.erase(os.begin() + dim);
  for (int64_t i = 0; i < n; ++i) {
    char* src = static_cast<char*>(x.data_ptr()) + idx[size_t(i)] * x.stride(dim) * int64_t(sizeof(T));
    char* dst = reinterpret_cast<char*>(o + i * out.stride(dim));
    for_each_row<2>(sizes, {LoopOperand{dst, os, sizeof(T)}, LoopOperand{src, xs, sizeof(T)}},
                    [&](auto& p, auto& s, int64_t len) {
                      T* d = reinterpret_cast<T*>(p[0]);
                      const T* v = reinterpret_cast<const T*>(p[1]);
                      const int64_t sd = s[0] / int64_t(sizeof(T)), sv = s[1] / int64_t(sizeof(T));
                      for (int64_t j = 0; j < len; ++j) d[j * sd] = v[j * sv];
                    });
  }
}

template <class T>
void index_add_cpu(const Tensor& src_in, int64_t dim, const Tensor& index, Tensor& out) {
  using A = acc_t<T>;
  const std::vector<int64_t> idx = read_indices("index_add", index, out.size(dim));
  const int64_t n = int64_t(idx.size());
  if (out.numel() == 0 || n == 0) return;
  TRIREME_CHECK(out.is_contiguous(), "index_add: the destination must be contiguous, got strides ", out.strides());
  const Tensor src = src_in.is_contiguous() ? src_in : Tensor();  // strided sources go through a copy below
  std::vector<T> src_copy;
  const T* ps;
  if (src.defined()) {
    ps = src.data<T>();
  } else {
    src_copy.resize(size_t(src_in.numel()));
    Shape cs = contiguous_strides(src_in.sizes());
    for_each_row<2>(src_in.sizes(), {LoopOperand{reinterpret_cast<char*>(src_copy.data()), cs, sizeof(T)},
                                     loop_operand(src_in)},
                    [&](auto& p, auto& s, int64_t len) {
                      T* d = reinterpret_cast<T*>(p[0]);
                      const T* v = reinterpret_cast<const T*>(p[1]);
                      const int64_t sd = s[0] / int64_t(sizeof(T)), sv = s[1] / int64_t(sizeof(T));
                      for (int64_t j = 0; j < len; ++j) d[j * sd] = v[j * sv];
                    });
    ps = src_copy.data();
  }
  const Split3 sp = split_at(out.sizes(), dim);
  T* o = out.data<T>();
  // Deterministic without atomics: each task owns a block of `inner` columns of one outer slice
  // and adds the selected rows into it in index order. Low precision accumulates in a float block.
  constexpr int64_t kBlock = 512;
  const int64_t blocks = (sp.inner + kBlock - 1) / kBlock;
  parallel_for(sp.outer * blocks, n * kBlock, [&](int64_t b, int64_t e) {
    std::vector<A> acc;
    for (int64_t t = b; t < e; ++t) {
      const int64_t oi = t / blocks, c0 = (t % blocks) * kBlock, c1 = std::min(sp.inner, c0 + kBlock);
      const int64_t w = c1 - c0;
      T* obase = o + oi * sp.size * sp.inner + c0;
      const T* sbase = ps + oi * n * sp.inner + c0;
      if constexpr (std::is_same_v<A, T>) {
        for (int64_t i = 0; i < n; ++i) {
          T* dst = obase + idx[size_t(i)] * sp.inner;
          const T* s = sbase + i * sp.inner;
          for (int64_t j = 0; j < w; ++j) dst[j] += s[j];
        }
      } else {
        acc.assign(size_t(sp.size * w), A(0));
        for (int64_t r = 0; r < sp.size; ++r) {
          for (int64_t j = 0; j < w; ++j) acc[size_t(r * w + j)] = A(obase[r * sp.inner + j]);
        }
        for (int64_t i = 0; i < n; ++i) {
          A* dst = acc.data() + idx[size_t(i)] * w;
          const T* s = sbase + i * sp.inner;
          for (int64_t j = 0; j < w; ++j) dst[j] += A(s[j]);
        }
        for (int64_t r = 0; r < sp.size; ++r) {
          for (int64_t j = 0; j < w; ++j) obase[r * sp.inner + j] = T(acc[size_t(r * w + j)]);
        }
      }
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_index) {
  registry.add_each<IndexSelectKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "index_select", DeviceType::cpu, []<class T>() { return &index_select_cpu<T>; });
  registry.add_each<IndexAddKernel, double, float, bf16_t, f16_t>("index_add", DeviceType::cpu,
                                                                  []<class T>() { return &index_add_cpu<T>; });
}

}  // namespace trireme::cpu
