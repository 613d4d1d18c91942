// Deferred kernel calls: while a DeferredKernels scope is alive on a thread, kernel calls are kept
// instead of run (the tensors they touch stay alive with them). Before host code touches tensor
// memory, and before a collective, everything kept runs, in order, so that what the host or a
// peer sees is computed. At the end of the scope, run_observed runs only the calls whose results
// something can still see: a tensor held outside the kept calls (by an autograd node that saved
// it, by a module, by the caller), or read by a call that runs. The rest never run.
//
// What it is for: a checkpointed region's replay (autograd/checkpoint.h) runs its forward again
// only for the tensors the backward reads. The last GEMM of a transformer block's MLP, whose
// output only flows into the block's output, is one of those the backward never reads.
//
//   kernels::DeferredKernels deferred;
//   TensorList out = fn(in);          // records an autograd graph; kernels are kept
//   deferred.run_observed(out);       // out's own values are not wanted
#pragma once

#include <cstdint>
#include <vector>

#include "trireme/core/trace_hook.h"
#include "trireme/kernels/kernel_tape.h"

namespace trireme::kernels {

class DeferredKernels final : public KernelTape, public StorageObserver {
 public:
  DeferredKernels();   // installs itself on this thread, in front of a tracer if one is running
  ~DeferredKernels();  // runs what is still kept (unless an exception unwinds), uninstalls
  DeferredKernels(const DeferredKernels&) = delete;
  DeferredKernels& operator=(const DeferredKernels&) = delete;

  // Runs the kept calls that write memory something outside them can see, and the calls those
  // read from; `unwanted` are tensors whose values the caller holds but does not need. Returns
  // how many kept calls were dropped.
  int64_t run_observed(const std::vector<Tensor>& unwanted);

  // ---- KernelTape ----
  bool record(KernelCallRecord call) override;
  void begin_kernel() override;
  void end_kernel() override;
  bool in_kernel() const override { return in_kernel_ > 0; }
  void refresh_next_call(std::type_index kernel_type, std::function<void(void* args)> refresh) override;
  void bind_u64(uint64_t traced_value, std::function<uint64_t()> value_now) override;
  void on_replay(std::function<void()> host_step) override;

  // ---- StorageObserver ----
  void on_alloc(const Storage& s) override;
  void on_free(const Storage& s) override;
  void on_host_access(const Storage& s, const char* what) override;

 private:
  struct Kept {
    KernelCallRecord call;
    std::vector<Tensor> tensors;  // the call's tensor arguments, kept alive
  };
  void run(Kept& k);
  void run_all();

  std::vector<Kept> kept_;
  KernelTape* outer_tape_;
  StorageObserver* outer_observer_;
  int in_kernel_ = 0;
  int uncaught_at_start_;
};

}  // namespace trireme::kernels
