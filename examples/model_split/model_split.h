// Splitting a model over two devices: the core of examples/model_split (main.cpp is the program,
// tests/examples and tests/cuda check it). Read this file first.
//
// The model is a stack of decoder layers. Layers [0, split) live on one device, [split, L) on
// another; the activation crosses once, at the split, and autograd carries its gradient back:
//
//   h = stack[0..split)(x)          on device A
//   h = to_device(h, B)             the one copy; its backward copies the gradient back to A
//   y = stack[split..L)(h)          on device B
//   loss = mean((y - target)^2)     on device B; loss.backward() runs on both devices
//
// Done this way, device B idles while A computes and the other way round. The pipelined variant
// (Schedule::non_blocking with micro_batches > 1) cuts the batch into micro-batches and lets A
// compute micro-batch i+1 while B computes micro-batch i: every device works on its own streams,
// the copy at the split runs on a copy stream, and events, not the host, order the work.
// See Note [the three orderings] below for what must wait for what, and why.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trireme/core/rng.h"
#include "trireme/core/tensor.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/pinned.h"
#include "trireme/cuda/stream.h"
#include "trireme/nn/decoder_layer.h"
#include "trireme/nn/layer_list.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"

namespace model_split {

using namespace trireme;

struct ModelConfig {
  int64_t layers = 32;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t seq = 16;    // tokens per sequence (T)
  int64_t batch = 4;   // sequences per step (B)
  DType dtype = DType::f32;
  uint64_t seed = 1234;
};

// The model: decoder layers registered as "h.0", "h.1", ... under one root, so every parameter
// has a full name ("h.17.attn.c_attn.weight"). Initialisation draws each parameter from a random
// stream keyed by that name (nn/init.h), so two models built from one config are equal wherever
// their layers live: that is what makes the split run comparable with the one-device run.
class DecoderStack : public nn::Module {
 public:
  explicit DecoderStack(const ModelConfig& c) : Module("DecoderStack") {
    h = register_module("h", std::make_shared<nn::LayerList>());
    for (int64_t i = 0; i < c.layers; ++i) {
      h->push_back(std::make_shared<nn::TransformerDecoderLayer>(
          nn::DecoderLayerOptions{.d_model = c.d_model, .n_head = c.heads, .dtype = c.dtype}));
    }
  }
  // Layers [begin, end) applied to x (B, T, C); they must all be on x's device.
  Tensor forward_range(Tensor x, size_t begin, size_t end) const {
    for (size_t i = begin; i < end; ++i) x = layer(i).forward(x);
    return x;
  }
  nn::TransformerDecoderLayer& layer(size_t i) const {
    return static_cast<nn::TransformerDecoderLayer&>(*(*h)[i]);
  }
  size_t size() const { return h->size(); }

