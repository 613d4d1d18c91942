// The backend-independent part of ProcessGroup: rank bookkeeping and "does not support" errors.
#include "trireme/dist/process_group.h"

#include "trireme/dist/staged_at_once.h"

namespace trireme::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int size, std::vector<int> global_ranks)
    : rank_(rank), size_(size), global_ranks_(std::move(global_ranks)) {
  TRIREME_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: rank ", rank, " is outside a group of ", size);
  if (global_ranks_.empty()) {
    for (int r = 0; r < size; ++r) global_ranks_.push_back(r);
  }
  TRIREME_CHECK(static_cast<int>(global_ranks_.size()) == size, "ProcessGroup: ", global_ranks_.size(),
                " global ranks for a group of ", size);
}

std::string ProcessGroup::describe_rank(int group_rank) const {
  int global = global_rank(group_rank);
  if (global == group_rank) return str_cat("rank ", group_rank);
  return str_cat("rank ", global, " (rank ", group_rank, " of this ", size_, "-rank group)");
}

void ProcessGroup::unsupported(const std::string& what) const {
  TRIREME_FAIL("backend ", backend_name(), " does not support ", what);
}

namespace {

void check_same_dtype(const std::string& backend, const char* op, const Tensor& output, const Tensor& input) {
  TRIREME_CHECK(output.dtype() == input.dtype(), backend, " ", op, ": output is ", output.dtype(), " but input is ",
                input.dtype());
}

// `whole` (named whole_name) must hold `ranks` times the elements of `part`.
void check_whole_of_parts(const std::string& backend, const char* op, int ranks, const Tensor& whole,
                          const char* whole_name, const Tensor& part, const char* part_name) {
  TRIREME_CHECK(whole.numel() == part.numel() * ranks, backend, " ", op, ": ", whole_name, " ", whole.sizes(),
                " must hold ", ranks, " x ", part_name, " ", part.sizes(), " = ", part.numel() * ranks, " elements");
}

}  // namespace

void ProcessGroup::check_all_gather_operands(const Tensor& output, const Tensor& input) const {
  check_same_dtype(backend_name(), "all_gather", output, input);
  check_whole_of_parts(backend_name(), "all_gather", size_, output, "output", input, "input");
}

void ProcessGroup::check_reduce_scatter_operands(const Tensor& output, const Tensor& input) const {
  check_same_dtype(backend_name(), "reduce_scatter", output, input);
  check_whole_of_parts(backend_name(), "reduce_scatter", size_, input, "input", output, "output");
}

void ProcessGroup::check_all_to_all_operands(const Tensor& output, const Tensor& input) const {
  const std::string backend = backend_name();
  check_same_dtype(backend, "all_to_all", output, input);
  TRIREME_CHECK(input.numel() % size_ == 0 && output.numel() == input.numel(), backend, " all_to_all: input ",
                input.sizes(), " and output ", output.sizes(), " must hold the same number of elements, a multiple of ",
                "the group's ", size_, " ranks");
  TRIREME_CHECK(input.numel() == 0 || input.data_ptr() != output.data_ptr(), backend,
                " all_to_all: output and input must not be the same memory");
}

WorkPtr ProcessGroup::all_reduce(const Tensor&, const AllReduceOptions&) { unsupported("all_reduce"); }
WorkPtr ProcessGroup::broadcast(const Tensor&, const BroadcastOptions&) { unsupported("broadcast"); }
WorkPtr ProcessGroup::all_gather(const Tensor&, const Tensor&, const AllGatherOptions&) { unsupported("all_gather"); }
WorkPtr ProcessGroup::reduce_scatter(const Tensor&, const Tensor&, const ReduceScatterOptions&) {
  unsupported("reduce_scatter");
}

std::unique_ptr<StagedAllGather> ProcessGroup::all_gather_staged(const Tensor& output, const Tensor& input,
                                                                 const AllGatherOptions& options) {
  return all_gather_at_once(*this, output, input, [this, options](const Tensor& out, const Tensor& in) {
    return all_gather(out, in, options);
  });
}

std::unique_ptr<StagedReduceScatter> ProcessGroup::reduce_scatter_staged(const Tensor& output, const Tensor& input,
                                                                         const ReduceScatterOptions& options) {
  return reduce_scatter_at_finish(*this, output, input, options.op,
                                  [this, options](const Tensor& out, const Tensor& in) {
                                    return reduce_scatter(out, in, options);
                                  });
}

WorkPtr ProcessGroup::all_to_all(const Tensor&, const Tensor&, const AllToAllOptions&) { unsupported("all_to_all"); }
WorkPtr ProcessGroup::send(const Tensor&, int, const SendRecvOptions&) { unsupported("send"); }
WorkPtr ProcessGroup::recv(const Tensor&, int, const SendRecvOptions&) { unsupported("recv"); }
WorkPtr ProcessGroup::barrier(const BarrierOptions&) { unsupported("barrier"); }
std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>&, const std::string&) {
  unsupported("new_group");
}

}  // namespace trireme::dist
