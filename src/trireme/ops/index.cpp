// index_select: gather of slices along a dim; its backward scatter-adds into zeros (index_add).
#include "trireme/autograd/node.h"
#include "trireme/kernels/index.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  TRIREME_CHECK(x.defined() && index.defined(), "index_select: ", x.defined() ? "the index" : "the input",
                " is undefined");
  TRIREME_CHECK(x.dim() > 0, "index_select: needs an input with at least one dimension, got a scalar");
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  TRIREME_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32,
                "index_select: index must be i64 or i32, got ", index.dtype(), " (input ", x.sizes(), ")");
  TRIREME_CHECK(index.dim() == 1, "index_select: index must be 1-D, got shape ", index.sizes(), " (input ",
                x.sizes(), ")");
  TRIREME_CHECK(index.device() == x.device(), "index_select: input ", x.sizes(), " is on ", x.device(),
                " but index ", index.sizes(), " is on ", index.device());
  Shape out_shape = x.sizes();
  out_shape[size_t(d)] = index.size(0);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  find_kernel<IndexSelectKernel>("index_select", x.device(), x.dtype())(x, d, index, out);

  if (any_requires_grad({&x})) {
    SavedTensor si(index);
    record("index_select", {&x}, {&out}, [si, d, shape_x = x.sizes()](const TensorList& g) -> TensorList {
      // Rows selected several times get the sum of their gradients.
      Tensor gx = zeros(shape_x, g[0].dtype(), g[0].device());
      find_kernel<IndexAddKernel>("index_add", gx.device(), gx.dtype())(g[0], d, si.unpack("index_select"), gx);
      return {gx};
    });
  }
  return out;
}

}  // namespace trireme
