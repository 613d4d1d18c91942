// train.mode = "static" with data and tensor parallelism and ZeRO-1/2 over Gloo (`trireme train
// --nproc N`): each rank traces its step with its collectives as nodes (the reducer's all-reduces or
// reduce-scatters, the tensor-parallel mappings, ZeRO's all-gathers, the gradient norm's sums) and
// replays it; the run is the eager run of the
// same layout bit for bit (metrics, model and every rank's optimizer file), dropout and clipping on.
#include "static_layout_compare.h"

using trireme::testing::StaticLayout;

class StaticParallel : public ::testing::TestWithParam<StaticLayout> {};

TEST_P(StaticParallel, TwentyStepsEqualEagerBitForBit) { trireme::testing::expect_static_equals_eager(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Layouts, StaticParallel,
                         ::testing::Values(StaticLayout{"dp2", 2, "--set parallel.dp=2"}, StaticLayout{"tp2", 2, "--set parallel.tp=2"},
                                           StaticLayout{"dp2_tp2", 4, "--set parallel.dp=2 --set parallel.tp=2"},
                                           StaticLayout{"dp2_zero1", 2, "--set parallel.dp=2 --set parallel.zero=1"},
                                           // small buckets: several in flight, settled as they finish
                                           StaticLayout{"dp2_zero2", 2, "--set parallel.dp=2 --set parallel.zero=2 --set parallel.bucket_mb=0.05"}),
                         [](const auto& info) { return std::string(info.param.name); });
