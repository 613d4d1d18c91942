// Checkpointed regions: forward without recording, replay and backward inside the backward.
#include "trireme/autograd/checkpoint.h"

#include <array>

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/engine.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/kernels/deferred_kernels.h"

namespace trireme::autograd {

TensorList checkpoint(const RegionFn& fn, const TensorList& inputs) {
  if (!grad_enabled()) return fn(inputs);
  std::array<AutocastState, kNumDeviceTypes> autocast;
  for (int d = 0; d < kNumDeviceTypes; ++d) autocast[size_t(d)] = autocast_state(DeviceType(d));

  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  std::vector<Tensor*> recorded;
  for (Tensor& out : outputs) {
    TRIREME_CHECK(out.defined(), "checkpoint: the region returned an undefined tensor");
    // Recording would make the input itself an output of the region (give it a grad_fn).
    for (const Tensor& in : inputs) {
      TRIREME_CHECK(!in.defined() || in.impl() != out.impl(), "checkpoint: the region returned one of its inputs; "
                    "return a new tensor (a region computes something)");
    }
    recorded.push_back(&out);
  }
  std::vector<SavedTensor> saved;
  std::vector<bool> wants_grad;
  for (const Tensor& in : inputs) {
    saved.emplace_back(in);
    wants_grad.push_back(in.defined() && in.requires_grad());
  }
  record("checkpoint", inputs, recorded,
         [fn, saved = std::move(saved), wants_grad = std::move(wants_grad), autocast](const TensorList& grads) {
           TensorList replay_in;
           for (size_t i = 0; i < saved.size(); ++i) {
             if (!saved[i].defined()) {
               replay_in.emplace_back();
               continue;
             }
             Tensor t = saved[i].unpack("checkpoint").detach();
             if (wants_grad[i]) t.set_requires_grad(true);
             replay_in.push_back(t);
           }
           TensorList replay_out;
           {
             GradModeGuard grad_on(true);
             AutocastModeGuard cpu(DeviceType::cpu, autocast[size_t(DeviceType::cpu)]);
             AutocastModeGuard cuda(DeviceType::cuda, autocast[size_t(DeviceType::cuda)]);
             // Only what the backward reads is computed again: the region's outputs were used
             // in the first run, and a value that only flows into them (a block's last GEMM)
             // is never read (kernels/deferred_kernels.h).
             RecomputationScope recomputing;
             kernels::DeferredKernels deferred;
             replay_out = fn(replay_in);
             deferred.run_observed(replay_out);
           }
           TRIREME_CHECK(replay_out.size() == grads.size(), "checkpoint: the replay returned ", replay_out.size(),
                         " tensors, the first run ", grads.size());
           TensorList roots, root_grads;
           for (size_t i = 0; i < replay_out.size(); ++i) {
             if (!grads[i].defined() || !replay_out[i].requires_grad()) continue;
             roots.push_back(replay_out[i]);
             root_grads.push_back(grads[i]);
           }
           if (!roots.empty()) backward(roots, root_grads);
           TensorList input_grads;
           for (size_t i = 0; i < replay_in.size(); ++i) {
             input_grads.push_back(wants_grad[i] ? replay_in[i].grad() : Tensor());
           }
           return input_grads;
         });
  return outputs;
}

void set_recompute_recipe(const Tensor& t, std::function<Tensor()> recipe) {
  t.impl()->autograd_meta().recompute = std::move(recipe);
}

std::function<Tensor()> recompute_recipe(const Tensor& t) {
  return t.defined() && t.impl()->autograd ? t.impl()->autograd->recompute : nullptr;
}

void recompute_when_saved(const Tensor& t, const TensorList& inputs, RegionFn fn) {
  TRIREME_CHECK(t.defined(), "recompute_when_saved: the tensor is undefined");
  if (!grad_enabled()) return;  // nothing records, so nothing will save it
  std::array<AutocastState, kNumDeviceTypes> autocast;
  for (int d = 0; d < kNumDeviceTypes; ++d) autocast[size_t(d)] = autocast_state(DeviceType(d));
  std::vector<SavedTensor> saved(inputs.begin(), inputs.end());
  set_recompute_recipe(t, [saved = std::move(saved), fn = std::move(fn), autocast] {
    TensorList in;
    for (const SavedTensor& s : saved) in.push_back(s.defined() ? s.unpack("recompute_when_saved") : Tensor());
    NoGradGuard no_grad;
    AutocastModeGuard cpu(DeviceType::cpu, autocast[size_t(DeviceType::cpu)]);
    AutocastModeGuard cuda(DeviceType::cuda, autocast[size_t(DeviceType::cuda)]);
    RecomputationScope recomputing;  // a traced step must not merge it back into the first computation
    TensorList out = fn(in);
    TRIREME_CHECK(out.size() == 1 && out[0].defined(), "recompute_when_saved: the recipe must return one tensor");
    return out[0].detach();
  });
}

}  // namespace trireme::autograd
