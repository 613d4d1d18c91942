// Grad mode is per thread, like PyTorch's: a NoGradGuard on one thread does not affect another.
#include "trireme/autograd/grad_mode.h"

namespace trireme::autograd {
namespace {
thread_local bool tls_grad_enabled = true;
}
bool grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool enabled) { tls_grad_enabled = enabled; }
}  // namespace trireme::autograd
