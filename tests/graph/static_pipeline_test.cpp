// train.mode = "static" with pipeline parallelism over Gloo (`trireme train --nproc N`): each
// stage traces its part of the schedule (every micro-batch's forward and backward, dropout on,
// its sends and receives as post and wait nodes, the tied embedding's sum) with the gradients'
// reduction, clipping and AdamW, and replays it; the run is the eager run of the same layout bit
// for bit (losses, norms, model and every rank's optimizer file).
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
                      StaticLayout{"dp2_pp2_zero1", 4, "--set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.zero=1"},
                      StaticLayout{"dp2_pp2_zero2", 4, "--set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.zero=2"},
                      // f16: each micro-batch's loss scale refreshed per replay, the update masked by the flag
                      StaticLayout{"pp2_f16", 2,
                                   "--set parallel.pp=2 --set parallel.micro_batches=2 --set train.precision=f16 "
                                   "--set train.loss_scale_interval=2"},
                      // tp's mappings inside each stage's traced schedule, under bf16 autocast
                      StaticLayout{"pp2_tp2_bf16", 4,
                                   "--set parallel.pp=2 --set parallel.tp=2 --set parallel.micro_batches=2 --set train.precision=bf16"}),
    [](const auto& info) { return std::string(info.param.name); });
