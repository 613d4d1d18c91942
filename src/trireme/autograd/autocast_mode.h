// Autocast state: per thread and per device type, whether ops run in a lower precision and in
// which (bf16 or f16). Only the state lives here, low in the stack, so that ops can read it
// without depending on amp/; the policy (which op casts to what) is ops/autocast_policy.cpp and
// the user-facing guard is amp/autocast.h.
//
//   { AutocastModeGuard g(DeviceType::cpu, DType::bf16); logits = model.forward(ids); }
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include "trireme/core/device.h"
#include "trireme/core/dtype.h"
#include "trireme/core/tensor.h"

namespace trireme::autograd {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;  // the low dtype: bf16 or f16
};

AutocastState autocast_state(DeviceType device);
void set_autocast_state(DeviceType device, AutocastState state);
// The low dtype for tensors on `device` when autocast is on there; nullopt otherwise.
std::optional<DType> autocast_dtype(DeviceType device);

// Sets the state of one device type for a scope and restores the previous one after (so guards
// nest, and an inner `enabled = false` switches autocast off for a region).
class AutocastModeGuard {
 public:
  AutocastModeGuard(DeviceType device, AutocastState state);
  ~AutocastModeGuard();
  AutocastModeGuard(const AutocastModeGuard&) = delete;
  AutocastModeGuard& operator=(const AutocastModeGuard&) = delete;

 private:
  DeviceType device_;
  AutocastState previous_;
};

class CastCache;

// Switches autocast off on every device type for a scope (the backward engine uses it: backward
// runs in the dtypes the forward chose, Note [autocast policy] in ops/autocast_policy.h), and
// with it the thread's cast cache: a checkpointed region that replays inside the backward turns
// autocast back on for itself, but its casts are not kept.
class AutocastOffGuard {
 public:
  AutocastOffGuard();
  ~AutocastOffGuard();
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  AutocastState previous_[kNumDeviceTypes];
  CastCache* previous_cache_;
};

// Note [autocast cast cache]
// Autocast casts a low op's f32 weight to the low dtype at each use, and the op keeps the cast for
// its backward. A pipeline stage runs several micro-batches' forwards before their backwards, so
// without sharing it holds one cast of every weight per micro-batch in flight (2 bytes per
// parameter each); one stage running its micro-batches one after another would cast every weight
// again for each. Within a CastCache scope (the pipeline executor's step, and a one-stage step's
// micro-batches in train/parallel_runner.cpp), the first cast of
// each of the scope's tensors made while grad mode is on is kept, and later casts of the same
// tensor to the same dtype, at the same version, reuse it (to_dtype_reusing, ops/copy.h): one
// copy of the data, while each use records its own cast node, so every micro-batch's backward
// graph stays its own (released after its backward, run in its own order, the gradient cast
// back to f32 as before: the same bits). What is not kept: casts under no-grad (a recomputed
// region's first run: nothing saves them) and casts inside a backward (a recomputed region's
// replay, see AutocastOffGuard), so a block recomputed whole still frees its casts after its
// backward. The scope holds what it kept until it ends.
class CastCache {
 public:
  // Caches casts of these tensors only (a stage's parameters; views of them are cast as usual).
  explicit CastCache(const std::vector<Tensor>& tensors);
  ~CastCache();
  CastCache(const CastCache&) = delete;
  CastCache& operator=(const CastCache&) = delete;

  // The cast of t to dtype kept earlier in this scope; undefined when there is none.
  Tensor find(const Tensor& t, DType dtype) const;
  // Whether casts of t are kept here (one of the scope's tensors, grad mode on).
  bool keeps(const Tensor& t) const;
  void keep(const Tensor& t, const Tensor& cast);

 private:
  struct Kept {
    uint64_t version = 0;
    Tensor cast;
  };
  std::unordered_map<const TensorImpl*, std::vector<Kept>> kept_;
  std::vector<Tensor> tensors_;  // alive while their addresses key kept_
  CastCache* previous_;
};

// This thread's cache in force, or null (none, or switched off by AutocastOffGuard).
CastCache* active_cast_cache();

}  // namespace trireme::autograd
