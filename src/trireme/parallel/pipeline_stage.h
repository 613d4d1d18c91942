// PipelineStage: the part of a GPT that one pipeline rank holds, under the single-process
// parameter names, so checkpoints, optimizer state and initial values line up with models::GPT.
//
//   // rank 1 of 2, GPT with 4 layers: holds transformer.h.2, transformer.h.3, ln_f and the head
//   auto stage = std::make_shared<PipelineStage>(cfg, PipelineStageSpec{.stages = 2, .rank = 1}, seed);
//   auto stage = PipelineStage::build(cfg, ctx, seed);       // the same, from a ParallelContext
//   Tensor h = stage->forward(0, x);          // chunk 0: (b, T, d) activations in, logits out (last)
//   Tensor loss = stage->loss(h, targets);    // last virtual stage only
//
// What each virtual stage holds (virtual stage s = chunk * stages + rank, pipeline_partition.h):
//   first:  transformer.wte, transformer.wpe, transformer.drop, then its layers
//   middle: transformer.h.<i> for its layers i (the single-process indices)
//   last:   its layers, transformer.ln_f, and lm_head (or, tied, transformer.wte: Note
//           [pipeline tied embeddings])
//
// Note [pipeline tied embeddings]
// GPT ties the head to transformer.wte.weight. When the first and last virtual stages are on
// different ranks, each holds its own copy of that weight under the same name and with the same
// initial value (initialisation is keyed by name, nn/init.h). After backward the two copies'
// gradients are summed between those two ranks (PipelineExecutor does it), which is exactly the
// single process's gradient of the shared weight; the optimizers, fed identical gradients and
// states, then keep the copies identical. A checkpoint takes the weight from rank 0. With tensor
// parallelism each copy is a vocabulary shard, and the sum pairs the shards of the same tp rank
// (the pipeline group of a rank holds the ranks with its dp and tp coordinates).
//
// Note [tensor parallelism inside stages]
// A stage built with a tp group of size > 1 holds the blocks of TensorParallelGPT
// (TensorParallelDecoderLayer: heads and MLP split over tp), a VocabParallelEmbedding as wte on
// the first stage (wpe stays replicated), and on the last stage ln_f and a vocabulary-parallel
// head: forward returns this rank's slice of the logits (b, T, V_p / tp) and loss() is
// vocab_parallel_cross_entropy. What crosses between stages is the replicated (b, T, d)
// activation, sent by each tp rank to the same tp rank of the next stage. Shards are initialised
// as the slices of the single-process parameters (by full name), so the parameters stay equal to
// models::GPT's whatever the layout. With tp size 1 the stage holds the plain nn layers.
//
//   auto stage = PipelineStage::build(cfg, ctx, seed);      // ctx tp=2 pp=2: half the heads of half the layers
//   nn::NamedTensors full = stage->full_state_dict();       // collective over tp: whole tensors
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "trireme/models/gpt.h"
#include "trireme/nn/module.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/pipeline_partition.h"
#include "trireme/parallel/tp_gpt.h"

namespace trireme::parallel {

struct PipelineStageSpec {
  int stages = 1;               // pipeline ranks
  int rank = 0;                 // this one
  int virtual_stages = 1;       // chunks per rank (interleaved schedules)
  std::vector<int> layer_sizes; // layers per virtual stage, in virtual-stage order; empty: balanced
  TpGroup tp;                   // tensor parallelism inside the stage (Note [tensor parallelism inside stages])
};

class PipelineStage : public nn::Module {
 public:
  PipelineStage(const models::GPTConfig& config, const PipelineStageSpec& spec, uint64_t seed);
  // The stage of this rank for ctx's layout (pp, pp_rank, and virtual_stages when the schedule is
  // interleaved); `layer_sizes` as in PipelineStageSpec.
  static std::shared_ptr<PipelineStage> build(const models::GPTConfig& config, const ParallelContext& ctx,
                                              uint64_t seed, std::vector<int> layer_sizes = {});

  // Runs chunk `chunk`: ids (b, T) on the first virtual stage, activations (b, T, d) elsewhere;
  // returns activations (b, T, d), or logits (b, T, V) on the last virtual stage (with tp: this
  // rank's slice, (b, T, V_p / tp)).
  Tensor forward(int chunk, const Tensor& input);
  // Mean cross-entropy of the last virtual stage's logits against targets (b, T); with tp, the
  // logits are this rank's vocabulary slice and the loss (the same on every tp rank) is
  // vocab_parallel_cross_entropy.
  Tensor loss(const Tensor& logits, const Tensor& targets) const;

  int stages() const { return spec_.stages; }
  int rank() const { return spec_.rank; }
  int virtual_stages() const { return spec_.virtual_stages; }
  int chunks() const { return spec_.virtual_stages; }
  int virtual_stage(int chunk) const { return chunk * spec_.stages + spec_.rank; }
  bool is_first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int chunk) const { return virtual_stage(chunk) == spec_.stages * spec_.virtual_stages - 1; }
  StageLayers layers(int chunk) const { return ranges_.at(size_t(virtual_stage(chunk))); }
  const models::GPTConfig& config() const { return config_; }

  // The head weight's copy whose gradient must be summed with another rank's (Note [pipeline
  // tied embeddings]); undefined when this rank holds no copy or holds both uses.
  Tensor tied_weight() const;
  // The same initialisation as models::GPT::init_weights, by full parameter name (shards their slices).
  void init_weights(uint64_t seed);
  void reset_parameters(uint64_t seed) override { init_weights(seed); }

  const TpGroup& tp() const { return spec_.tp; }
  // The ShardSpec of every tensor-parallel shard by name (empty with tp size 1).
  const std::map<std::string, ShardSpec>& shard_specs() const { return specs_; }
  // The dtype of the activations between stages.
  DType dtype() const;
  // This stage's parameters whole, under the single-process names (a collective over tp).
  nn::NamedTensors full_state_dict() const;
  // Loads this stage's parameters from single-process tensors (a superset is fine): each tp rank
  // takes its slices.
  void load_full_state_dict(const std::map<std::string, Tensor>& full);

  // Members are null (or empty) where not held; tp size 1 uses the first kind of each pair, tp
  // size > 1 the second (tp_*).
  std::shared_ptr<nn::Module> transformer;             // children as in GPTTransformer
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<VocabParallelEmbedding> tp_wte;
  std::shared_ptr<nn::Dropout> drop;
  std::vector<std::vector<std::shared_ptr<nn::TransformerDecoderLayer>>> blocks;       // [chunk][i]
  std::vector<std::vector<std::shared_ptr<TensorParallelDecoderLayer>>> tp_blocks;     // [chunk][i]
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;                 // untied head, last virtual stage only
  std::shared_ptr<ColumnParallelLinear> tp_lm_head;    // (V_p / tp, d), padded, no bias

 private:
  models::GPTConfig config_;
  PipelineStageSpec spec_;
  std::vector<StageLayers> ranges_;  // per virtual stage
  std::map<std::string, ShardSpec> specs_;
};

}  // namespace trireme::parallel
