// Grad mode: whether ops record autograd history on this thread.
//
//   { NoGradGuard no_grad; optimizer.step(); }   // nothing inside is recorded
#pragma once

namespace trireme::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace trireme::autograd

namespace trireme {
using autograd::NoGradGuard;
}
