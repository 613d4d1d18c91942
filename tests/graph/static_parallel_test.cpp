// train.mode = "static" with data and tensor parallelism, sequence parallelism and ZeRO over Gloo
// (`trireme train --nproc N`): each rank traces its step with its collectives as nodes (the
// reducer's all-reduces or reduce-scatters, the tensor-parallel mappings, sequence parallelism's
// staged all-gathers and reduce-scatters, ZeRO's all-gathers, the gradient norm's sums) and
// replays it; the run is the eager run of the same layout bit for bit (metrics, model and every
// rank's optimizer file), dropout and clipping on.
#include "static_layout_compare.h"

using trireme::testing::StaticLayout;

class StaticParallel : public ::testing::TestWithParam<StaticLayout> {};

TEST_P(StaticParallel, TwentyStepsEqualEagerBitForBit) { trireme::testing::expect_static_equals_eager(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, StaticParallel,
    ::testing::Values(
        StaticLayout{"dp2", 2, "--set parallel.dp=2"}, StaticLayout{"tp2", 2, "--set parallel.tp=2"},
        StaticLayout{"dp2_tp2", 4, "--set parallel.dp=2 --set parallel.tp=2"},
        // sequence parallelism: its staged all-gathers and reduce-scatters as nodes
        StaticLayout{"tp2_sp", 2, "--set parallel.tp=2 --set parallel.sequence_parallel=true"},
        StaticLayout{"dp2_tp2_sp", 4, "--set parallel.dp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true"},
        // f16: the overflow flag all-reduced on the device, the update masked by it
        StaticLayout{"dp2_tp2_f16", 4,
                     "--set parallel.dp=2 --set parallel.tp=2 --set train.precision=f16 "
                     "--set train.loss_scale_interval=2"},
        // ... with ZeRO: the masked update of the shards, then their gathers
        StaticLayout{"dp2_zero2_f16", 2,
                     "--set parallel.dp=2 --set parallel.zero=2 --set train.precision=f16 "
                     "--set train.loss_scale_interval=2"},
        StaticLayout{"dp2_zero3_f16", 2,
                     "--set parallel.dp=2 --set parallel.zero=3 --set train.precision=f16 "
                     "--set train.loss_scale_interval=2"},
        StaticLayout{"dp2_zero1", 2, "--set parallel.dp=2 --set parallel.zero=1"},
        // small buckets: several in flight, settled as they finish
        StaticLayout{"dp2_zero2", 2, "--set parallel.dp=2 --set parallel.zero=2 --set parallel.bucket_mb=0.05"},
        // ZeRO-3: each block's gathers, before its forward and its backward, and its releases as nodes
        StaticLayout{"dp2_zero3", 2, "--set parallel.dp=2 --set parallel.zero=3"},
        StaticLayout{"dp2_tp2_sp_zero3", 4,
                     "--set parallel.dp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true "
                     "--set parallel.zero=3"}),
    [](const auto& info) { return std::string(info.param.name); });

// A ZeRO-3 run switches modes on resume: 10 steps in one mode, resumed in the other, train the
// uninterrupted eager run bit for bit (a constant learning rate after warm-up, so that the first
// half's train.steps does not change it).
TEST(StaticParallel, ZeroThreeResumesAcrossModes) {
  trireme::testing::expect_resume_across_modes_equals_eager(
      StaticLayout{"dp2_zero3_resume", 2, "--set parallel.dp=2 --set parallel.zero=3 --set schedule.kind=constant"});
}

// parallel.auto picks its layout before the run among those static mode runs; the static run of
// that choice is the eager one bit for bit.
TEST(StaticParallel, AutoLayoutEqualsEager) {
  trireme::testing::expect_static_equals_eager(StaticLayout{"auto2", 2, "--set parallel.auto=true"});
}
