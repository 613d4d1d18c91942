// Embedding layer.
#include "trireme/nn/embedding.h"

#include "trireme/nn/init.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::nn {

Embedding::Embedding(int64_t n, int64_t d, DType dtype) : Module("Embedding"), num_embeddings(n), dim(d) {
  TRIREME_CHECK(n > 0 && d > 0, "Embedding: sizes must be positive, got ", n, " x ", d);
  weight = register_parameter("weight", zeros({n, d}, dtype));
  reset_parameters(0);
}

void Embedding::reset_parameters(uint64_t seed) {
  init_normal(weight, 1.0, seed, join_name(qualified_name(), "weight"));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

}  // namespace trireme::nn
