// Collectives on a kernel tape.
#include "trireme/dist/recorded_collective.h"

#include "trireme/kernels/kernel_tape.h"

namespace trireme::dist {

namespace {
struct CollectiveTag {};  // the node's kernel type: no kernel signature, never merged
}  // namespace

WorkPtr record_collective(const char* op, const std::vector<Tensor>& tensors,
                          std::function<WorkPtr(Tensor* const* tensors)> issue) {
  std::vector<Tensor> own = tensors;
  std::vector<Tensor*> ptrs;
  for (Tensor& t : own) ptrs.push_back(&t);
  KernelTape* tape = active_kernel_tape();
  if (tape == nullptr || tape->in_kernel()) return issue(ptrs.data());
  KernelCallRecord r;
  r.op = op;
  r.device = own.empty() ? Device::cpu() : own.front().device();
  r.dtype = own.empty() ? DType::f32 : own.front().dtype();
  r.kernel_type = std::type_index(typeid(CollectiveTag));
  for (const Tensor& t : own) {
    r.tensors.push_back(&t);
    r.written.push_back(true);
  }
  r.attrs_comparable = false;
  r.invoke = [issue](void*, Tensor* const* t) { issue(t)->wait(); };
  tape->record(std::move(r));
  // What the collective does inside (its staging copies, its arithmetic) is the node's own.
  tape->begin_kernel();
  struct End {
    KernelTape* t;
    ~End() { t->end_kernel(); }
  } end{tape};
  return issue(ptrs.data());
}

}  // namespace trireme::dist
