// PipelineModel: what the pipeline executor needs from a model that is cut into stages. The
// model (models::GPT) implements it; the executor runs any model that does, so the pipeline
// layer never names an architecture.
//
// Virtual stage s = chunk * stages + rank (pipeline_partition.h): rank r runs chunks 0 ..
// virtual_stages - 1, chunk c being virtual stage c * stages + r. The first virtual stage takes
// ids (b, T), the others activations (b, T, hidden_size()); the last returns what loss_of takes.
#pragma once

#include <map>
#include <string>

#include "trireme/nn/module.h"
#include "trireme/parallel/shard.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::parallel {

// Which pipeline rank this process is and how many chunks it runs.
struct PipelinePosition {
  int stages = 1;          // pipeline ranks
  int rank = 0;            // this one
  int virtual_stages = 1;  // chunks per rank (interleaved schedules)

  int virtual_stage(int chunk) const { return chunk * stages + rank; }
  bool is_first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int chunk) const { return virtual_stage(chunk) == stages * virtual_stages - 1; }
};

class PipelineModel : public nn::Module {
 public:
  using nn::Module::Module;

  virtual const PipelinePosition& pipeline() const = 0;
  // Runs chunk `chunk` of this rank on ids (first virtual stage) or activations (the others).
  virtual Tensor forward_chunk(int chunk, const Tensor& input) = 0;
  // The mean loss of the last virtual stage's output against targets (b, T).
  virtual Tensor loss_of(const Tensor& output, const Tensor& targets) const = 0;
  // The width of the activations between stages, and their dtype.
  virtual int64_t hidden_size() const = 0;
  virtual DType activation_dtype() const = 0;
  // A weight that two pipeline ranks hold copies of (a tied embedding and head) and whose
  // gradients the executor sums between them after each step; undefined when there is none here.
  virtual Tensor tied_weight() const = 0;
  // The tensor-parallel group inside each stage and the ShardSpec of every sharded parameter.
  virtual const TpGroup& tp() const = 0;
  virtual const std::map<std::string, ShardSpec>& shard_specs() const = 0;
};

}  // namespace trireme::parallel
