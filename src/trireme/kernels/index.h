// Signatures of the index kernel family: gather along a dim (index_select) and its scatter-add.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// out = x with dim `dim` replaced by the rows x[..., index[i], ...]. index is 1-D i64 or i32
// (any stride); out is contiguous. Registered by x's dtype. Throws naming `index_select`, the bad
// value and the size when an index is out of range, before writing anything.
using IndexSelectKernel = void (*)(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out);
// out[..., index[i], ...] += src[..., i, ...]; out is contiguous and already holds the base values
// (zeros for a gradient). Repeated indices accumulate, in index order, whatever the thread count.
// Registered by out's dtype (src has the same dtype); low precision accumulates in f32.
using IndexAddKernel = void (*)(const Tensor& src, int64_t dim, const Tensor& index, Tensor& out);

// A contiguous tensor viewed as (outer, size, inner) around `dim`: how both backends address rows.
struct Split3 {
  int64_t outer = 1, size = 1, inner = 1;
};
inline Split3 split_at(const Shape& s, int64_t dim) {
  Split3 r;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) {
    if (d < dim) r.outer *= s[size_t(d)];
    else if (d == dim) r.size = s[size_t(d)];
    else r.inner *= s[size_t(d)];
  }
  return r;
}

}  // namespace trireme
