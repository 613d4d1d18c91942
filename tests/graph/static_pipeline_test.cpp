// train.mode = "static" with pipeline parallelism over Gloo (`trireme train --nproc N`): each
// stage runs the executor's schedule eagerly (forwards, backwards, sends and receives, dropout
// on) and replays the traced rest of the step (the gradients' dp reduction, the global norm over
// every stage with clipping, AdamW); the run is the eager run of the same layout bit for bit.
#include "static_layout_compare.h"

using trireme::testing::StaticLayout;

class StaticPipeline : public ::testing::TestWithParam<StaticLayout> {};

TEST_P(StaticPipeline, TwentyStepsEqualEagerBitForBit) {
  trireme::testing::expect_static_equals_eager(GetParam(), "mode: static with a pipeline");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, StaticPipeline,
    ::testing::Values(StaticLayout{"pp2_1f1b", 2, "--set parallel.pp=2 --set parallel.micro_batches=4 --set parallel.schedule=1f1b"},
                      StaticLayout{"pp2_gpipe", 2, "--set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.schedule=gpipe"},
                      StaticLayout{"pp2_interleaved", 2,
                                   "--set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.schedule=interleaved "
                                   "--set parallel.virtual_stages=2 --set model.n_layer=4"},
                      StaticLayout{"dp2_pp2_zero1", 4, "--set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.zero=1"}),
    [](const auto& info) { return std::string(info.param.name); });
