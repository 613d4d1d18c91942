// SGD update through the public elementwise ops (works on any device and dtype).
#include "trireme/optim/sgd.h"

#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/step_scalar.h"

namespace trireme::optim {

SGD::SGD(NamedParams params, const SGDOptions& o) : Optimizer(std::move(params), o.lr, "SGD"), options_(o) {
  TRIREME_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD: momentum and weight_decay must be non-negative");
  TRIREME_CHECK(!o.nesterov || o.momentum > 0, "SGD: nesterov needs momentum > 0");
}

void SGD::update(const std::string& name, Tensor& param, const Tensor& grad, int64_t) {
  Tensor g = grad;
  if (options_.weight_decay != 0) g = add(g, mul(param, options_.weight_decay));
  if (options_.momentum != 0) {
    bool fresh = !state(name, "momentum_buffer").defined();
    Tensor& buf = state_or_init(name, "momentum_buffer", [&] { return clone(g); });
    if (!fresh) {
      mul_(buf, options_.momentum);
      add_(buf, g);
    }
    g = options_.nesterov ? add(g, mul(buf, options_.momentum)) : buf;
  }
  // add_(param, g, -lr()) as two calls, the learning rate an argument a traced step recomputes
  // before every replay (ops/step_scalar.h); the same kernels, so the same bits.
  add_(param, mul_step_scalar(g, [this] { return -lr(); }));
}

}  // namespace trireme::optim