  std::shared_ptr<nn::LayerList> h;
};

// Where the layers go: [0, split) on `first`, [split, L) on `second`. {cpu, cpu} or {cuda:0,
// cuda:0} is the one-device run.
struct Placement {
  Device first = Device::cpu();
  Device second = Device::cpu();
  size_t split = 0;  // 0: half the layers
};

// Builds the model on the host, moves each layer to its device, then initialises the parameters
// where they are (the values do not depend on where: see DecoderStack).
inline std::unique_ptr<DecoderStack> build_model(const ModelConfig& c, Placement& p) {
  auto model = std::make_unique<DecoderStack>(c);
  if (p.split == 0) p.split = model->size() / 2;
  TRIREME_CHECK(p.split <= model->size(), "split at layer ", p.split, " of a ", model->size(), "-layer model");
  for (size_t i = 0; i < model->size(); ++i) model->layer(i).to(i < p.split ? p.first : p.second);
  nn::init_parameters(*model, c.seed);
  return model;
}

// One step's data: input x and regression target, both (B, T, C) in the model's dtype, on the
// host. Step `step` of seed s is the same batch for every placement.
//
// The task is learnable, so the example trains rather than fits noise: the target at position t
// is the input at position t - 1 (zeros at t = 0). The decoder's causal attention can learn to
// look one position back; before it does, the best it can do is keep its residual updates small
// (loss 2: the variance of x_t - x_{t-1}), so the loss falls from the first steps.
struct Batch {
  Tensor x, target;
};

inline Batch make_batch(const ModelConfig& c, int64_t step, bool pinned) {
  TRIREME_CHECK(c.seq >= 2, "the example's task (predict the previous position's input) needs seq >= 2, got ", c.seq);
  Generator gen(c.seed + 1, uint64_t(step));
  Tensor x = randn({c.batch, c.seq, c.d_model}, gen);
  Tensor previous = cat({zeros({c.batch, 1, c.d_model}), narrow(x, 1, 0, c.seq - 1)}, 1);
  Batch b{to_dtype(x, c.dtype), to_dtype(previous, c.dtype)};
  // Pinned (page-locked) host memory lets the copies to the devices run asynchronously.
  if (pinned) b = {cuda::pin_memory(b.x), cuda::pin_memory(b.target)};
  return b;
}

// The loss, in f32 whatever the model's dtype (a bf16 mean of many squares loses digits).
inline Tensor mse_loss(const Tensor& y, const Tensor& target) {
  Tensor d = to_dtype(sub(y, target), DType::f32);
  return mean(mul(d, d));
}

// How a step runs.
struct Schedule {
  int micro_batches = 1;
  // false: every hand-off waits for the host (the plain version; the timing baseline).
  // true: streams, events and non_blocking copies; the host never waits inside the step.
  bool non_blocking = false;
};

struct StepResult {
  Tensor loss;    // f32 scalar on the host: the mean over the whole batch
  Tensor output;  // y (B, T, C) on the second device, detached
};

// Note [the three orderings]
// With every device on its own streams, three things must be ordered by events:
//  1. Data: device B may read the activation only after the copy wrote it. The copy is queued
//     on B's copy stream after an event on A's stream (device_copy does that), and B's compute
//     stream waits on an event recorded after the copy. Gradients flowing back are ordered the
//     same way by the backward of to_device, on the current streams.
//  2. Memory: the caching allocator hands a freed block back only to the stream it was made on
//     (Note [allocator streams] in cuda/allocator.h). The activation is made on the copy stream
//     but read on the compute stream, so it is kept alive until the compute stream has finished
//     the step, and the copy stream waits for that before it reuses the memory.
//  3. The step boundary: the optimizer runs on the default streams. They wait for the compute
//     streams at the end of a step, and the compute streams wait for them at the start of the
//     next (the parameters were updated there).
class SplitRunner {
 public:
  SplitRunner(const DecoderStack& model, const Placement& placement, const Schedule& schedule)
      : model_(model), p_(placement), s_(schedule) {
    TRIREME_CHECK(s_.micro_batches >= 1, "micro_batches must be at least 1, got ", s_.micro_batches);
    if (s_.non_blocking) {
      TRIREME_CHECK(p_.first.is_cuda() && p_.second.is_cuda(), "non_blocking needs CUDA devices, got ",
                    p_.first, " and ", p_.second);
#ifdef TRIREME_WITH_CUDA
      streams_.emplace(Streams{cuda::Stream::create(p_.first.index), cuda::Stream::create(p_.second.index),
                               cuda::Stream::create(p_.second.index)});
#endif
    }
  }

  // Forward and backward of one batch: the gradients are accumulated into the parameters'
  // .grad (zero them first). GPipe order: all forwards, then the backwards in reverse, so that
  // in the pipelined variant A's forward of micro-batch i+1 overlaps B's forward of i, and B's
  // backward of i-1 overlaps A's backward of i.
  StepResult forward_backward(const Batch& batch) {
    const int64_t b = batch.x.size(0), m = s_.micro_batches;
    TRIREME_CHECK(b % m == 0, "batch ", b, " does not split into ", m, " micro-batches");
    if (streams_) begin_step();

    std::vector<Tensor> losses, outputs, received;
    for (int64_t i = 0; i < m; ++i) {
      Tensor x = narrow(batch.x, 0, i * (b / m), b / m), t = narrow(batch.target, 0, i * (b / m), b / m);
      Tensor h = on_first([&] { return model_.forward_range(to_device(x, p_.first, s_.non_blocking), 0, p_.split); });
      h = hand_over(h);
      received.push_back(h);  // see 2. in Note [the three orderings]
      Tensor y = on_second([&] { return model_.forward_range(h, p_.split, model_.size()); });
      Tensor loss = on_second([&] { return mul(mse_loss(y, to_device(t, p_.second, s_.non_blocking)), 1.0 / double(m)); });
      losses.push_back(loss);
      outputs.push_back(y.detach());
    }
    for (int64_t i = m - 1; i >= 0; --i) {
      on_both([&] { losses[size_t(i)].backward(); });
      if (!streams_) wait_for_devices();  // the plain version: nothing overlaps
    }

    StepResult r;
    r.output = on_second([&] { return cat(outputs, 0); });
    Tensor total = on_second([&] {
      Tensor sum = losses[0].detach();
      for (size_t i = 1; i < losses.size(); ++i) sum = add(sum, losses[i].detach());
      return sum;
    });
    if (streams_) end_step(received);
    r.loss = to_device(total, Device::cpu());  // waits for the device: the one host sync
    return r;
  }

