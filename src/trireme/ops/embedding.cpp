// embedding: gather rows of a (V, D) table by integer ids; backward scatter-adds into (V, D).
#include "trireme/autograd/node.h"
#include "trireme/kernels/embedding.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  TRIREME_CHECK(weight.defined() && ids.defined(), "embedding: ", weight.defined() ? "ids are" : "the weight is",
                " undefined");
  TRIREME_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (V, D), got ", weight.sizes());
  TRIREME_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, "embedding: ids must be i64 or i32, got ",
                ids.dtype(), " (ids ", ids.sizes(), ", weight ", weight.sizes(), ")");
  TRIREME_CHECK(ids.device() == weight.device(), "embedding: weight ", weight.sizes(), " is on ", weight.device(),
                " but ids ", ids.sizes(), " are on ", ids.device());
  const int64_t dim = weight.size(1);
  const Tensor flat_ids = contiguous(ids.detach());
  Shape out_shape = ids.sizes();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  find_kernel<EmbeddingKernel>("embedding", weight.device(), weight.dtype())(weight, flat_ids, out);

  if (any_requires_grad({&weight})) {
    SavedTensor si(flat_ids);
    record("embedding", {&weight}, {&out}, [si, shape_w = weight.sizes(), n = ids.numel()](const TensorList& g) -> TensorList {
      const Tensor g2 = contiguous(reshape(g[0], {n, shape_w[1]}));
      Tensor gw = zeros(shape_w, g2.dtype(), g2.device());
      find_kernel<EmbeddingBackwardKernel>("embedding_backward", gw.device(), gw.dtype())(g2, si.unpack("embedding"), gw);
      return {gw};
    });
  }
  return out;
}

}  // namespace trireme
