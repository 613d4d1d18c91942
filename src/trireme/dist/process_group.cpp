// The backend-independent part of ProcessGroup: rank bookkeeping and "does not support" errors.
#include "trireme/dist/process_group.h"

#include <algorithm>

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

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

namespace {
// The staged reduce-scatter of a backend that cannot start early: the whole op at the end.
class ReduceScatterAtFinish : public StagedReduceScatter {
 public:
  ReduceScatterAtFinish(ProcessGroup& group, Tensor output, Tensor input, ReduceScatterOptions options)
      : group_(group), output_(std::move(output)), input_(std::move(input)), options_(options) {}
  bool sends_early() const override { return false; }
  void chunk_written(int) override {}
  Tensor others_sum() override {
    TRIREME_CHECK(!summed_, group_.backend_name(), " reduce_scatter_staged: others_sum() asked twice");
    TRIREME_CHECK(options_.op == ReduceOp::sum, group_.backend_name(),
                  " reduce_scatter_staged: others_sum() is for sums only");
    summed_ = true;
    // This rank's chunk, which the caller does not write, counts as zero: x + 0 is x exactly.
    const int64_t n = output_.numel();
    Tensor own = input_.alias({n}, {1}, input_.offset() + int64_t(group_.rank()) * n);
    find_kernel<FillKernel>("fill", own.device(), own.dtype())(own, 0.0);
    summed_work_ = group_.reduce_scatter(output_, input_, options_);
    summed_work_->wait();
    return output_;
  }
  WorkPtr finish(const Tensor& bias, const Tensor& residual) override {
    TRIREME_CHECK(!bias.defined() && !residual.defined(), group_.backend_name(),
                  " reduce_scatter_staged: this backend does not add a bias or a residual");
    if (summed_) return summed_work_;
    return group_.reduce_scatter(output_, input_, options_);
  }

 private:
  ProcessGroup& group_;
  Tensor output_, input_;
  ReduceScatterOptions options_;
  bool summed_ = false;
  WorkPtr summed_work_;  // others_sum()'s reduce-scatter, already waited for
};
}  // namespace

namespace {
// The staged all-gather of a backend without staging: the whole op at once, read from output.
class AllGatherAtOnce : public StagedAllGather {
 public:
  AllGatherAtOnce(WorkPtr work, Tensor output, Tensor input, int me)
      : work_(std::move(work)), output_(std::move(output)), input_(std::move(input)), me_(me) {}
  Tensor arrived(int rank) override {
    if (rank == me_) return input_;
    work_->wait();
    const int64_t n = input_.numel();
    return output_.alias(input_.sizes(), input_.strides(), output_.offset() + int64_t(rank) * n);
  }
  void keep_others(const Tensor& others) override {
    const int64_t n = input_.numel(), size = output_.numel() / std::max<int64_t>(n, 1);
    TRIREME_CHECK(others.is_contiguous() && others.numel() == (size - 1) * n && others.dtype() == input_.dtype(),
                  "all_gather_staged: keep_others needs a contiguous ", input_.dtype(), " tensor of ", (size - 1) * n,
                  " elements, got ", others.sizes(), " ", others.dtype());
    for (int q = 0, slot = 0; q < size; ++q) {
      if (q == me_) continue;
      Tensor to = others.alias(input_.sizes(), input_.strides(), others.offset() + int64_t(slot++) * n);
      find_kernel<CopyKernel>("copy", to.device(), to.dtype())(arrived(q), to);
    }
  }
  WorkPtr finish() override { return work_; }

 private:
  WorkPtr work_;
  Tensor output_, input_;
  int me_;
};
}  // namespace

std::unique_ptr<StagedAllGather> ProcessGroup::all_gather_staged(const Tensor& output, const Tensor& input,
                                                                 const AllGatherOptions& options) {
  TRIREME_CHECK(input.is_contiguous() && (!output.defined() || output.is_contiguous()), backend_name(),
                " all_gather_staged: input and output must be contiguous");
  const Tensor out = output.defined() ? output : Tensor::empty({size_ * input.numel()}, input.dtype(), input.device());
  return std::make_unique<AllGatherAtOnce>(all_gather(out, input, options), out, input, rank_);
}

std::unique_ptr<StagedReduceScatter> ProcessGroup::reduce_scatter_staged(const Tensor& output, const Tensor& input,
                                                                         const ReduceScatterOptions& options) {
  return std::make_unique<ReduceScatterAtFinish>(*this, output, input, options);
}
WorkPtr ProcessGroup::all_to_all(const Tensor&, const Tensor&, const AllToAllOptions&) { unsupported("all_to_all"); }
WorkPtr ProcessGroup::send(const Tensor&, int, const SendRecvOptions&) { unsupported("send"); }
WorkPtr ProcessGroup::recv(const Tensor&, int, const SendRecvOptions&) { unsupported("recv"); }
WorkPtr ProcessGroup::barrier(const BarrierOptions&) { unsupported("barrier"); }
std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>&, const std::string&) {
  unsupported("new_group");
}

}  // namespace trireme::dist
