// Activation recomputation for modules: a module's forward as a checkpointed region
// (autograd/checkpoint.h) whose replay in the backward draws the same dropout masks. The
// module's draw counters and the global-row scope (Note [dropout keyed by global sample]) are
// taken when the forward runs and put back for the replay, so recomputation changes no value:
// only what is kept in memory and when the work is done.
//
//   Tensor y = nn::checkpointed(block, x, [&](const Tensor& in) { return block->forward(in); });
#pragma once

#include <functional>
#include <memory>

#include "trireme/nn/module.h"

namespace trireme::nn {

// forward(x) run as a checkpointed region of `module` (the module whose draws it makes; kept
// alive until the backward has replayed it).
Tensor checkpointed(const std::shared_ptr<Module>& module, const Tensor& x,
                    std::function<Tensor(const Tensor&)> forward);

}  // namespace trireme::nn
