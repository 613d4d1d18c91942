// TrainPrecision (see precision.h).
#include "trireme/train/precision.h"

#include "trireme/ops/factory.h"

namespace trireme::train {

TrainPrecision::TrainPrecision(const io::TrainConfig& cfg) : name_(cfg.train.precision.empty() ? "f32" : cfg.train.precision) {
  TRIREME_CHECK(name_ == "f32" || name_ == "bf16" || name_ == "f16", "train.precision: expected one of \"f32\", ",
                "\"bf16\", \"f16\", got \"", name_, "\"");
  if (name_ == "f16") {
    scaler_ = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{
        .init_scale = cfg.train.loss_scale_init > 0 ? cfg.train.loss_scale_init : 65536.0,
        .growth_interval = cfg.train.loss_scale_interval > 0 ? cfg.train.loss_scale_interval : 2000});
  }
}

bool TrainPrecision::unscale_and_check(const std::vector<Tensor>& grads, Device device,
                                       const std::function<void(Tensor& flag)>& all_reduce_max) {
  if (!scaler_) return true;
  unscale(grads, device, all_reduce_max);
  return update();
}

Tensor TrainPrecision::unscale(const std::vector<Tensor>& grads, Device device,
                               const std::function<void(Tensor& flag)>& all_reduce_max) {
  if (!scaler_) return Tensor();
  scaler_->unscale(grads);
  // A rank without gradients (none defined) still takes part, with a clean flag.
  if (!scaler_->found_inf().defined()) scaler_->found_inf() = zeros({1}, DType::f32, device);
  if (all_reduce_max) all_reduce_max(scaler_->found_inf());
  return scaler_->found_inf();
}

bool TrainPrecision::update() { return scaler_ ? scaler_->update() : true; }

void TrainPrecision::add_state(NamedTensors& optimizer_state) const {
  if (!scaler_) return;
  for (auto& kv : scaler_->state_dict()) optimizer_state.push_back(std::move(kv));
}

std::map<std::string, Tensor> TrainPrecision::take_state(const std::map<std::string, Tensor>& optimizer_state) {
  std::map<std::string, Tensor> rest, mine;
  for (const auto& [k, t] : optimizer_state) (amp::GradScaler::is_state_key(k) ? mine : rest).emplace(k, t);
  if (scaler_) scaler_->load_state_dict(mine);
  return rest;
}

std::vector<Tensor> grads_of(const std::vector<std::pair<std::string, Tensor>>& params) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const auto& [name, p] : params) out.push_back(p.grad());
  return out;
}

}  // namespace trireme::train
