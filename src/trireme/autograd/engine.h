// The backward engine: runs the graph behind some roots in reverse topological order.
#pragma once

#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::autograd {

// Computes gradients of `roots` (seeded with `grads`, or ones for scalar roots when a grad is
// undefined) and accumulates them into the leaves' .grad. Frees saved tensors unless
// retain_graph. Runs with grad mode off: backward of backward is not supported.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

}  // namespace trireme::autograd
