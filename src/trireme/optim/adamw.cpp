// AdamW: bias corrections in f64, then the fused per-dtype kernel.
#include "trireme/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"

namespace trireme::optim {

AdamW::AdamW(NamedParams params, const AdamWOptions& o) : Optimizer(std::move(params), o.lr, "AdamW"), options_(o) {
  TRIREME_CHECK(o.betas.first >= 0 && o.betas.first < 1 && o.betas.second >= 0 && o.betas.second < 1,
                "AdamW: betas must be in [0, 1), got (", o.betas.first, ", ", o.betas.second, ")");
  TRIREME_CHECK(o.eps >= 0 && o.weight_decay >= 0, "AdamW: eps and weight_decay must be non-negative");
  for (const auto& [name, p] : this->params()) {
    TRIREME_CHECK(is_floating(p.dtype()), "AdamW: parameter '", name, "' is ", p.dtype(), ", not floating");
  }
}

AdamWHyper AdamW::hyper(int64_t step) const {
  AdamWHyper h;
  h.lr = lr();
  h.beta1 = options_.betas.first;
  h.beta2 = options_.betas.second;
  h.eps = options_.eps;
  h.weight_decay = options_.weight_decay;
  h.bias_correction1 = 1.0 - std::pow(h.beta1, double(step));
  h.bias_correction2 = 1.0 - std::pow(h.beta2, double(step));
  return h;
}

std::pair<Tensor*, Tensor*> AdamW::moments(const std::string& name, const Tensor& param, const Tensor& grad) {
  TRIREME_CHECK(grad.sizes() == param.sizes() && grad.dtype() == param.dtype() && grad.device() == param.device(),
                "AdamW: gradient ", grad.str(), " does not match parameter '", name, "' ", param.str());
  const DType state_dtype = (param.dtype() == DType::bf16 || param.dtype() == DType::f16) ? DType::f32 : param.dtype();
  Tensor& m = state_or_init(name, "exp_avg", [&] { return zeros(param.sizes(), state_dtype, param.device()); });
  Tensor& v = state_or_init(name, "exp_avg_sq", [&] { return zeros(param.sizes(), state_dtype, param.device()); });
  return {&m, &v};
}

void AdamW::update(const std::string& name, Tensor& param, const Tensor& grad, int64_t step) {
  auto [m, v] = moments(name, param, grad);
  const AdamWHyper h = hyper(step);
  auto kernel = find_kernel<AdamWKernel>("adamw", param.device(), param.dtype());
  // In a traced step the learning rate and the bias corrections are inputs: recomputed from the
  // optimizer's state before every replay (graph/trace.h).
  auto refresh = [this](KernelArgs<AdamWKernel>& a) { std::get<4>(a) = hyper(step_count()); };
  Tensor g = contiguous(grad);
  if (param.is_contiguous()) {
    refresh_next_kernel_call<AdamWKernel>(refresh);
    kernel(param, g, *m, *v, h);
  } else {  // update a contiguous copy, then write it back through the view
    Tensor p = clone(param.detach());
    refresh_next_kernel_call<AdamWKernel>(refresh);
    kernel(p, g, *m, *v, h);
    Tensor dst = param;
    copy_(dst, p);
  }
  param.bump_version();
}

// The parameters of one device and dtype in one multi-tensor call each (on a GPU one launch, where
// a call per parameter costs a launch each: 148 for GPT-2), the same bits as update() on each.
void AdamW::update_all(std::span<const ParamUpdate> updates, int64_t step) {
  const AdamWHyper h = hyper(step);
  struct Group {
    Device device;
    DType dtype;
    std::vector<AdamWUpdate> members;
  };
  std::vector<Group> groups;
  for (const ParamUpdate& u : updates) {
    Tensor& param = *u.param;
    const Tensor& grad = *u.grad;
    if (!param.is_contiguous() || !grad.is_contiguous()) {
      update(*u.name, param, grad, step);
      continue;
    }
    auto [m, v] = moments(*u.name, param, grad);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.device == param.device() && g.dtype == param.dtype();
    });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{param.device(), param.dtype(), {}});
    group->members.push_back({&param, &grad, m, v, &h});
  }
  for (Group& g : groups) {
    find_kernel<AdamWMultiKernel>("adamw_multi", g.device, g.dtype)(g.members);
    for (const AdamWUpdate& u : g.members) u.param->bump_version();
  }
}

}  // namespace trireme::optim
