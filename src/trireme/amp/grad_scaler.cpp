// GradScaler (see grad_scaler.h).
#include "trireme/amp/grad_scaler.h"

#include <cmath>
#include <vector>

#include "trireme/autograd/grad_mode.h"
#include "trireme/kernels/amp.h"
#include "trireme/kernels/recording.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/step_scalar.h"

namespace trireme::amp {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  TRIREME_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0, "GradScaler: init_scale must be a ",
                "positive finite number, got ", options.init_scale);
  TRIREME_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ", options.growth_factor);
  TRIREME_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
                "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  TRIREME_CHECK(options.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ",
                options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  TRIREME_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined");
  // The scale as an argument a traced step refreshes before each replay (update() changes it
  // between steps); the same mul_scalar call eagerly.
  return mul_step_scalar(loss, [this] { return scale_; });
}

void GradScaler::unscale(const std::vector<Tensor>& grads) {
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  // Eagerly, the contiguous gradients of each dtype in one call; a traced step keeps a call per
  // gradient, whose inverse scale it refreshes before each replay.
  const bool traced = recording_for_replay();
  std::vector<std::vector<Tensor*>> by_dtype(kNumDTypes);
  std::vector<Tensor> contiguous_grads;  // what by_dtype points into
  contiguous_grads.reserve(grads.size());
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    TRIREME_CHECK(is_floating(g.dtype()), "GradScaler.unscale: gradient ", g.sizes(), " is ", g.dtype());
    if (!found_inf_.defined()) found_inf_ = zeros({1}, DType::f32, g.device());
    TRIREME_CHECK(g.device() == found_inf_.device(), "GradScaler.unscale: gradients on ", found_inf_.device(),
                  " and ", g.device(), "; one scaler handles the gradients of one device");
    if (!traced && g.is_contiguous()) {
      contiguous_grads.push_back(g);  // shares g's storage: the kernel writes the gradient itself
      by_dtype[size_t(g.dtype())].push_back(&contiguous_grads.back());
      continue;
    }
    auto kernel = find_kernel<AmpUnscaleKernel>("amp_unscale", g.device(), g.dtype());
    // In a traced step the inverse scale is an argument refreshed before each replay.
    refresh_next_kernel_call<AmpUnscaleKernel>(
        [this](KernelArgs<AmpUnscaleKernel>& a) { std::get<2>(a) = 1.0 / scale_; });
    if (g.is_contiguous()) {
      Tensor t = g;  // shares g's storage: the kernel writes the gradient itself
      kernel(t, found_inf_, inv);
      t.bump_version();
    } else {
      Tensor c = contiguous(g.detach());
      kernel(c, found_inf_, inv);
      Tensor dst = g;
      copy_(dst, c);
    }
  }
  for (size_t d = 0; d < by_dtype.size(); ++d) {
    if (by_dtype[d].empty()) continue;
    find_kernel<AmpUnscaleManyKernel>("amp_unscale_many", found_inf_.device(), DType(d))(by_dtype[d], found_inf_, inv);
    for (Tensor* g : by_dtype[d]) g->bump_version();
  }
}

bool GradScaler::update() {
  bool found = false;
  if (found_inf_.defined()) {
    const Tensor host = found_inf_.device().is_cpu() ? found_inf_ : to_device(found_inf_, Device::cpu());
    found = host.data<float>()[0] != 0.0f;
    NoGradGuard no_grad;
    zero_(found_inf_);
  }
  if (found) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_steps_;
    return false;
  }
  if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  return true;
}

std::vector<std::pair<std::string, Tensor>> GradScaler::state_dict() const {
  auto scalar = [](double v) { return full({1}, v, DType::f64); };
  return {{"amp.scale", scalar(scale_)},
          {"amp.growth_tracker", scalar(double(growth_tracker_))},
          {"amp.skipped_steps", scalar(double(skipped_steps_))}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto get = [&](const char* key) {
    auto it = state.find(key);
    TRIREME_CHECK(it != state.end() && it->second.numel() == 1, "GradScaler.load_state_dict: no one-element '", key,
                  "' (a checkpoint written without the f16 loss scaler?)");
    return to_dtype(to_device(it->second, Device::cpu()), DType::f64).data<double>()[0];
  };
  const double s = get("amp.scale");
  TRIREME_CHECK(std::isfinite(s) && s > 0, "GradScaler.load_state_dict: amp.scale is ", s);
  scale_ = s;
  growth_tracker_ = int64_t(get("amp.growth_tracker"));
  skipped_steps_ = int64_t(get("amp.skipped_steps"));
}

}  // namespace trireme::amp
