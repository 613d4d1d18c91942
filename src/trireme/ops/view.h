// Shape ops. reshape/view/permute/transpose/slice/narrow/expand/squeeze/unsqueeze return views
// sharing storage (reshape copies only when the layout makes a view impossible); cat/stack copy.
#pragma once

#include <vector>

#include "trireme/core/tensor.h"

namespace trireme {

Tensor reshape(const Tensor& x, const Shape& sizes);  // one -1 allowed
Tensor view(const Tensor& x, const Shape& sizes);     // error if not expressible as a view
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& x, const Shape& sizes);  // -1 keeps a dim
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);

Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim);  // views
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // index: 1-D i64/i32

}  // namespace trireme
