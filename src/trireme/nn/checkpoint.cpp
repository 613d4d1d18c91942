// Checkpointed modules: the replay restores the first run's draw counters and row scope.
#include "trireme/nn/checkpoint.h"

#include <optional>

#include "trireme/autograd/checkpoint.h"
#include "trireme/nn/dropout.h"

namespace trireme::nn {

Tensor checkpointed(const std::shared_ptr<Module>& module, const Tensor& x,
                    std::function<Tensor(const Tensor&)> forward) {
  struct FirstRun {
    bool done = false;
    std::vector<uint64_t> counters;    // before the first run
    std::optional<int64_t> first_row;  // its global-row scope
  };
  auto first = std::make_shared<FirstRun>();
  first->counters = module->rng_counters();
  first->first_row = GlobalRowScope::current();
  auto region = [module, forward = std::move(forward), first](const autograd::TensorList& in) {
    if (!first->done) {
      first->done = true;
      return autograd::TensorList{forward(in[0])};
    }
    // The replay: the draws of the first run, then the counters as they are now.
    const std::vector<uint64_t> now = module->rng_counters();
    module->set_rng_counters(first->counters);
    std::optional<GlobalRowScope> rows;
    if (first->first_row) rows.emplace(*first->first_row);
    RedrawScope redraw;  // a traced step: the first run bound these draws' streams
    Tensor out = forward(in[0]);
    module->set_rng_counters(now);
    return autograd::TensorList{out};
  };
  return autograd::checkpoint(region, {x})[0];
}

}  // namespace trireme::nn
