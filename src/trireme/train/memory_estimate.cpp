// The per-process memory estimate of a training run (see memory_estimate.h).
#include "trireme/train/memory_estimate.h"

#include <cmath>

#include "trireme/parallel/pipeline_partition.h"
#include "trireme/train/step_runner.h"

namespace trireme::train {

namespace {

// The sizes of one block that memory depends on, for either architecture (Note [GPT
// architectures] in models/gpt_block.h).
struct BlockShape {
  double d, heads, kv_d, ffn;  // kv_d: the keys' (and values') width, d without grouped-query attention
  bool llama, bias, qkv_bias;
};

BlockShape block_shape(const models::GPTConfig& c) {
  return {double(c.d_model), double(c.n_head), double(c.kv_heads() * (c.d_model / c.n_head)), double(c.ffn_size()),
          c.arch == models::GPTArch::llama, c.bias && c.arch != models::GPTArch::llama, c.qkv_bias};
}

// Activations a transformer block keeps for its backward, per token: for GPT-2 16.5 values per
// unit of d_model, of `elt` bytes but the norms' inputs (the f32 residual stream, 4 bytes under
// autocast too), plus each head's f32 log-sum-exp. What the block saves: the
// norms' inputs and outputs (4 d, with their means and deviations), q, k and v (3 d), the
// attention output and its projection's input (2 d), the MLP's 4d hidden before and after GELU
// (8 d); the attention keeps no T x T probabilities (its backward recomputes them from the
// log-sum-exps). That counts 17 d; the 0.5 d less is fitted to measured peaks of CPU training (the
// peak of live tensor bytes, d_model 128-384, block 128-256): with it the estimates of one
// process are within 2 % of them. The norms' part sits outside the tensor-parallel regions:
// replicated over tp (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models", 2022, count the same pieces). Llama keeps the rotated q and k (d + kv_d) and the keys
// and values repeated for every query head under grouped-query attention (2 d), and its SwiGLU's
// gate | up, SiLU's output and the product (4 ffn) in place of GELU's 2 ffn (measured on the CPU:
// within 3 % with and without grouped-query attention, f32 and bf16, tp 2).
// Selective recomputation keeps neither the activation's output (GELU's, or SwiGLU's product)
// nor, off the sequence-parallel path, the norms' outputs.
double block_activation_bytes_per_token(const BlockShape& s, double tp, bool sp, double elt, bool selective) {
  const double d = s.d;
  // Sequence parallelism splits the norms' inputs; their outputs are kept as the column-parallel
  // layers gathered them, whole.
  const double norm_inputs = 2 * d, norm_outputs = selective && !sp ? 0 : 2 * d;
  // q, k and v (for llama: the rotated q and k, and either k and v repeated for every query head
  // or, without grouped-query attention, q | k | v itself, which the view of v keeps), the
  // attention's output and its projection's input.
  const double qkv = s.llama ? (d + s.kv_d) + (s.kv_d < d ? 2 * d : d + 2 * s.kv_d) : d + 2 * s.kv_d;
  const double attention = qkv + 2 * d;
  const double mlp = (s.llama ? 4 : 2) * s.ffn - (selective ? s.ffn : 0);
  const double inside = attention + mlp - 0.5 * d;
  // The norms' inputs are the residual stream, f32 whatever autocast computes in.
  return 4 * (sp ? norm_inputs / tp : norm_inputs) + elt * (norm_outputs + inside / tp) + 4 * s.heads / tp;
}

// Parameter elements of one block on one tp rank: the column-parallel weights and biases and the
// row-parallel weights are split, the norms and row-parallel biases replicated.
double block_parameters(const BlockShape& s, double tp) {
  const double d = s.d, b = s.bias ? 1 : 0, qkv = d + 2 * s.kv_d;
  const double attention = qkv * d / tp + (s.bias || s.qkv_bias ? qkv / tp : 0) + d * d / tp + b * d;
  const double mlp = (s.llama ? 2 : 1) * s.ffn * d / tp + b * s.ffn / tp + s.ffn * d / tp + b * d;
  return attention + mlp + 2 * (d + b * d);
}

// Micro-batches whose activations a pipeline rank holds at its fullest, per chunk it runs, and
// the layers of one of them: GPipe keeps all m; 1F1B the pp - r of its warm-up; the interleaved schedule's warm-up on rank r runs
// 2 (pp - r - 1) + (v - 1) pp + 1 chunk forwards (Narayanan et al., 2021, as Megatron-LM).
double chunk_forwards_in_flight(const io::ParallelConfig& p, int r, int v) {
  const double m = double(p.micro_batches), pp = double(p.pp);
  if (p.pp == 1) return 1;
  if (p.schedule == "gpipe") return m * v;
  if (p.schedule == "interleaved") return std::min(m * v, 2 * (pp - r - 1) + (v - 1) * pp + 1);
  return std::min(m, pp - r);
}

}  // namespace

int64_t vocab_or_assumed(const io::TrainConfig& cfg, int64_t vocab_size) {
  if (vocab_size > 0) return vocab_size;
  return cfg.data.tokenizer == "bpe" ? cfg.data.bpe_vocab_size : 256;
}

std::vector<MemoryEstimate> estimate_training_memory_per_rank(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  const models::GPTConfig model = gpt_config(cfg, vocab_or_assumed(cfg, vocab_size));
  const double V = double(model.vocab_size);  // model.vocab_size may round the tokenizer's up
  const BlockShape shape = block_shape(model);
  const double d = double(m.d_model), T = double(m.block_size);
  const int dp = int(std::max<int64_t>(p.dp, 1)), tp = int(std::max<int64_t>(p.tp, 1)),
            pp = int(std::max<int64_t>(p.pp, 1));
  const int v = p.pp > 1 && p.schedule == "interleaved" ? int(std::max<int64_t>(p.virtual_stages, 1)) : 1;
  const double padded_vocab = std::ceil(V / tp) * tp;
  const double elt = cfg.train.precision == "f32" ? 4 : 2;
  const bool autocast = elt == 2;  // bf16/f16 under autocast; the parameters stay f32
  const bool sp = p.sequence_parallel && tp > 1;
  const double micro_tokens = double(cfg.train.batch_size) / (double(dp) * double(std::max<int64_t>(p.micro_batches, 1))) * T;
  const double state_per_param = cfg.optim.name == "adamw" ? 8 : (cfg.optim.momentum > 0 ? 4 : 0);

  const double block_params = block_parameters(shape, tp);
  const double per_block = block_activation_bytes_per_token(shape, tp, sp, elt, false);
  const double per_selective_block = block_activation_bytes_per_token(shape, tp, sp, elt, true);

  // Which blocks each pipeline rank holds: chunk c of rank r is virtual stage c pp + r. A model
  // with fewer layers than stages is refused by the config; count none rather than fail here.
  std::vector<int> stage_layers(size_t(pp) * size_t(v), 0);
  if (m.n_layer >= int64_t(pp) * v) {
    const auto sizes = parallel::pipeline_partition_sizes(int(m.n_layer), pp * v);
    std::copy(sizes.begin(), sizes.end(), stage_layers.begin());
  }
  std::vector<MemoryEstimate> stages(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    MemoryEstimate& e = stages[size_t(r)];
    double layers = 0, layers_per_chunk = 0;
    for (int c = 0; c < v; ++c) layers += stage_layers[size_t(c * pp + r)];
    layers_per_chunk = layers / v;
    const bool first = r == 0, last = r == pp - 1;
    e.parameters = layers * block_params;
    if (first) e.parameters += padded_vocab / tp * d + (shape.llama ? 0 : T * d);  // wte (its vocabulary slice), wpe
    if (last) {
      e.parameters += d + (shape.bias ? d : 0);  // ln_f
      if (!m.tie_embeddings || (pp > 1)) e.parameters += padded_vocab / tp * d;  // the head, or wte's copy
    }
    e.weight_bytes = 4 * e.parameters;
    e.gradient_bytes = 4 * e.parameters;
    e.optimizer_bytes = state_per_param * e.parameters / (p.zero > 0 ? dp : 1);
    // ZeRO: each rank's shard of the reduce-scattered gradients (ZeRO-1 all-gathers the updated
    // parameters through the spent gradient buckets).
    if (p.zero > 0) e.communication_bytes += 4 * e.parameters / dp;
    // ZeRO-2/3 with one stage: a bucket lives from its first gradient to the end of its
    // reduce-scatter, so the backward holds the one being filled and up to two in flight
    // (ZeRO-3's buckets are its blocks, the rest cut by bucket_mb). A pipeline accumulates whole
    // gradients over its micro-batches first (Note [ZeRO inside a pipeline]).
    const double block_bytes = 4 * block_params;
    const double bucket_bytes = p.zero == 3 ? block_bytes : p.bucket_mb * double(1 << 20);
    // Under ZeRO-2 a gradient also exists whole for a moment before it is copied into its bucket:
    // the largest, the token embedding's, counts (under ZeRO-3 it arrives last, when the
    // activations are gone).
    const bool buckets_come_and_go = p.zero >= 2 && pp == 1;
    if (buckets_come_and_go) {
      e.gradient_bytes = std::min(e.gradient_bytes, 3 * bucket_bytes) + (p.zero == 2 ? 4 * padded_vocab / tp * d : 0);
    }
    // ZeRO-3: a block's parameters are whole only around its forward and its backward (with the
    // next one's gather under way: two at a time); the rest of the model stays whole.
    if (p.zero == 3) e.weight_bytes = 4 * e.parameters - layers * block_bytes * (1 - 1.0 / dp) + std::min(layers, 2.0) * block_bytes;

    // Recomputed blocks keep only their input (the f32 residual stream, sp: this rank's rows);
    // selectively recomputed ones all but their norms' and activation function's outputs.
    const double recomputed = cfg.memory.recompute_layers < 0
                                  ? layers_per_chunk
                                  : std::min(layers_per_chunk, double(cfg.memory.recompute_layers));
    const double recompute_per_chunk = cfg.memory.recompute == "full" ? recomputed : 0;
    const double selective_per_chunk = cfg.memory.recompute == "selective" ? recomputed : 0;
    const double residual_per_token = 4 * (sp ? d / tp : d);  // a block's f32 input (sp: this rank's rows)
    const double kept_per_token = per_block * (layers_per_chunk - recompute_per_chunk - selective_per_chunk) +
                                  per_selective_block * selective_per_chunk + residual_per_token * recompute_per_chunk;
    const double in_flight = chunk_forwards_in_flight(p, r, v);
    // The logits (in autocast's dtype, with the head's weight cast under autocast) and, as the
    // backward starts, their gradient (the same dtype: the loss reads 16-bit logits as they are,
    // ops/autocast_policy.h); the last block, when recomputed, replays while one of the two is alive.
    const double logits_forward = last ? micro_tokens * elt * padded_vocab / tp + (autocast ? 2 * padded_vocab / tp * d : 0) : 0;
    const double logits_gradient = last ? micro_tokens * elt * padded_vocab / tp : 0;
    const double logits = logits_forward + logits_gradient;
    const double replay = recompute_per_chunk > 0 ? micro_tokens * per_block : 0;
    // Recomputation covers the first blocks of a chunk: only when it covers them all does the last
    // block's replay meet the logits. Otherwise the first replay comes after the blocks kept
    // whole have freed their activations (this micro-batch's; those in flight keep theirs).
    const bool last_block_replays = recompute_per_chunk > 0 && recompute_per_chunk == layers_per_chunk;
    const double head_replay = last_block_replays ? replay : 0;
    // Under autocast each GEMM keeps its weight's 16-bit cast for the backward, in every block not
    // recomputed whole (a replayed block casts again). The micro-batches in flight share one cast
    // per chunk (Note [autocast cast cache] in autograd/autocast_mode.h).
    const double weight_casts = autocast ? 2 * block_params * (layers_per_chunk - recompute_per_chunk) : 0;
    const double kept_per_micro_batch = micro_tokens * kept_per_token;
    const double blocks_kept = in_flight * kept_per_micro_batch + std::min(in_flight, double(v)) * weight_casts;
    // Under autocast a block's backward holds, beside the block's activations, the gradients of
    // its MLP's hidden layer before and after the activation function and the f32 copy of the
    // residual stream's (its gradients cross casts, each a copy). Fitted to one H200 (GPT-2 124M
    // and GPT 6.7B under full recomputation); f32 runs on the CPU show none at their peak.
    const double backward_working =
        autocast ? micro_tokens * (2 * (shape.llama ? 2 : 1) * shape.ffn / tp * elt + residual_per_token) : 0;
    const double at_the_head = blocks_kept + std::max({logits, std::max(logits_forward, logits_gradient) + head_replay,
                                                       head_replay + backward_working});
    const double recomputed_inputs = micro_tokens * residual_per_token * recompute_per_chunk;
    const double at_the_first_replay = recompute_per_chunk > 0 && !last_block_replays
                                           ? blocks_kept - kept_per_micro_batch + recomputed_inputs + replay + backward_working
                                           : 0;
    const double training = std::max(at_the_head, at_the_first_replay);
    // The backward of this rank's first block, beside nearly all the gradients: its activations (a
    // replay's, when recomputed), its weight casts and its backward's working set.
    const double first_block_backward =
        (recompute_per_chunk > 0 ? replay : micro_tokens * (selective_per_chunk > 0 ? per_selective_block : per_block)) +
        (autocast ? 2 * block_params : 0) + backward_working;
    // Evaluation runs a rank's whole batch at once, without gradients: its f32 logits can
    // outgrow a training micro-batch's activations.
    const double eval_tokens = micro_tokens * double(std::max<int64_t>(p.micro_batches, 1));
    const double evaluation = last ? eval_tokens * 4 * padded_vocab / tp : 0;
    e.activation_bytes = std::max(training, evaluation);
    // The whole gradients meet activations while micro-batches accumulate, and in a run of several
    // processes, whose gradients are zeroed after a step but kept (the reducer's buckets), so
    // evaluation's logits meet them too. One process frees its gradients after each step, and its
    // activations as the backward makes them: only the first block's backward meets them all.
    const bool several_processes = dp * tp * pp > 1;
    e.activations_beside_gradients = buckets_come_and_go  ? blocks_kept
                                     : several_processes  ? e.activation_bytes
                                     : p.micro_batches > 1 ? training
                                                           : first_block_backward;
    // The executor keeps each micro-batch's transfers until the step ends: the activations a
    // stage sends on, and those it receives with the gradients it sends back.
    const double transfer = double(std::max<int64_t>(p.micro_batches, 1)) * v * micro_tokens * d * elt;
    if (pp > 1) e.communication_bytes += (last ? 0 : transfer) + (first ? 0 : 2 * transfer);
  }

  std::vector<MemoryEstimate> ranks;
  for (int dr = 0; dr < dp; ++dr) {
    for (int r = 0; r < pp; ++r) {
      for (int t = 0; t < tp; ++t) {
        MemoryEstimate e = stages[size_t(r)];
        e.rank = int(ranks.size()), e.dp_rank = dr, e.pp_rank = r, e.tp_rank = t;
        ranks.push_back(e);
        if (ranks.size() > 4096) return ranks;  // absurd layouts: the first ranks say enough
      }
    }
  }
  return ranks;
}

MemoryEstimate estimate_training_memory(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto ranks = estimate_training_memory_per_rank(cfg, vocab_size);
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const MemoryEstimate& a, const MemoryEstimate& b) { return a.total() < b.total(); });
}

MemoryEstimate estimate_inference_memory(const models::GPTConfig& c) {
  const double T = double(c.block_size), V = double(c.vocab_size);
  MemoryEstimate e;
  e.parameters = double(c.num_parameters());
  e.weight_bytes = 4 * e.parameters;
  // One sequence's forward keeps a layer's working set at a time: the MLP's hidden (ffn wide,
  // twice under SwiGLU), the heads' T x T scores, and the logits.
  e.activation_bytes = 4 * T * (double(c.ffn_size()) * (c.arch == models::GPTArch::llama ? 2 : 1) + double(c.n_head) * T + V);
  return e;
}

}  // namespace trireme::train
