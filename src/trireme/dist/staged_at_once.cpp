// The staged collectives of a backend without staging (see staged_at_once.h).
#include "trireme/dist/staged_at_once.h"

#include <algorithm>

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::dist {

namespace {
// The staged reduce-scatter of a backend that cannot start early: the whole op at the end.
class ReduceScatterAtFinish : public StagedReduceScatter {
 public:
  ReduceScatterAtFinish(const ProcessGroup& group, Tensor output, Tensor input, ReduceOp op, IssueCollective issue)
      : group_(group), output_(std::move(output)), input_(std::move(input)), op_(op), issue_(std::move(issue)) {}
  bool sends_early() const override { return false; }
  void chunk_written(int) override {}
  Tensor others_sum() override {
    TRIREME_CHECK(!summed_, group_.backend_name(), " reduce_scatter_staged: others_sum() asked twice");
    TRIREME_CHECK(op_ == ReduceOp::sum, group_.backend_name(), " reduce_scatter_staged: others_sum() is for sums only");
    summed_ = true;
    // This rank's chunk, which the caller does not write, counts as zero: x + 0 is x exactly.
    const int64_t n = output_.numel();
    Tensor own = input_.alias({n}, {1}, input_.offset() + int64_t(group_.rank()) * n);
    find_kernel<FillKernel>("fill", own.device(), own.dtype())(own, 0.0);
    summed_work_ = issue_(output_, input_);
    summed_work_->wait();
    return output_;
  }
  WorkPtr finish(const Tensor& bias, const Tensor& residual) override {
    TRIREME_CHECK(!bias.defined() && !residual.defined(), group_.backend_name(),
                  " reduce_scatter_staged: this backend does not add a bias or a residual");
    if (summed_) return summed_work_;
    return issue_(output_, input_);
  }

 private:
  const ProcessGroup& group_;
  Tensor output_, input_;
  ReduceOp op_;
  IssueCollective issue_;
  bool summed_ = false;
  WorkPtr summed_work_;  // others_sum()'s reduce-scatter, already waited for
};

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

std::unique_ptr<StagedAllGather> all_gather_at_once(const ProcessGroup& group, const Tensor& output,
                                                    const Tensor& input, const IssueCollective& all_gather) {
  TRIREME_CHECK(input.is_contiguous() && (!output.defined() || output.is_contiguous()), group.backend_name(),
                " all_gather_staged: input and output must be contiguous");
  const Tensor out =
      output.defined() ? output : Tensor::empty({group.size() * input.numel()}, input.dtype(), input.device());
  return std::make_unique<AllGatherAtOnce>(all_gather(out, input), out, input, group.rank());
}

std::unique_ptr<StagedReduceScatter> reduce_scatter_at_finish(const ProcessGroup& group, const Tensor& output,
                                                              const Tensor& input, ReduceOp op,
                                                              IssueCollective reduce_scatter) {
  return std::make_unique<ReduceScatterAtFinish>(group, output, input, op, std::move(reduce_scatter));
}

}  // namespace trireme::dist
