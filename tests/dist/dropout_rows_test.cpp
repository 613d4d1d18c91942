// Dropout keyed by the global sample (Note [dropout keyed by global sample], nn/dropout.h):
// forwards over slices of a batch inside GlobalRowScopes draw exactly the slices of the
// one-forward mask, micro-batches of a step share the stream, and outside a scope each call is a
// fresh draw. And the pipeline tables that run over NCCL post each rank pair's messages in order
// (Note [pipeline messages in order], parallel/pipeline_executor.h).
#include <gtest/gtest.h>

#include "trireme/core/rng.h"
#include "trireme/nn/dropout.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/pipeline_executor.h"

using namespace trireme;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double d = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

}  // namespace

TEST(DropoutRows, SlicesInScopesDrawTheWholeBatchesMask) {
  Generator gen(3);
  Tensor x = randn({8, 5, 6}, gen);  // (batch, T, d)
  nn::Dropout drop(0.4);
  drop.set_rng(11, 7);
  Tensor whole = drop.forward(x);  // one process: counter 7, offset 0
  // Two dp ranks of 4 rows, each in two micro-batches of 2 rows, every micro-batch in its scope.
  for (int64_t first : {0, 4}) {
    drop.set_rng(11, 7);
    for (int64_t mb = 0; mb < 2; ++mb) {
      nn::GlobalRowScope rows(first + 2 * mb);
      Tensor part = drop.forward(contiguous(narrow(x, 0, first + 2 * mb, 2)));
      EXPECT_EQ(max_abs_diff(part, narrow(whole, 0, first + 2 * mb, 2)), 0.0) << "rows from " << first + 2 * mb;
    }
  }
  // Without the scopes the slices draw from offset 0 with advancing counters: other masks.
  drop.set_rng(11, 7);
  Tensor a = drop.forward(contiguous(narrow(x, 0, 4, 4)));
  EXPECT_GT(max_abs_diff(a, narrow(whole, 0, 4, 4)), 0.1);
  // Outside a scope each call is a fresh draw (the counter advances); a scope does not advance it.
  drop.set_rng(11, 7);
  Tensor first_call = drop.forward(x);
  Tensor second_call = drop.forward(x);
  EXPECT_EQ(max_abs_diff(first_call, whole), 0.0);
  EXPECT_GT(max_abs_diff(second_call, whole), 0.1);
  drop.set_rng(11, 7);
  {
    nn::GlobalRowScope rows(0);
    EXPECT_EQ(max_abs_diff(drop.forward(x), whole), 0.0);
    EXPECT_EQ(max_abs_diff(drop.forward(x), whole), 0.0);  // a recomputation draws the same mask
  }
  EXPECT_EQ(max_abs_diff(drop.forward(x), whole), 0.0);  // the scope left the counter at 7
}

TEST(DropoutRows, ScopesNestAndRestore) {
  EXPECT_FALSE(nn::GlobalRowScope::current().has_value());
  {
    nn::GlobalRowScope outer(4);
    EXPECT_EQ(nn::GlobalRowScope::current(), 4);
    {
      nn::GlobalRowScope inner(6);
      EXPECT_EQ(nn::GlobalRowScope::current(), 6);
    }
    EXPECT_EQ(nn::GlobalRowScope::current(), 4);
  }
  EXPECT_FALSE(nn::GlobalRowScope::current().has_value());
  EXPECT_THROW(nn::GlobalRowScope(-1), Error);
}

TEST(PipelineMessageOrder, ScheduleTablesRunOverNccl) {
  for (auto kind : {parallel::ScheduleKind::gpipe, parallel::ScheduleKind::one_f_one_b})
    for (int p : {2, 3, 4})
      for (int m = 1; m <= 9; ++m)
        EXPECT_EQ(parallel::pipeline_messages_out_of_order(parallel::pipeline_schedule(p, m, kind)), "")
            << parallel::schedule_kind_name(kind) << " p=" << p << " m=" << m;
  // The check can fail: two sends swapped on rank 0 of a 1F1B table.
  auto table = parallel::pipeline_schedule(2, 4, parallel::ScheduleKind::one_f_one_b);
  std::vector<size_t> sends;
  for (size_t i = 0; i < table[0].size(); ++i)
    if (table[0][i].kind == parallel::ActionKind::send_activation) sends.push_back(i);
  ASSERT_GE(sends.size(), 2u);
  std::swap(table[0][sends[0]].micro_batch, table[0][sends[1]].micro_batch);
  EXPECT_NE(parallel::pipeline_messages_out_of_order(table).find("rank 0 sends to rank 1"), std::string::npos);
  for (int p : {2, 3, 4})
    for (int v : {2, 3})
      for (int m = p; m <= 3 * p; m += p)
        EXPECT_EQ(parallel::pipeline_messages_out_of_order(
                      parallel::pipeline_schedule(p, m, parallel::ScheduleKind::interleaved, v)),
                  "")
            << "interleaved p=" << p << " v=" << v << " m=" << m;
}
