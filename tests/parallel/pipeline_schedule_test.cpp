// Pipeline schedule tables, checked without processes: every generated table passes the checker
// under both communication semantics, broken tables are caught with the rank and action named,
// and warm-up counts, peak activations and simulated bubbles follow their formulas.
#include <gtest/gtest.h>

#include <algorithm>

#include "trireme/core/error.h"
#include "trireme/parallel/pipeline_schedule.h"

using namespace trireme;
using namespace trireme::parallel;

namespace {

int count_kind(const std::vector<Action>& actions, ActionKind kind) {
  return int(std::count_if(actions.begin(), actions.end(), [&](const Action& a) { return a.kind == kind; }));
}

size_t index_of(const std::vector<Action>& actions, const Action& want) {
  auto it = std::find(actions.begin(), actions.end(), want);
  EXPECT_NE(it, actions.end()) << action_describe(want);
  return size_t(it - actions.begin());
}

}  // namespace

TEST(PipelineSchedule, EveryGeneratedTablePassesTheChecker) {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    for (int p = 1; p <= 5; ++p) {
      for (int m = 1; m <= 16; ++m) {
        ScheduleTable t = pipeline_schedule(p, m, kind);
        ASSERT_EQ(t.size(), size_t(p));
        EXPECT_EQ(pipeline_schedule_check(t, m, 1, CommSemantics::rendezvous), "")
            << schedule_kind_name(kind) << " p=" << p << " m=" << m;
        EXPECT_EQ(pipeline_schedule_check(t, m, 1, CommSemantics::eager), "")
            << schedule_kind_name(kind) << " p=" << p << " m=" << m;
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(count_kind(t[size_t(r)], ActionKind::forward), m);
          EXPECT_EQ(count_kind(t[size_t(r)], ActionKind::send_activation), r < p - 1 ? m : 0);
          EXPECT_EQ(count_kind(t[size_t(r)], ActionKind::recv_grad), r < p - 1 ? m : 0);
          EXPECT_EQ(count_kind(t[size_t(r)], ActionKind::recv_activation), r > 0 ? m : 0);
        }
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedTablesPassTheChecker) {
  for (int p = 2; p <= 5; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int m = p; m <= 16; m += p) {
        ScheduleTable t = pipeline_schedule(p, m, ScheduleKind::interleaved, v);
        EXPECT_EQ(pipeline_schedule_check(t, m, v, CommSemantics::rendezvous), "") << "p=" << p << " v=" << v << " m=" << m;
        EXPECT_EQ(pipeline_schedule_check(t, m, v, CommSemantics::eager), "") << "p=" << p << " v=" << v << " m=" << m;
        for (int r = 0; r < p; ++r) EXPECT_EQ(count_kind(t[size_t(r)], ActionKind::backward), m * v);
      }
  EXPECT_THROW(pipeline_schedule(3, 4, ScheduleKind::interleaved, 2), Error);  // 4 % 3 != 0
  EXPECT_THROW(pipeline_schedule(1, 4, ScheduleKind::interleaved, 2), Error);
  EXPECT_THROW(pipeline_schedule(2, 4, ScheduleKind::one_f_one_b, 2), Error);
}

TEST(PipelineSchedule, OneFOneBWarmupFollowsMegatron) {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 16; ++m)
      for (int r = 0; r < p; ++r) {
        const int warmup = std::min(p - r - 1, m);
        EXPECT_EQ(pipeline_warmup_count(p, r, m, ScheduleKind::one_f_one_b), warmup);
        auto order = pipeline_compute_order(p, r, m, ScheduleKind::one_f_one_b);
        // `warmup` forwards, then alternating F/B while forwards remain, then the backwards.
        for (int i = 0; i < warmup; ++i) EXPECT_EQ(order[size_t(i)].kind, ActionKind::forward);
        if (warmup < m) {
          EXPECT_EQ(order[size_t(warmup)].kind, ActionKind::forward);
          EXPECT_EQ(order[size_t(warmup) + 1].kind, ActionKind::backward);
          EXPECT_EQ(order[size_t(warmup) + 1].micro_batch, 0);
        }
        EXPECT_EQ(order.back().kind, ActionKind::backward);
        EXPECT_EQ(order.back().micro_batch, m - 1);
      }
  // GPipe: every forward first.
  auto g = pipeline_compute_order(3, 1, 4, ScheduleKind::gpipe);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g[size_t(i)].kind, ActionKind::forward);
  EXPECT_EQ(pipeline_warmup_count(4, 0, 8, ScheduleKind::interleaved, 2), 3 * 2 + 1 * 4);
  EXPECT_EQ(pipeline_warmup_count(4, 3, 4, ScheduleKind::interleaved, 2), 8);  // m == p: all warm-up
}

