// Learning-rate schedules: pure functions of the (0-based) step, so a resumed run needs only
// the step count to continue the schedule.
//
//   optim::WarmupCosineLr sched({.max_lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 100, .total_steps = 5000});
//   opt.set_lr(sched.lr(step));
#pragma once

#include <cstdint>

namespace trireme::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(int64_t step) const = 0;
};

class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr(int64_t) const override { return lr_; }

 private:
  double lr_;
};

struct WarmupCosineOptions {
  double max_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
};

// Linear warm-up, then cosine decay to min_lr:
//   step < warmup:            max_lr * (step + 1) / warmup      (never 0, reaches max_lr at warmup-1)
//   warmup <= step < total:   min_lr + (max_lr - min_lr) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
//   step >= total:            min_lr
// warmup == total is allowed: every step of the run is a warm-up step (the lr ramps up to
// max_lr at the last step and never decays), which is what "warm up over the whole run" means.
class WarmupCosineLr : public LrSchedule {
 public:
  explicit WarmupCosineLr(const WarmupCosineOptions& options);
  double lr(int64_t step) const override;

 private:
  WarmupCosineOptions o_;
};

}  // namespace trireme::optim
