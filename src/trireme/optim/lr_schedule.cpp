// Learning-rate schedules.
#include "trireme/optim/lr_schedule.h"

#include <cmath>

#include "trireme/core/error.h"

namespace trireme::optim {

WarmupCosineLr::WarmupCosineLr(const WarmupCosineOptions& o) : o_(o) {
  // warmup_steps == total_steps is a run that only warms up: no step reaches the decay phase.
  TRIREME_CHECK(o.warmup_steps >= 0 && o.total_steps >= o.warmup_steps, "WarmupCosineLr: need 0 <= warmup_steps (",
                o.warmup_steps, ") <= total_steps (", o.total_steps, ")");
  TRIREME_CHECK(o.min_lr >= 0 && o.max_lr >= o.min_lr, "WarmupCosineLr: need 0 <= min_lr (", o.min_lr,
                ") <= max_lr (", o.max_lr, ")");
}

double WarmupCosineLr::lr(int64_t step) const {
  TRIREME_CHECK(step >= 0, "WarmupCosineLr: negative step ", step);
  if (step < o_.warmup_steps) return o_.max_lr * double(step + 1) / double(o_.warmup_steps);
  if (step >= o_.total_steps) return o_.min_lr;
  const double ratio = double(step - o_.warmup_steps) / double(o_.total_steps - o_.warmup_steps);
  return o_.min_lr + (o_.max_lr - o_.min_lr) * 0.5 * (1.0 + std::cos(M_PI * ratio));
}

}  // namespace trireme::optim