 private:
  // Everything below the #ifdef is the pipelined variant: it needs the CUDA runtime, so a build
  // without CUDA keeps only the plain path (streams_ is then never set).
#ifdef TRIREME_WITH_CUDA
  struct Streams {
    cuda::Stream a, b, copy_b;  // compute on A, compute on B, the copy into B
  };

  // The hand-off at the split: the activation moves from A to B.
  Tensor hand_over(const Tensor& h) {
    if (!streams_) {
      if (p_.first == p_.second) return h;
      wait_for_devices();  // the plain version: B starts once A is done
      return to_device(h, p_.second);
    }
    if (p_.first == p_.second) {
      // Both halves on one device, each on its own stream: no copy, but B's stream must still
      // wait for A's work on h (1. in Note [the three orderings]); `received` keeps h alive
      // until B has read it (2.).
      join(streams_->a, streams_->b);
      return h;
    }
    // Queued on B's copy stream after A's work on h (device_copy orders it after A's current
    // stream); B's compute stream waits for the copy, not the host.
    cuda::StreamGuard on_a(streams_->a), on_copy(streams_->copy_b);
    Tensor moved = to_device(h, p_.second, /*non_blocking=*/true);
    cuda::Event copied;
    copied.record(streams_->copy_b);
    copied.wait(streams_->b);
    return moved;
  }

  template <class F>
  Tensor on_first(F&& f) {
    if (!streams_) return f();
    cuda::StreamGuard g(streams_->a);
    return f();
  }
  template <class F>
  Tensor on_second(F&& f) {
    if (!streams_) return f();
    cuda::StreamGuard g(streams_->b);
    return f();
  }
  template <class F>
  void on_both(F&& f) {
    if (!streams_) return f();
    cuda::StreamGuard ga(streams_->a), gb(streams_->b);
    f();
  }

  // 3. in Note [the three orderings]: the compute streams start after the default streams'
  // work (the last optimizer step).
  void begin_step() {
    join(cuda::Stream::default_stream(p_.first.index), streams_->a);
    join(cuda::Stream::default_stream(p_.second.index), streams_->b);
  }
  // The default streams continue after the compute streams; the copy stream reuses the
  // activations' memory only after the compute stream has read them (2.), so they can go now.
  void end_step(std::vector<Tensor>& received) {
    join(streams_->a, cuda::Stream::default_stream(p_.first.index));
    join(streams_->b, cuda::Stream::default_stream(p_.second.index));
    join(streams_->b, streams_->copy_b);
    received.clear();
  }
  static void join(const cuda::Stream& before, const cuda::Stream& after) {
    cuda::Event e;
    e.record(before);
    e.wait(after);
  }

  void wait_for_devices() const {
    for (Device d : {p_.first, p_.second}) {
      if (d.is_cuda()) cuda::synchronize(d.index);
    }
  }
#else
  struct Streams {};
  Tensor hand_over(const Tensor& h) { return to_device(h, p_.second); }  // CPU only: a no-op
  template <class F>
  Tensor on_first(F&& f) { return f(); }
  template <class F>
  Tensor on_second(F&& f) { return f(); }
  template <class F>
  void on_both(F&& f) { f(); }
  void begin_step() {}
  void end_step(std::vector<Tensor>& received) { received.clear(); }
  void wait_for_devices() const {}
#endif

