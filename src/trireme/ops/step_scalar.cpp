#include "trireme/ops/step_scalar.h"

#include <memory>
#include <tuple>

#include "trireme/autograd/node.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/ops/elementwise.h"

namespace trireme {

namespace {

// The next mul_scalar call (a UnaryKernel: input, output, the scalar) takes now() at replay.
void refresh_scalar(const std::shared_ptr<std::function<double()>>& now) {
  refresh_next_kernel_call<UnaryKernel>([now](KernelArgs<UnaryKernel>& a) { std::get<2>(a) = (*now)(); });
}

}  // namespace

Tensor mul_step_scalar(const Tensor& x, std::function<double()> now) {
  auto shared = std::make_shared<std::function<double()>>(std::move(now));
  refresh_scalar(shared);
  Tensor out = mul(x.detach(), (*shared)());  // one mul_scalar call, recording nothing
  if (autograd::any_requires_grad({&x})) {
    autograd::record("mul_scalar", {&x}, {&out}, [shared](const autograd::TensorList& g) -> autograd::TensorList {
      refresh_scalar(shared);
      return {mul(g[0], (*shared)())};
    });
  }
  return out;
}

}  // namespace trireme
