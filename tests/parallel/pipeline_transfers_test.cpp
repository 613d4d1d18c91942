// How PipelineExecutor posts its transfers, seen through a process group that records them (no
// peer: receives deliver zeros, sends go nowhere): every send and receive of a step starts alone
// (Note [pipeline transfers start alone]), in the order of the rank's schedule table, for every
// schedule and rank. NCCL hangs when they are left to its queue, which only 2 GPUs show
// (tests/cuda/parallel_trainer_test.cpp, and the worker's p2p scenarios in tests/cuda/worker).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trireme/core/rng.h"
#include "trireme/dist/process_group.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/elementwise.h"
#include "trireme/parallel/pipeline_executor.h"
#include "trireme/models/gpt.h"

using namespace trireme;
using namespace trireme::parallel;

namespace {

class DoneWork : public dist::Work {
 public:
  bool is_completed() override { return true; }
  void wait(dist::milliseconds) override {}
};

// One rank's view of a pipeline group: records each send and recv, fills receives with zeros,
// and leaves reductions as they are.
class RecordingGroup : public dist::ProcessGroup {
 public:
  struct Transfer {
    bool is_send;
    int peer;
    bool alone;
  };

  RecordingGroup(int rank, int size) : ProcessGroup(rank, size) {}
  std::string backend_name() const override { return "recording"; }

  dist::WorkPtr send(const Tensor&, int dst, const dist::SendRecvOptions& o) override {
    transfers.push_back({true, dst, o.alone});
    return std::make_shared<DoneWork>();
  }
  dist::WorkPtr recv(const Tensor& t, int src, const dist::SendRecvOptions& o) override {
    transfers.push_back({false, src, o.alone});
    Tensor out = t;
    fill_(out, 0.0);
    return std::make_shared<DoneWork>();
  }
  dist::WorkPtr all_reduce(const Tensor&, const dist::AllReduceOptions&) override { return std::make_shared<DoneWork>(); }
  dist::WorkPtr broadcast(const Tensor&, const dist::BroadcastOptions&) override { return std::make_shared<DoneWork>(); }
  std::shared_ptr<dist::ProcessGroup> new_group(const std::vector<int>& ranks, const std::string&) override {
    return std::make_shared<RecordingGroup>(0, int(ranks.size()));
  }

  std::vector<Transfer> transfers;
};

models::GPTConfig tiny() { return {.vocab_size = 61, .block_size = 8, .n_layer = 4, .n_head = 4, .d_model = 32}; }

Tensor tokens(int64_t B, int64_t T, uint64_t stream) {
  Tensor t = Tensor::empty({B, T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) t.data<int64_t>()[i] = int64_t(rng_uniform(7, stream, uint64_t(i)) * 61) % 61;
  return t;
}

}  // namespace

TEST(PipelineTransfers, EveryTransferOfAStepStartsAloneInTableOrder) {
  struct Case {
    int p, m, v;
    ScheduleKind kind;
  };
  for (const Case& c : {Case{2, 4, 1, ScheduleKind::gpipe}, Case{2, 4, 1, ScheduleKind::one_f_one_b},
                        Case{3, 4, 1, ScheduleKind::one_f_one_b}, Case{2, 4, 2, ScheduleKind::interleaved}}) {
    for (int r = 0; r < c.p; ++r) {
      const std::string name = str_cat(schedule_kind_name(c.kind), " p=", c.p, " m=", c.m, " v=", c.v, " rank ", r);
      auto stage = std::make_shared<models::GPT>(
          tiny(), models::GPTPlacement{.pipeline = {.stages = c.p, .rank = r, .virtual_stages = c.v}}, 3);
      RecordingGroup group(r, c.p);
      PipelineExecutor pipe(stage, &group, {.micro_batches = c.m, .schedule = c.kind});
      group.transfers.clear();  // the warm-up's exchange (Note [pipeline p2p warm-up]) pairs on purpose
      pipe.step(tokens(8, 8, 1), tokens(8, 8, 2));

      std::vector<Action> expected;
      for (const Action& a : pipe.actions())
        if (a.kind != ActionKind::forward && a.kind != ActionKind::backward) expected.push_back(a);
      ASSERT_EQ(group.transfers.size(), expected.size()) << name;
      for (size_t i = 0; i < expected.size(); ++i) {
        const auto& t = group.transfers[i];
        EXPECT_TRUE(t.alone) << name << ": transfer " << i << " (" << action_describe(expected[i]) << ") is queued";
        EXPECT_EQ(t.peer, expected[i].peer) << name << ": transfer " << i;
        const bool send = expected[i].kind == ActionKind::send_activation || expected[i].kind == ActionKind::send_grad;
        EXPECT_EQ(t.is_send, send) << name << ": transfer " << i;
      }
    }
  }
}