  const DecoderStack& model_;
  Placement p_;
  Schedule s_;
  std::optional<Streams> streams_;
};

// Waits for the work queued on both devices (timing: the host clock then covers the devices' work).
inline void synchronize_all(const Placement& p) {
#ifdef TRIREME_WITH_CUDA
  for (Device d : {p.first, p.second}) {
    if (d.is_cuda()) cuda::synchronize(d.index);
  }
#endif
}

// What one run leaves for the comparison.
struct RunRecord {
  std::vector<double> losses;                          // per step
  Tensor output;                                       // step 0
  std::vector<std::pair<std::string, Tensor>> grads;   // step 0, copies
  std::vector<double> step_ms;                         // forward + backward, per step
};

// The peak learning rate the example trains with unless told otherwise: 1e-3 at d_model 64,
// scaled by 64 / d_model. Adam moves every weight by about lr in the first steps, whatever the
// gradient's size, and those moves line up with the layer's input, so a linear layer's output
// changes by about lr * d_model while its initial output is O(1) (weights uniform in
// +-1/sqrt(d_model)). A fixed lr therefore changes each wide layer by more than its own size at
// once, and 32 stacked residual layers compound it: lr 1e-3 at d_model 1024 diverged
// (loss 3.9, 14.8, 22.1). Scaling lr with 1 / width (as muP does for Adam's hidden layers) keeps
// the relative change per step the same at every width.
inline double default_lr(const ModelConfig& c) { return 1e-3 * 64.0 / double(c.d_model); }

// The learning rate at `step` (0-based): a linear warmup over the first `warmup` steps to `peak`,
// then constant. Adam's first updates are the largest relative to the gradient (its second-
// moment estimate starts from one sample), so the first steps take a fraction of the peak.
inline double warmup_lr(double peak, int step, int warmup) {
  return warmup > 0 && step < warmup ? peak * double(step + 1) / double(warmup + 1) : peak;
}

// Trains a freshly built model `steps` steps of AdamW (peak lr: default_lr when lr <= 0; linear
// warmup over the first 2 steps; no weight decay) on the batches of make_batch, and records what
// the comparison needs.
inline RunRecord train(const ModelConfig& config, Placement placement, const Schedule& schedule, int steps,
                       double lr = 0.0) {
  const double peak = lr > 0 ? lr : default_lr(config);
  constexpr int kWarmup = 2;
  auto model = build_model(config, placement);
  optim::AdamW opt(model->named_parameters(), {.lr = warmup_lr(peak, 0, kWarmup), .weight_decay = 0.0});
  SplitRunner runner(*model, placement, schedule);
  const bool pinned = placement.first.is_cuda() && schedule.non_blocking;
  RunRecord rec;
  // The usual loop: the split changes nothing here. The optimizer holds parameters of both
  // devices and updates each where it lives.
  for (int step = 0; step < steps; ++step) {
    opt.set_lr(warmup_lr(peak, step, kWarmup));
    opt.zero_grad();
    Batch batch = make_batch(config, step, pinned);
    synchronize_all(placement);
    const auto t0 = std::chrono::steady_clock::now();
    StepResult r = runner.forward_backward(batch);
    synchronize_all(placement);
    rec.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    rec.losses.push_back(r.loss.item());
    if (step == 0) {
      rec.output = r.output;
      for (auto& [name, p] : model->named_parameters()) rec.grads.emplace_back(name, clone(p.grad()));
    }
    opt.step();
  }
  return rec;
}

// Comparison: max |a - b| / max |b| over a tensor (a normwise relative difference: elementwise
// ratios blow up on elements that are nearly zero).
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  Tensor x = to_dtype(to_device(a.detach(), Device::cpu()), DType::f64);
  Tensor y = to_dtype(to_device(b.detach(), Device::cpu()), DType::f64);
  TRIREME_CHECK(x.sizes() == y.sizes(), "max_rel_diff: shapes ", x.sizes(), " and ", y.sizes());
  const double num = max(abs(sub(x, y))).item(), den = max(abs(y)).item();
  return den > 0 ? num / den : num;
}

// The tolerance on max_rel_diff by dtype. Equal placements on equal hardware give 0; micro-
// batching changes the order gradients are summed in (f32: ~1e-7 relative per add; bf16: 8 bits
// of mantissa, ~4e-3 per add, and 32 layers of bf16 activations computed in other matmul shapes).
inline double tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-4;
    case DType::f16: return 2e-2;
    case DType::bf16: return 5e-2;
    default: return 0.0;
  }
}

}  // namespace model_split