TEST(PipelineSchedule, ATwoStageOneFOneBTableReadsAsExpected) {
  // Rank 1 posts the receive of activation 1 as soon as rank 0 has produced it (before its own
  // backward of micro-batch 0), so every transfer sits in one global order.
  ScheduleTable t = pipeline_schedule(2, 3, ScheduleKind::one_f_one_b);
  using K = ActionKind;
  std::vector<Action> rank0 = {{K::forward, 0, 0, -1},        {K::send_activation, 0, 0, 1}, {K::forward, 1, 0, -1},
                               {K::send_activation, 1, 0, 1}, {K::recv_grad, 0, 0, 1},       {K::backward, 0, 0, -1},
                               {K::forward, 2, 0, -1},        {K::send_activation, 2, 0, 1}, {K::recv_grad, 1, 0, 1},
                               {K::backward, 1, 0, -1},       {K::recv_grad, 2, 0, 1},       {K::backward, 2, 0, -1}};
  std::vector<Action> rank1 = {{K::recv_activation, 0, 0, 0}, {K::forward, 0, 0, -1},  {K::recv_activation, 1, 0, 0},
                               {K::backward, 0, 0, -1},       {K::send_grad, 0, 0, 0}, {K::forward, 1, 0, -1},
                               {K::backward, 1, 0, -1},       {K::recv_activation, 2, 0, 0}, {K::send_grad, 1, 0, 0},
                               {K::forward, 2, 0, -1},        {K::backward, 2, 0, -1}, {K::send_grad, 2, 0, 0}};
  EXPECT_EQ(t[0], rank0);
  EXPECT_EQ(t[1], rank1);
}

TEST(PipelineSchedule, AMissingReceiveIsNamed) {
  ScheduleTable t = pipeline_schedule(3, 4, ScheduleKind::one_f_one_b);
  auto& r2 = t[2];
  r2.erase(r2.begin() + long(index_of(r2, {ActionKind::recv_activation, 2, 0, 1})));
  std::string err = pipeline_schedule_check(t, 4);
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("send_activation(mb 2, chunk 0) to rank 2 has no matching recv_activation(mb 2) on rank 2"),
            std::string::npos)
      << err;
  EXPECT_THROW(pipeline_schedule_require(t, 4), Error);
}

TEST(PipelineSchedule, SwappedOrderIsADeadlockNamingBothRanks) {
  ScheduleTable t = pipeline_schedule(2, 3, ScheduleKind::one_f_one_b);
  // Rank 0 waits for gradient 0 before sending activation 1, which rank 1 waits for before it
  // can run backward 0: each waits in a receive for the other.
  auto& r0 = t[0];
  size_t send1 = index_of(r0, {ActionKind::send_activation, 1, 0, 1});
  size_t recv0 = index_of(r0, {ActionKind::recv_grad, 0, 0, 1});
  std::swap(r0[send1], r0[recv0]);
  for (auto semantics : {CommSemantics::rendezvous, CommSemantics::eager}) {
    std::string err = pipeline_schedule_check(t, 3, 1, semantics);
    EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
    EXPECT_NE(err.find("rank 0, action 3 recv_grad(mb 0, chunk 0) from rank 1"), std::string::npos) << err;
    EXPECT_NE(err.find("rank 1, action 2 recv_activation(mb 1, chunk 0) from rank 0"), std::string::npos) << err;
  }
}

TEST(PipelineSchedule, ALateReceiveDeadlocksOnlyWhenSendsBlock) {
  // Rank 1 takes activation 1 only after sending gradient 0, while rank 0 sends activation 1
  // before taking gradient 0: fine when sends are posted (Gloo), a deadlock when a send waits
  // for its receive (NCCL-like).
  ScheduleTable t = pipeline_schedule(2, 3, ScheduleKind::one_f_one_b);
  auto& r1 = t[1];
  Action late = r1[2];
  ASSERT_EQ(late, (Action{ActionKind::recv_activation, 1, 0, 0}));
  r1.erase(r1.begin() + 2);
  r1.insert(r1.begin() + long(index_of(r1, {ActionKind::send_grad, 0, 0, 0})) + 1, late);
  EXPECT_EQ(pipeline_schedule_check(t, 3, 1, CommSemantics::eager), "");
  std::string err = pipeline_schedule_check(t, 3, 1, CommSemantics::rendezvous);
  EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0, action 3 send_activation(mb 1, chunk 0) to rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1, action 3 send_grad(mb 0, chunk 0) to rank 0"), std::string::npos) << err;
}

