// GradScaler: dynamic loss scaling for f16 training. f16's largest value is 65504 and its
// smallest normal 6e-5, so small gradients underflow to 0; multiplying the loss by a large
// scale S lifts every gradient by S, and dividing by S again (in f32, on the f32 master
// gradients) before the optimizer step restores them. When S was too large some gradient
// overflows to inf/NaN: that step is skipped and S halves; after growth_interval clean steps S
// doubles, so S hovers near the largest value that does not overflow.
// bf16 has f32's exponent range and needs no scaler (train.precision = "bf16" uses none).
//
//   amp::GradScaler scaler;                       // init_scale 2^16, x2 / x0.5, interval 2000
//   scaler.scale(loss).backward();                // gradients of S * loss
//   scaler.unscale(grads);                        // grads /= S, inf/NaN collected on the device
//   // parallel: all-reduce scaler.found_inf() with max over every rank here
//   if (scaler.update()) optimizer.step();        // one host sync; false: skipped, S halved
//   optimizer.zero_grad();
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (recorded by autograd like any multiplication).
  Tensor scale(const Tensor& loss) const;
  // Divides each defined gradient by the scale in place and notes any inf/NaN in found_inf()
  // (kernel amp_unscale: no host sync). Undefined tensors are skipped. Call once per step.
  void unscale(const std::vector<Tensor>& grads);
  // The step's inf/NaN flag: a one-element f32 tensor (1 = found) on the gradients' device, or
  // undefined before unscale(). Parallel runs all-reduce it (max) over every rank before update()
  // so that all ranks skip or step together.
  Tensor& found_inf() { return found_inf_; }
  // Reads the flag (one host sync), updates the scale and the counters, resets the flag.
  // Returns true when the gradients were finite and the optimizer should step.
  bool update();

  double scale_value() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }  // clean steps since the last change
  int64_t skipped_steps() const { return skipped_steps_; }    // in total
  const GradScalerOptions& options() const { return options_; }

  // "amp.scale", "amp.growth_tracker", "amp.skipped_steps": f64 one-element CPU tensors, for
  // the optimizer's checkpoint file. load_state_dict ignores keys without the "amp." prefix.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);
  static bool is_state_key(const std::string& key) { return key.rfind("amp.", 0) == 0; }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  Tensor found_inf_;
};

}  // namespace trireme::amp
