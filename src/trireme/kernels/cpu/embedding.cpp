// CPU embedding: row gather from a (V, D) table, and its deterministic scatter-add backward.
#include <cstring>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/embedding.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Calls fn(ids pointer) with the ids typed as they are stored (i64 or i32).
template <class Fn>
void with_ids(const Tensor& ids, Fn&& fn) {
  if (ids.dtype() == DType::i64) {
    fn(ids.data<int64_t>());
  } else {
    TRIREME_CHECK(ids.dtype() == DType::i32, "embedding: ids must be i64 or i32, got ", ids.dtype());
    fn(ids.data<int32_t>());
  }
}

// Every id in [0, V), checked before any data is touched.
template <class I>
void check_ids(const I* id, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    TRIREME_CHECK(id[i] >= 0 && id[i] < vocab, "embedding: id ", int64_t(id[i]), " (at position ", i,
                  ") is out of range for a vocabulary of size V = ", vocab);
  }
}

template <class T>
void embedding_cpu(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const int64_t n = ids.numel(), vocab = weight.size(0), dim = weight.size(1);
  const int64_t sv = weight.stride(0), sd = weight.stride(1);
  const T* w = weight.data<T>();
  T* o = out.data<T>();
  with_ids(ids, [&]<class I>(const I* id) {
    check_ids(id, n, vocab);
    parallel_for(n, dim, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* row = w + int64_t(id[i]) * sv;
        T* dst = o + i * dim;
        if (sd == 1) {
          std::memcpy(dst, row, size_t(dim) * sizeof(T));
        } else {
          for (int64_t j = 0; j < dim; ++j) dst[j] = row[j * sd];
        }
      }
    });
  });
}

template <class T>
void embedding_backward_cpu(const Tensor& grad, const Tensor& ids, Tensor& grad_weight) {
  using A = acc_t<T>;
  const int64_t n = ids.numel(), vocab = grad_weight.size(0), dim = grad_weight.size(1);
  const T* g = grad.data<T>();
  T* gw = grad_weight.data<T>();
  with_ids(ids, [&]<class I>(const I* id) {
    check_ids(id, n, vocab);
    // Each thread owns a range of the D columns and walks all tokens in order: no two threads
    // touch one element, and every element's sum has the same order for any thread count.
    parallel_for(dim, n, [&](int64_t c0, int64_t c1) {
      const int64_t w = c1 - c0;
      if constexpr (std::is_same_v<A, T>) {
        for (int64_t i = 0; i < n; ++i) {
          T* dst = gw + int64_t(id[i]) * dim + c0;
          const T* src = g + i * dim + c0;
          for (int64_t j = 0; j < w; ++j) dst[j] += src[j];
        }
      } else {
        // Low precision: sum in a float copy of this thread's columns, round once at the end.
        std::vector<A> acc(size_t(vocab * w));
        for (int64_t v = 0; v < vocab; ++v) {
          for (int64_t j = 0; j < w; ++j) acc[size_t(v * w + j)] = A(gw[v * dim + c0 + j]);
        }
        for (int64_t i = 0; i < n; ++i) {
          A* dst = acc.data() + int64_t(id[i]) * w;
          const T* src = g + i * dim + c0;
          for (int64_t j = 0; j < w; ++j) dst[j] += A(src[j]);
        }
        for (int64_t v = 0; v < vocab; ++v) {
          for (int64_t j = 0; j < w; ++j) gw[v * dim + c0 + j] = T(acc[size_t(v * w + j)]);
        }
      }
    });
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_embedding) {
  registry.add_each<EmbeddingKernel, double, float, bf16_t, f16_t>("embedding", DeviceType::cpu,
                                                                   []<class T>() { return &embedding_cpu<T>; });
  registry.add_each<EmbeddingBackwardKernel, double, float, bf16_t, f16_t>(
      "embedding_backward", DeviceType::cpu, []<class T>() { return &embedding_backward_cpu<T>; });
}

}  // namespace trireme::cpu