TEST(PipelineSchedule, OrderingMistakesAreNamed) {
  using K = ActionKind;
  // Backward before forward on one rank.
  ScheduleTable t = pipeline_schedule(1, 2, ScheduleKind::gpipe);
  std::swap(t[0][0], t[0][2]);  // F0 F1 B0 B1 -> B0 F1 F0 B1
  EXPECT_NE(pipeline_schedule_check(t, 2).find("rank 0, action 0 backward(mb 0, chunk 0): runs before the forward"),
            std::string::npos)
      << pipeline_schedule_check(t, 2);
  // A forward that never runs.
  t = pipeline_schedule(1, 2, ScheduleKind::gpipe);
  t[0].erase(t[0].begin() + 1);
  t[0].erase(t[0].begin() + 2);
  EXPECT_EQ(pipeline_schedule_check(t, 2), "rank 0 never runs forward(mb 1, chunk 0)");
  // A receive from the wrong rank.
  t = pipeline_schedule(3, 2, ScheduleKind::one_f_one_b);
  size_t i = index_of(t[2], {K::recv_activation, 0, 0, 1});
  t[2][i].peer = 0;
  EXPECT_NE(pipeline_schedule_check(t, 2).find("rank 2, action 0 recv_activation(mb 0, chunk 0) from rank 0: the peer"),
            std::string::npos)
      << pipeline_schedule_check(t, 2);
  // A forward before its activation arrives.
  t = pipeline_schedule(2, 2, ScheduleKind::gpipe);
  std::swap(t[1][0], t[1][1]);
  EXPECT_NE(pipeline_schedule_check(t, 2, 1, CommSemantics::eager).find("runs before its recv_activation"),
            std::string::npos);
  // A micro-batch out of range.
  t = pipeline_schedule(2, 2, ScheduleKind::gpipe);
  t[0][0].micro_batch = 5;
  EXPECT_NE(pipeline_schedule_check(t, 2).find("micro-batch outside [0, 2)"), std::string::npos);
}

TEST(PipelineSchedule, PeakActivations) {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 16; ++m) {
      auto one = pipeline_peak_activations(pipeline_schedule(p, m, ScheduleKind::one_f_one_b));
      auto gpipe = pipeline_peak_activations(pipeline_schedule(p, m, ScheduleKind::gpipe));
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(one[size_t(r)], std::min(p - r, m));
        EXPECT_LE(one[size_t(r)], p);
        EXPECT_EQ(gpipe[size_t(r)], m);
      }
    }
}

TEST(PipelineSchedule, SimulatedIdleFractionIsTheBubble) {
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(pipeline_bubble_fraction(4, 8, 2), 3.0 / 19.0);
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int p = 1; p <= 5; ++p)
      for (int m = 1; m <= 16; ++m) {
        ScheduleTiming t = pipeline_schedule_timing(pipeline_schedule(p, m, kind), 1.0, 2.0);
        EXPECT_DOUBLE_EQ(t.makespan, 3.0 * (m + p - 1)) << schedule_kind_name(kind) << " p=" << p << " m=" << m;
        for (double idle : t.idle_fraction) EXPECT_NEAR(idle, pipeline_bubble_fraction(p, m), 1e-12);
      }
  // Interleaving shrinks the bubble (each chunk is 1/v of a stage's work).
  for (int p : {2, 4}) {
    const int m = 2 * p;
    ScheduleTiming plain = pipeline_schedule_timing(pipeline_schedule(p, m, ScheduleKind::one_f_one_b), 1.0, 2.0);
    ScheduleTiming inter = pipeline_schedule_timing(pipeline_schedule(p, m, ScheduleKind::interleaved, 2), 0.5, 1.0);
    EXPECT_LT(inter.makespan, plain.makespan) << p;
    EXPECT_LT(inter.idle_fraction[0], plain.idle_fraction[0]) << p;
  }
}

TEST(PipelineSchedule, KindNames) {
  EXPECT_EQ(schedule_kind_from_name("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(schedule_kind_from_name("gpipe"), ScheduleKind::gpipe);
  EXPECT_EQ(schedule_kind_from_name("interleaved"), ScheduleKind::interleaved);
  try {
    schedule_kind_from_name("zigzag");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zigzag' is not one of gpipe, 1f1b, interleaved"), std::string::npos);
  }
}
