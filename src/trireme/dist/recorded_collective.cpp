// Collectives on a kernel tape.
#include "trireme/dist/recorded_collective.h"

#include <memory>

#include "trireme/core/error.h"
#include "trireme/core/storage.h"
#include "trireme/dist/staged_at_once.h"
#include "trireme/kernels/kernel_tape.h"

namespace trireme::dist {

namespace {

struct CollectiveTag {};  // the node's kernel type: no kernel signature, never merged

// A collective's or transfer's node: its tensors (`writes`: as outputs), never merged by CSE.
KernelCallRecord collective_record(const char* op, const std::vector<Tensor>& tensors, bool writes) {
  KernelCallRecord r;
  r.op = op;
  r.device = tensors.empty() ? Device::cpu() : tensors.front().device();
  r.dtype = tensors.empty() ? DType::f32 : tensors.front().dtype();
  r.kernel_type = std::type_index(typeid(CollectiveTag));
  for (const Tensor& t : tensors) {
    r.tensors.push_back(&t);
    r.written.push_back(writes);
  }
  r.attrs_comparable = false;
  return r;
}

// While alive, what runs is inside the node just recorded (its staging copies, its arithmetic)
// and is not recorded itself.
class InsideNode {
 public:
  explicit InsideNode(KernelTape* tape) : tape_(tape) { tape_->begin_kernel(); }
  ~InsideNode() { tape_->end_kernel(); }
  InsideNode(const InsideNode&) = delete;
  InsideNode& operator=(const InsideNode&) = delete;

 private:
  KernelTape* tape_;
};

}  // namespace

WorkPtr record_collective(const char* op, const std::vector<Tensor>& tensors,
                          std::function<WorkPtr(Tensor* const* tensors)> issue) {
  std::vector<Tensor> own = tensors;
  std::vector<Tensor*> ptrs;
  for (Tensor& t : own) ptrs.push_back(&t);
  KernelTape* tape = active_kernel_tape();
  if (tape == nullptr || tape->in_kernel()) return issue(ptrs.data());
  KernelCallRecord r = collective_record(op, own, /*writes=*/true);
  r.invoke = [issue](void*, Tensor* const* t) { issue(t)->wait(); };
  tape->record(std::move(r));
  InsideNode inside(tape);
  return issue(ptrs.data());
}

namespace {

// The transfer a replay issued, for the wait node that follows its issue node.
using PendingWork = std::shared_ptr<WorkPtr>;

KernelCallRecord transfer_record(const char* op, const std::vector<Tensor>& tensors, bool writes) {
  KernelCallRecord r = collective_record(op, tensors, writes);
  r.pinned = true;  // the peers post and wait in the traced order
  return r;
}

// The work a traced transfer returns: waiting for it records the wait node (reading the
// transfer's tensors, so that the graph keeps it and plans their memory alive until it), then
// waits.
class RecordedTransferWork : public Work {
 public:
  RecordedTransferWork(WorkPtr inner, const char* wait_op, std::vector<Tensor> tensors, PendingWork pending)
      : inner_(std::move(inner)), wait_op_(wait_op), tensors_(std::move(tensors)), pending_(std::move(pending)) {}

  bool is_completed() override { return inner_->is_completed(); }

  void wait(milliseconds timeout) override {
    KernelTape* tape = active_kernel_tape();
    if (tape != nullptr && !tape->in_kernel() && !recorded_) {
      recorded_ = true;
      KernelCallRecord r = transfer_record(wait_op_, tensors_, /*writes=*/false);
      r.invoke = [pending = pending_](void*, Tensor* const*) {
        TRIREME_CHECK(*pending != nullptr, "graph: a replay waits for a transfer it did not issue");
        WorkPtr w = std::move(*pending);
        w->wait();
      };
      tape->record(std::move(r));
      InsideNode inside(tape);
      inner_->wait(timeout);
      return;
    }
    inner_->wait(timeout);
  }

 private:
  WorkPtr inner_;
  const char* wait_op_;  // a literal: the tape keeps the name
  std::vector<Tensor> tensors_;
  PendingWork pending_;
  bool recorded_ = false;
};

}  // namespace

WorkPtr record_transfer(const char* op, const std::vector<Tensor>& tensors, bool writes,
                        std::function<WorkPtr(Tensor* const* tensors)> issue) {
  std::vector<Tensor> own = tensors;
  std::vector<Tensor*> ptrs;
  for (Tensor& t : own) ptrs.push_back(&t);
  KernelTape* tape = active_kernel_tape();
  if (tape == nullptr || tape->in_kernel()) return issue(ptrs.data());
  auto pending = std::make_shared<WorkPtr>();
  KernelCallRecord r = transfer_record(op, own, writes);
  r.invoke = [issue, pending](void*, Tensor* const* t) { *pending = issue(t); };
  tape->record(std::move(r));
  WorkPtr inner;
  {
    InsideNode inside(tape);
    inner = issue(ptrs.data());
  }
  return std::make_shared<RecordedTransferWork>(std::move(inner), writes ? "wait_recv" : "wait_send", std::move(own),
                                                std::move(pending));
}

namespace {
bool recording() {
  KernelTape* tape = active_kernel_tape();
  return tape != nullptr && !tape->in_kernel();
}
}  // namespace

std::unique_ptr<StagedAllGather> record_all_gather_staged(ProcessGroup& group, const Tensor& output,
                                                          const Tensor& input) {
  if (!recording()) return group.all_gather_staged(output, input);
  return all_gather_at_once(group, output, input, [g = &group](const Tensor& out, const Tensor& in) {
    return record_collective("all_gather", {out, in}, [g](Tensor* const* t) { return g->all_gather(*t[0], *t[1]); });
  });
}

std::unique_ptr<StagedReduceScatter> record_reduce_scatter_staged(ProcessGroup& group, const Tensor& output,
                                                                  const Tensor& input) {
  if (!recording()) return group.reduce_scatter_staged(output, input);
  return reduce_scatter_at_finish(
      group, output, input, ReduceOp::sum, [g = &group](const Tensor& out, const Tensor& in) {
        return record_collective("reduce_scatter", {out, in},
                                 [g](Tensor* const* t) { return g->reduce_scatter(*t[0], *t[1]); });
      });
}

void record_release(const Tensor& t) {
  if (recording()) {
    const std::vector<Tensor> tensors = {t};  // the record points at them until the tape has it
    KernelCallRecord r = collective_record("release", tensors, /*writes=*/true);
    r.pinned = true;  // a call moved across it would find the memory gone, or not yet gathered
    r.invoke = [](void*, Tensor* const* x) { x[0]->storage()->release(); };
    active_kernel_tape()->record(std::move(r));
  }
  t.storage()->release();
}

}  // namespace trireme::dist
