// Per-token costs of the model's pieces, counted from its own ops (see model_costs.h).
#include "trireme/plan/model_costs.h"

#include <cmath>
#include <vector>

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/models/gpt.h"
#include "trireme/models/gpt_block.h"
#include "trireme/nn/checkpoint.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/op_count.h"
#include "trireme/ops/reduce.h"

namespace trireme::plan {

namespace {

constexpr int64_t kBatch = 2, kSeq = 16;  // the tiny batch the pieces run on
constexpr double kTokens = double(kBatch * kSeq);

struct Counted {
  OpCounts forward, total;
};

models::GPTConfig tiny_config(const io::ModelConfig& m, int64_t d, int64_t vocab) {
  models::GPTConfig c;
  c.vocab_size = vocab;
  c.block_size = kSeq;
  c.n_layer = 1;
  c.n_head = 2;  // the products' counts do not depend on the number of heads
  c.d_model = d;
  c.dropout = 0;
  c.bias = m.bias;
  c.tie_embeddings = m.tie_embeddings;
  return c;
}

// One block forward and backward on (kBatch, kSeq, d).
Counted count_block(const io::ModelConfig& m, int64_t d) {
  const models::GPTConfig c = tiny_config(m, d, 64);
  models::GPTBlock block(c, parallel::TpGroup::single());
  Generator gen(7);
  Tensor x = randn({kBatch, kSeq, d}, gen);
  x.set_requires_grad(true);
  Counted out;
  OpCountScope all(out.total);
  Tensor y;
  {
    OpCountScope fwd(out.forward);
    y = block.forward(x);
  }
  sum(y).backward();
  return out;
}

// Sums the FLOPs of the matrix products that run on this thread while alive: the kernels that
// launch, not the ops that are called (a checkpointed replay skips some, kernels/deferred_kernels.h).
class ProductFlopTape final : public ObservingKernelTape {
 public:
  double flops = 0;

 private:
  void observe(const KernelCallRecord& call) override {
    // (a, b, bias or addend, out), or (a, b, out, row sums) for a weight gradient with its bias's.
    const bool product = call.op == "matmul" || call.op == "matmul_add", with_sums = call.op == "matmul_row_sums";
    if ((product || with_sums) && call.tensors.size() == 4) {
      const Tensor& a = *call.tensors[0];
      const Tensor& out = *call.tensors[with_sums ? 2 : 3];
      flops += 2.0 * double(out.numel()) * double(a.size(-1));
    }
  }
};

// The products of one block's forward and backward that run, with full recomputation or without.
double block_product_flops(const io::ModelConfig& m, int64_t d, bool recompute) {
  const models::GPTConfig c = tiny_config(m, d, 64);
  auto block = std::make_shared<models::GPTBlock>(c, parallel::TpGroup::single());
  Generator gen(7);
  Tensor x = randn({kBatch, kSeq, d}, gen);
  x.set_requires_grad(true);
  ProductFlopTape tape;
  Tensor y = recompute ? nn::checkpointed(block, x, [&](const Tensor& in) { return block->forward(in); })
                       : block->forward(x);
  sum(y).backward();
  return tape.flops;
}

// The whole one-block model, forward and backward through its loss.
Counted count_model(const io::ModelConfig& m, int64_t d, int64_t vocab) {
  models::GPT gpt(tiny_config(m, d, vocab), 7);
  std::vector<int64_t> ids(size_t(kBatch * kSeq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i * 7 % size_t(vocab));
  const Tensor t = from_vector<int64_t>(ids, {kBatch, kSeq});
  Counted out;
  OpCountScope all(out.total);
  Tensor loss;
  {
    OpCountScope fwd(out.forward);
    loss = gpt.loss(t, t);
  }
  loss.backward();
  return out;
}

}  // namespace

ModelCosts measure_model_costs(const io::ModelConfig& m) {
  autograd::GradModeGuard grad_on(true);
  const double d1 = 32, d2 = 64, d3 = 96, v1 = 64, v2 = 128;
  const Counted b1 = count_block(m, int64_t(d1)), b2 = count_block(m, int64_t(d2)), b3 = count_block(m, int64_t(d3));
  ModelCosts c;
  // a d² + b d through two widths.
  const double y1 = b1.total.matmul_flops / kTokens, y2 = b2.total.matmul_flops / kTokens;
  c.block_mm_d2 = (y2 / d2 - y1 / d1) / (d2 - d1);
  c.block_mm_d = y1 / d1 - c.block_mm_d2 * d1;
  c.block_attn_td = b2.total.attention_flops / kTokens / (double(kSeq) * d2);
  const double m1 = b1.total.memory_bytes / kTokens, m2 = b2.total.memory_bytes / kTokens;
  c.block_mem_d = (m2 - m1) / (d2 - d1);
  c.block_mem_1 = m1 - c.block_mem_d * d1;
  auto kernels = [](const OpCounts& o) { return double(o.matmul_calls + o.attention_calls + o.memory_calls); };
  c.block_kernels = kernels(b2.total);
  c.forward_share = b2.total.flops() > 0 ? b2.forward.flops() / b2.total.flops() : 1.0 / 3;
  // A replay runs the forward's attention and the products the backward reads (not the block's
  // last linear, whose output only flows into the block's output).
  const double replayed_products = block_product_flops(m, int64_t(d2), true) - block_product_flops(m, int64_t(d2), false);
  c.replay_share = b2.total.flops() > 0 ? (replayed_products + b2.forward.attention_flops) / b2.total.flops() : c.forward_share;
  const double predicted3 = c.block_flops_per_token(d3, double(kSeq)) * kTokens;
  c.fit_error = b3.total.flops() > 0 ? std::abs(predicted3 - b3.total.flops()) / b3.total.flops() : 0;

  // The head and embedding: the one-block model less its block, through two vocabularies.
  const Counted g1 = count_model(m, int64_t(d1), int64_t(v1)), g2 = count_model(m, int64_t(d1), int64_t(v2));
  const double h1 = (g1.total.flops() - b1.total.flops()) / kTokens,
               h2 = (g2.total.flops() - b1.total.flops()) / kTokens;
  c.head_dv = (h2 - h1) / (d1 * (v2 - v1));
  c.head_d = h1 / d1 - c.head_dv * v1;
  const double hm1 = (g1.total.memory_bytes - b1.total.memory_bytes) / kTokens,
               hm2 = (g2.total.memory_bytes - b1.total.memory_bytes) / kTokens;
  c.head_mem_v = (hm2 - hm1) / (v2 - v1);
  c.head_mem_d = std::max(0.0, (hm1 - c.head_mem_v * v1) / d1);
  c.head_kernels = std::max(0.0, kernels(g1.total) - kernels(b1.total));
  return c;
}

}  // namespace trireme::plan
