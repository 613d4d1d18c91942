// TrainPrecision: what train.precision means for a runner. "f32": nothing. "bf16" / "f16": the
// parameters (master weights), gradients and optimizer state stay f32 while the forward runs
// under autocast (amp/autocast.h); "f16" also scales the loss (amp/grad_scaler.h), skipping
// steps whose gradients overflowed. Every runner (one process, tp/dp, pp) uses it the same way:
//
//   TrainPrecision prec(cfg);
//   { auto ac = prec.autocast_guard(device); loss = model.loss(x, y); }
//   prec.scale_loss(loss).backward();
//   if (prec.unscale_and_check(grads, device, all_reduce_max)) { clip; optimizer.step(); }
//   optimizer.zero_grad();
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trireme/amp/autocast.h"
#include "trireme/amp/grad_scaler.h"
#include "trireme/io/config.h"
#include "trireme/train/checkpoint.h"

namespace trireme::train {

class TrainPrecision {
 public:
  explicit TrainPrecision(const io::TrainConfig& cfg);

  const std::string& name() const { return name_; }  // "f32" | "bf16" | "f16"
  bool autocast() const { return name_ != "f32"; }
  DType low_dtype() const { return name_ == "f16" ? DType::f16 : DType::bf16; }
  // The autocast region for a forward on `device` (a guard that switches nothing on for f32).
  std::unique_ptr<amp::AutocastGuard> autocast_guard(Device device) const {
    return std::make_unique<amp::AutocastGuard>(device.type, low_dtype(), autocast());
  }

  // f16: loss * scale; otherwise the loss itself.
  Tensor scale_loss(const Tensor& loss) const { return scaler_ ? scaler_->scale(loss) : loss; }
  // f16: unscales `grads` (on `device`) in place, makes the inf/NaN flag common to every rank
  // with `all_reduce_max` (when given), and updates the scale. Returns whether to step (always
  // true without a scaler). One host sync per step.
  bool unscale_and_check(const std::vector<Tensor>& grads, Device device,
                         const std::function<void(Tensor& flag)>& all_reduce_max = {});
  // unscale_and_check in two halves, for a traced step (static mode), which cannot read the flag:
  // unscale() leaves the common inf/NaN flag on the device and returns it (the optimizer's step
  // masked by it: Optimizer::mask_steps_by); update(), after the step, reads it and updates the
  // scale, returning whether the step counted.
  Tensor unscale(const std::vector<Tensor>& grads, Device device,
                 const std::function<void(Tensor& flag)>& all_reduce_max = {});
  bool update();

  bool has_scaler() const { return scaler_ != nullptr; }
  double loss_scale() const { return scaler_ ? scaler_->scale_value() : 0.0; }
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }

  // The scaler's state rides in the optimizer's checkpoint file (keys "amp.*").
  void add_state(NamedTensors& optimizer_state) const;
  // Loads the scaler from `optimizer_state` and returns the rest (for the optimizer).
  std::map<std::string, Tensor> take_state(const std::map<std::string, Tensor>& optimizer_state);

 private:
  std::string name_;
  std::unique_ptr<amp::GradScaler> scaler_;
};

// The gradients of a parameter list (undefined where a parameter has none).
std::vector<Tensor> grads_of(const std::vector<std::pair<std::string, Tensor>>& params);

}  // namespace trireme::train
