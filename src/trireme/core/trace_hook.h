// The hooks a tracer (graph/trace.h) installs on its thread while it records a step: which
// storages are allocated and freed, and which host code touches tensor memory outside a kernel.
// Core calls them and knows nothing of graphs; without a tracer each hook is one thread-local
// pointer test.
#pragma once

namespace trireme {

class Storage;

class StorageObserver {
 public:
  virtual ~StorageObserver() = default;
  virtual void on_alloc(const Storage& s) = 0;
  virtual void on_free(const Storage& s) = 0;
  // Host code (not a kernel) is about to touch the memory of `s`; `what` names the access
  // (e.g. "Tensor::item()"). A tracer throws if the value was computed inside the trace.
  virtual void on_host_access(const Storage& s, const char* what) = 0;
};

// This thread's observer (null when nothing is traced).
StorageObserver*& storage_observer();

}  // namespace trireme
