// Deferred kernel calls (deferred_kernels.h).
#include "trireme/kernels/deferred_kernels.h"

#include <exception>
#include <unordered_map>
#include <unordered_set>

#include "trireme/core/storage.h"

namespace trireme::kernels {

DeferredKernels::DeferredKernels()
    : outer_tape_(active_kernel_tape()), outer_observer_(storage_observer()), uncaught_at_start_(std::uncaught_exceptions()) {
  TRIREME_CHECK(outer_tape_ == nullptr || !outer_tape_->in_kernel(), "DeferredKernels: opened inside a kernel call");
  active_kernel_tape() = this;
  storage_observer() = this;
}

DeferredKernels::~DeferredKernels() {
  if (std::uncaught_exceptions() == uncaught_at_start_) {
    try {
      run_all();
    } catch (...) {
      // A destructor may not throw; the calls' error would surface at the next synchronisation.
    }
  }
  kept_.clear();
  active_kernel_tape() = outer_tape_;
  storage_observer() = outer_observer_;
}

bool DeferredKernels::record(KernelCallRecord call) {
  if (call.kernel == nullptr) {  // a collective: peers read what the kept calls compute
    run_all();
    if (outer_tape_ != nullptr) outer_tape_->record(std::move(call));
    return true;
  }
  Kept k;
  for (const Tensor* t : call.tensors) k.tensors.push_back(*t);
  k.call = std::move(call);
  kept_.push_back(std::move(k));
  return false;
}

void DeferredKernels::begin_kernel() {
  ++in_kernel_;
  if (outer_tape_ != nullptr) outer_tape_->begin_kernel();
}

void DeferredKernels::end_kernel() {
  --in_kernel_;
  if (outer_tape_ != nullptr) outer_tape_->end_kernel();
}

void DeferredKernels::refresh_next_call(std::type_index kernel_type, std::function<void(void* args)> refresh) {
  run_all();  // the outer tape gives the refresh to the next call it records: the kept ones come first
  if (outer_tape_ != nullptr) outer_tape_->refresh_next_call(kernel_type, std::move(refresh));
}

void DeferredKernels::bind_u64(uint64_t traced_value, std::function<uint64_t()> value_now) {
  if (outer_tape_ != nullptr) outer_tape_->bind_u64(traced_value, std::move(value_now));
}

void DeferredKernels::on_replay(std::function<void()> host_step) {
  if (outer_tape_ != nullptr) outer_tape_->on_replay(std::move(host_step));
}

void DeferredKernels::on_alloc(const Storage& s) {
  if (outer_observer_ != nullptr) outer_observer_->on_alloc(s);
}

void DeferredKernels::on_free(const Storage& s) {
  if (outer_observer_ != nullptr) outer_observer_->on_free(s);
}

void DeferredKernels::on_host_access(const Storage& s, const char* what) {
  if (in_kernel_ == 0) run_all();
  if (outer_observer_ != nullptr) outer_observer_->on_host_access(s, what);
}

void DeferredKernels::run(Kept& k) {
  std::vector<Tensor*> ptrs;
  for (size_t i = 0; i < k.tensors.size(); ++i) {
    ptrs.push_back(&k.tensors[i]);
    k.call.tensors[i] = &k.tensors[i];
  }
  // A tracer sees the call now, in order; an outer DeferredKernels keeps it and runs it itself.
  if (outer_tape_ != nullptr && !outer_tape_->record(k.call)) return;
  begin_kernel();
  struct End {
    DeferredKernels* d;
    ~End() { d->end_kernel(); }
  } end{this};
  k.call.invoke(k.call.args.get(), ptrs.data());
}

void DeferredKernels::run_all() {
  std::vector<Kept> now = std::move(kept_);
  kept_.clear();
  for (Kept& k : now) run(k);
}

int64_t DeferredKernels::run_observed(const std::vector<Tensor>& unwanted) {
  // The handles the kept calls and the caller hold, per tensor; whatever holds a tensor, or
  // another tensor over its memory, beyond those can see that memory.
  std::unordered_map<const TensorImpl*, long> handles;
  for (const Kept& k : kept_) {
    for (const Tensor& t : k.tensors) {
      if (t.defined()) ++handles[t.impl()];
    }
  }
  for (const Tensor& t : unwanted) {
    if (auto it = t.defined() ? handles.find(t.impl()) : handles.end(); it != handles.end()) ++it->second;
  }
  struct Over {
    long tensors = 0;    // our tensors over the storage (each holds one reference to it)
    long references = 0;
  };
  std::unordered_map<const Storage*, Over> storages;
  std::unordered_set<const Storage*> needed;
  for (const Kept& k : kept_) {
    for (const Tensor& t : k.tensors) {
      if (!t.defined()) continue;
      auto it = handles.find(t.impl());
      if (it->second < 0) continue;  // seen
      Over& o = storages[t.storage().get()];
      ++o.tensors;
      o.references = long(t.storage().use_count());
      if (long(t.impl_ptr().use_count()) > it->second) needed.insert(t.storage().get());
      it->second = -1;
    }
  }
  for (const auto& [storage, o] : storages) {
    if (o.references > o.tensors) needed.insert(storage);
  }
  // From the last call back: a call runs when it writes memory that is needed; what it reads
  // (and writes, in case it writes only part) is then needed before it.
  std::vector<bool> runs(kept_.size(), false);
  for (size_t i = kept_.size(); i-- > 0;) {
    const Kept& k = kept_[i];
    for (size_t a = 0; a < k.tensors.size() && !runs[i]; ++a) {
      runs[i] = k.call.written[a] && k.tensors[a].defined() && needed.count(k.tensors[a].storage().get());
    }
    if (!runs[i]) continue;
    for (const Tensor& t : k.tensors) {
      if (t.defined()) needed.insert(t.storage().get());
    }
  }
  std::vector<Kept> now = std::move(kept_);
  kept_.clear();
  int64_t dropped = 0;
  for (size_t i = 0; i < now.size(); ++i) {
    if (runs[i]) {
      run(now[i]);
    } else {
      ++dropped;
    }
  }
  return dropped;
}

}  // namespace trireme::kernels
