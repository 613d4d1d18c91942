// The trainer's parallel runs: connecting to the job (store, Gloo world, ParallelContext) and
// one StepRunner for every layout (docs/PARALLELISM.md): models::GPT holding this rank's part
// of the model (its tp slice of its pipeline stage), a step's forwards and backwards (gradient
// accumulation over micro-batches with one stage, the PipelineExecutor's schedule with several),
// the gradients averaged over dp by a Reducer (overlapped with the last backward with one stage,
// after the step with several) and summed over tp, one global norm, and the optimizer: AdamW,
// SGD or ZeRO-1's ZeroOptimizer, all driven as an optim::Optimizer; on the CPU (Gloo) or GPUs
// (NCCL).
//
// Note [ZeRO inside a pipeline]
// The micro-batch backwards of a pipeline step are interleaved with sends and receives, and
// the tied embedding's gradient is only complete after the step's end-of-pipeline sum, so the
// Reducer cannot reduce during a backward as it does with pp = 1. Instead every stage builds its
// Reducer over its own dp group (the replicas of that stage), lets the pipeline step accumulate
// into the parameters' gradients, and then reduces them as they are (Reducer::reduce_accumulated):
// averaged, or with ZeRO-1 reduce-scattered, dp rank k of the stage keeping AdamW state for chunk
// k of each of the stage's buckets. The global norm sums the shard pieces over dp, tp and pp, with the last
// stage leaving out its copy of the tied weight (stage 0 counts it); both copies get the same
// summed gradient, clipping and update, so they stay equal.
//
//   auto job = ParallelJob::connect(cfg.parallel, dist::dist_env_from_environment());
//   auto runner = make_step_runner(cfg, vocab_size, job);   // every rank, together
#pragma once

#include <memory>

#include "trireme/dist/env.h"
#include "trireme/dist/process_group.h"
#include "trireme/dist/store.h"
#include "trireme/parallel/context.h"
#include "trireme/train/step_runner.h"

namespace trireme::train {

struct ParallelJob {
  dist::DistEnv env;
  std::unique_ptr<dist::StoreServer> store_server;  // rank 0's when no launcher hosts the store (srun)
  std::shared_ptr<dist::StoreClient> store;
  std::shared_ptr<dist::ProcessGroup> world;
  std::unique_ptr<parallel::ParallelContext> ctx;
  Device device;  // this rank's: the CPU, or cuda:LOCAL_RANK

  // Checks that the job's WORLD_SIZE is dp x tp x pp (io::ConfigError naming both and what to
  // set otherwise), then connects every rank. Collective. On CUDA each rank takes the GPU
  // cuda:LOCAL_RANK (made current before anything touches a GPU) and the world is NCCL, on the
  // CPU Gloo (dist::make_process_group).
  static std::shared_ptr<ParallelJob> connect(const io::ParallelConfig& config, const dist::DistEnv& env,
                                              DeviceType device = DeviceType::cpu);
  // One process on `device`: no store, no world, every group null (the layout's sizes are all 1).
  static std::shared_ptr<ParallelJob> single(const io::ParallelConfig& config, Device device);
};

// The ParallelLayout that a [parallel] section describes.
parallel::ParallelLayout parallel_layout(const io::ParallelConfig& config);

// The runner for cfg.parallel's layout on this rank (one process: ParallelJob::single).
// Collective (all ranks call it together). num_classes > 0: the model is a sequence classifier
// over that many classes (Note [classifier head], models/gpt.h), its batches' targets class
// indices at the classified positions and -100 elsewhere.
std::unique_ptr<StepRunner> make_step_runner(const io::TrainConfig& cfg, int64_t vocab, std::shared_ptr<ParallelJob> job,
                                             int64_t num_classes = 0);

}  // namespace trireme::train
