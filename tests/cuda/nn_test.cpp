// The neural-network ops with CUDA kernels against their CPU kernels: norms, softmax,
// cross-entropy, dropout (the mask must be bit-identical), embedding, index_select, attention,
// rotary embeddings and AdamW, forward and backward, each float dtype, odd shapes.
#include <gtest/gtest.h>

#include <limits>

#include "cuda_op_check.h"
#include "expect_error.h"
#include "norm_edge_check.h"
#include "trireme/core/rng.h"
#include "trireme/cuda/device.h"
#include "trireme/kernels/philox.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/optim/adamw.h"

namespace trireme {
namespace {

using testing::check_cuda_op;
using trireme::testing::expect_error;
using testing::expect_close;
using testing::OpCase;
using V = std::vector<Tensor>;

// Integer tensors (ids, targets, indices) made on the CPU and moved to the device of `like`.
Tensor ints_like(const std::vector<int64_t>& values, const Tensor& like, DType dtype = DType::i64) {
  return to_device(to_dtype(from_vector<int64_t>(values, {int64_t(values.size())}), dtype), like.device());
}


TEST(CudaNn, LayerNormAndRmsNorm) {
  TRIREME_REQUIRE_GPU();
  check_cuda_op({"layer_norm", {{19, 261}, {261}, {261}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_small_d", {{3, 5, 7}, {7}, {7}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_no_affine", {{6, 33}}, [](const V& x) { return layer_norm(x[0], Tensor(), Tensor()); }});
  // Many rows: the parameter gradients are summed over several row chunks.
  check_cuda_op({"layer_norm_many_rows", {{4100, 33}, {33}, {33}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }},
                {DType::f64, DType::f32});
  // d = 768 and 2048 (GPT-2's and GPT 1.3B's rows: one warp each, 16-byte vectors), 1100 (one
  // warp, vectors only for f32), 2100 and 4096 (one block each, the row in registers; 4096 is GPT
  // 6.7B's), 6001 (a block, scalar loads, 32 per thread) and 9000 (one block reading from memory).
  check_cuda_op({"layer_norm_gpt2_rows", {{21, 768}, {768}, {768}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_2048", {{3, 2048}, {2048}, {2048}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_1100", {{5, 1100}, {1100}, {1100}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_long_rows", {{3, 2100}, {2100}, {2100}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_4096", {{3, 4096}, {4096}, {4096}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_6001", {{2, 6001}, {6001}, {6001}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"layer_norm_9000", {{2, 9000}, {9000}, {9000}}, [](const V& x) { return layer_norm(x[0], x[1], x[2]); }});
  check_cuda_op({"rms_norm_2048", {{3, 2048}, {2048}}, [](const V& x) { return rms_norm(x[0], x[1]); }});
  check_cuda_op({"rms_norm_long_rows", {{3, 2100}, {2100}}, [](const V& x) { return rms_norm(x[0], x[1]); }});
  check_cuda_op({"rms_norm_4096", {{3, 4096}, {4096}}, [](const V& x) { return rms_norm(x[0], x[1]); }});
  check_cuda_op({"rms_norm_9000", {{2, 9000}, {9000}}, [](const V& x) { return rms_norm(x[0], x[1]); }});
  check_cuda_op({"rms_norm", {{19, 261}, {261}}, [](const V& x) { return rms_norm(x[0], x[1]); }});
  check_cuda_op({"rms_norm_many_rows", {{3000, 17}, {17}}, [](const V& x) { return rms_norm(x[0], x[1]); }},
                {DType::f64, DType::f32});
}

// What static graphs fold into the norms (kernels/nn.h): the 16-bit edge of f32 norms in place of
// casts, the forward's residual and the backward's addend in place of adds; the warp and block teams with and without
// 16-byte vectors, and the block kernel of rows too long for registers.
TEST(CudaNn, NormsWithAnEdgeOrAnAddendGiveTheBitsOfTheCallsTheyReplace) {
  TRIREME_REQUIRE_GPU();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{21, 768}, {4100, 33}, {5, 1100}, {3, 2100}, {3, 4096}, {2, 9000}}) {
    trireme::testing::expect_norm_edges_match_casts(Device::cuda(0), rows, cols);
    trireme::testing::expect_norm_addends_match_adds(Device::cuda(0), rows, cols);
    trireme::testing::expect_norm_residuals_match_adds(Device::cuda(0), rows, cols);
  }
}

TEST(CudaNn, SoftmaxAndLogSoftmax) {
  TRIREME_REQUIRE_GPU();
  check_cuda_op({"softmax", {{19, 261}}, [](const V& x) { return softmax(x[0]); }});
  check_cuda_op({"softmax_dim0", {{3, 5, 7}}, [](const V& x) { return softmax(x[0], 0); }});
  check_cuda_op({"softmax_long_row", {{3, 5000}}, [](const V& x) { return softmax(x[0]); }}, {DType::f64, DType::f32});
  check_cuda_op({"log_softmax", {{19, 261}}, [](const V& x) { return log_softmax(x[0]); }});
  check_cuda_op({"log_softmax_dim1", {{3, 5, 7}}, [](const V& x) { return log_softmax(x[0], 1); }});
}

TEST(CudaNn, CrossEntropy) {
  TRIREME_REQUIRE_GPU();
  const std::vector<int64_t> t = {3, -100, 0, 999, 17, 17, -100, 500, 2, 998, 1, 42, 7};
  for (auto [name, red] : std::vector<std::pair<std::string, Reduction>>{
           {"mean", Reduction::mean}, {"sum", Reduction::sum}, {"none", Reduction::none}}) {
    for (DType tdt : {DType::i64, DType::i32}) {
      check_cuda_op({"cross_entropy_" + name, {{13, 1000}},
                     [&, red, tdt](const V& x) { return cross_entropy(x[0], ints_like(t, x[0], tdt), -100, red); }});
    }
  }
  // A class count that no 16-byte vector divides (the scalar row path), and rows of -inf logits
  // beside a finite one (the running max starts at -inf).
  check_cuda_op({"cross_entropy_odd_classes", {{7, 1001}},
                 [&](const V& x) { return cross_entropy(x[0], ints_like({0, 5, 1000, -100, 3, 999, 17}, x[0])); }});
  check_cuda_op({"cross_entropy_masked_logits", {{3, 64}},
                 [&](const V& x) {
                   Tensor mask = gt(arange(64, DType::f32, x[0].device()), 40.0);
                   return cross_entropy(masked_fill(x[0], mask, -std::numeric_limits<double>::infinity()),
                                        ints_like({1, 40, 7}, x[0]));
                 }});
  // Every row ignored: 0, not NaN (mean).
  check_cuda_op({"cross_entropy_all_ignored", {{2, 5}},
                 [](const V& x) { return cross_entropy(x[0], ints_like({-100, -100}, x[0])); }});
  // A target out of range: the call returns (the host does not wait for the GPU) and the next
  // synchronisation throws, naming the op, the target, its row and the class count; then the
  // device is usable again.
  Tensor logits = to_device(zeros({2, 5}), Device::cuda(0));
  Tensor bad = cross_entropy(logits, ints_like({1, 5}, logits));
  expect_error(
      [&] { to_device(bad, Device::cpu()).item(); }, "cross_entropy: target 5 at row 1 is out of range for 5 classes");
  EXPECT_NEAR(to_device(cross_entropy(logits, ints_like({1, 4}, logits)), Device::cpu()).item(), std::log(5.0), 1e-6);
}

TEST(CudaNn, DropoutMaskIsBitIdenticalToTheCpu) {
  TRIREME_REQUIRE_GPU();
  const uint64_t seed = 0x1234567890abcdefull, stream = 77, offset = (uint64_t(1) << 32) - 1000;  // crosses 2^32
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    Tensor x = to_dtype(ones({1001, 103}), dt);
    Tensor y_cpu = dropout(x, 0.37, true, seed, stream, offset);
    Tensor y_gpu = dropout(to_device(x, Device::cuda(0)), 0.37, true, seed, stream, offset);
    expect_close(y_gpu, y_cpu, 0.0, "dropout mask");
  }
  // The inline Philox against core/rng's reference.
  for (uint64_t i : {uint64_t(0), uint64_t(1), uint64_t(12345), (uint64_t(1) << 40) + 3}) {
    EXPECT_EQ(float(philox_word0(seed, stream, i) >> 8) * (1.0f / 16777216.0f), rng_uniform(seed, stream, i));
  }
  check_cuda_op({"dropout", {{7, 33}}, [](const V& x) { return dropout(x[0], 0.25, true, 9, 4, 100); }});
}

TEST(CudaNn, EmbeddingAndIndexSelect) {
  TRIREME_REQUIRE_GPU();
  const std::vector<int64_t> ids = {3, 7, 3, 0, 49, 7, 7, 12, 3, 1, 0, 48, 2, 3};
  for (DType idt : {DType::i64, DType::i32}) {
    check_cuda_op({"embedding", {{50, 24}}, [&, idt](const V& x) {
                     return embedding(x[0], reshape(ints_like(ids, x[0], idt), {2, 7}));
                   }});
  }
  check_cuda_op({"embedding_wide", {{20, 300}}, [&](const V& x) { return embedding(x[0], ints_like({1, 19, 1}, x[0])); }});
  // A long run of one id (as a vocabulary-parallel embedding's out-of-shard ids make) over two
  // column blocks, with run lengths that are and are not multiples of the loads kept in flight.
  std::vector<int64_t> runs;
  for (int64_t i = 0; i < 700; ++i) runs.push_back(i % 7 == 0 ? 5 : (i % 3 == 0 ? 2 : 0));
  check_cuda_op({"embedding_long_runs", {{9, 300}}, [&](const V& x) { return embedding(x[0], ints_like(runs, x[0])); }});
  check_cuda_op({"index_select_dim1", {{6, 5, 7}}, [](const V& x) { return index_select(x[0], 1, ints_like({4, 0, 4, 2}, x[0])); }});
  check_cuda_op({"index_select_dim0", {{6, 9}}, [](const V& x) { return index_select(x[0], 0, ints_like({5, 5, 1}, x[0], DType::i32)); }});
  check_cuda_op({"index_select_last", {{4, 6}}, [](const V& x) { return index_select(x[0], 1, ints_like({5, 0, 0}, x[0])); }});
  Tensor w = to_device(zeros({4, 3}), Device::cuda(0));
  Tensor bad = embedding(w, ints_like({1, 4}, w));
  expect_error([&] { cuda::synchronize(0); },
                    "embedding: id 4 (at position 1) is out of range for a vocabulary of size V = 4");
  EXPECT_EQ(to_device(embedding(w, ints_like({1, 3}, w)), Device::cpu()).numel(), 6);
  EXPECT_THROW(index_select(w, 0, ints_like({-1}, w)), Error);

  // The backward is deterministic: the same bits on every run.
  Generator gen(3);
  Tensor table = to_device(randn({1000, 64}, gen), Device::cuda(0)).detach();
  table.set_requires_grad(true);
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 5000; ++i) many.push_back(int64_t(rng_uniform(5, 0, uint64_t(i)) * 37.0f));
  Tensor g = to_device(randn({5000, 64}, gen), Device::cuda(0));
  sum(mul(embedding(table, ints_like(many, table)), g)).backward();
  Tensor first = clone(table.grad());
  table.set_grad(Tensor());
  sum(mul(embedding(table, ints_like(many, table)), g)).backward();
  expect_close(table.grad(), to_device(first, Device::cpu()), 0.0, "embedding backward, run twice");
}

TEST(CudaNn, ScaledDotProductAttention) {
  TRIREME_REQUIRE_GPU();
  // (B, T, H, hd) inputs viewed as (B, H, T, hd): the layout a model's head split gives.
  auto bthd = [](const Tensor& t) { return transpose(t, 1, 2); };
  for (bool causal : {true, false}) {
    const std::string c = causal ? "_causal" : "";
    check_cuda_op({"sdpa" + c, {{2, 5, 3, 8}, {2, 5, 3, 8}, {2, 5, 3, 8}},
                   [=](const V& x) { return scaled_dot_product_attention(bthd(x[0]), bthd(x[1]), bthd(x[2]), causal); }});
    check_cuda_op({"sdpa_contiguous" + c, {{2, 3, 17, 16}, {2, 3, 17, 16}, {2, 3, 17, 16}},
                   [=](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); }});
  }
  check_cuda_op({"sdpa_cross_lengths", {{1, 2, 4, 8}, {1, 2, 9, 8}, {1, 2, 9, 8}},
                 [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }});
  // Heads split from one fused QKV projection, as the GPT does: per-batch strides are not uniform.
  check_cuda_op({"sdpa_fused_qkv", {{3, 7, 48}}, [](const V& x) {
                   auto head = [&](int64_t w) { return transpose(reshape(narrow(x[0], 2, w * 16, 16), {3, 7, 2, 8}), 1, 2); };
                   return scaled_dot_product_attention(head(0), head(1), head(2), true);
                 }});
}

TEST(CudaNn, RotaryEmbedding) {
  TRIREME_REQUIRE_GPU();
  check_cuda_op({"rotary", {{2, 3, 5, 8}}, [](const V& x) { return rotary_embedding(x[0]); }});
  check_cuda_op({"rotary_offset", {{1, 2, 6, 16}}, [](const V& x) { return rotary_embedding(x[0], 500.0, 3000); }});
}

TEST(CudaNn, RotaryTableKeptAcrossLengthsAndOffsets) {
  TRIREME_REQUIRE_GPU();
  // One head size and base throughout: the device keeps one table, built by the first call,
  // grown by longer sequences and later offsets, and read at offsets by short calls (as
  // generation does, one position at a time).
  for (const auto& [length, offset] : std::vector<std::pair<int64_t, int64_t>>{{4, 0}, {9, 700}, {3, 2}, {1, 5}, {1, 6}, {12, 0}}) {
    const int64_t t = length, off = offset;
    check_cuda_op({"rotary_kept", {{1, 2, t, 12}}, [off](const V& x) { return rotary_embedding(x[0], 777.0, off); }});
  }
}

TEST(CudaNn, AdamWStepsMatchTheCpu) {
  TRIREME_REQUIRE_GPU();
  // 37 x 41 elements: the vectorised kernel and its scalar tail; at an offset of one element
  // (a contiguous view whose start is not 16-byte aligned), the one-element kernel.
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
  for (int64_t offset : {0, 1}) {
    SCOPED_TRACE(str_cat(dtype_name(dt), ", offset ", offset));
    Generator gen(8);
    Tensor p_cpu = to_dtype(randn({37, 41}, gen), dt).detach();
    Tensor base = to_device(to_dtype(zeros({offset + 37 * 41}), dt), Device::cuda(0));
    Tensor p_gpu = reshape(narrow(base, 0, offset, 37 * 41), {37, 41}).detach();
    copy_(p_gpu, to_device(p_cpu, Device::cuda(0)));
    p_cpu = clone(p_cpu);
    p_cpu.set_requires_grad(true);
    p_gpu.set_requires_grad(true);
    optim::AdamWOptions o{.lr = 1e-2, .betas = {0.9, 0.95}, .eps = 1e-8, .weight_decay = 0.1};
    optim::AdamW opt_cpu({{"p", p_cpu}}, o), opt_gpu({{"p", p_gpu}}, o);
    for (int step = 0; step < 3; ++step) {
      Tensor g = to_dtype(randn({37, 41}, gen), dt);
      p_cpu.set_grad(clone(g));
      p_gpu.set_grad(to_device(g, Device::cuda(0)));
      opt_cpu.step();
      opt_gpu.step();
    }
    // f32 rounding differs only by fused multiply-adds on the GPU: a few ulp per step.
    expect_close(p_gpu, p_cpu, dt == DType::bf16 ? 8e-3 : (dt == DType::f32 ? 1e-6 : 1e-12), "AdamW, 3 steps");
  }
}

}  // namespace
}  // namespace trireme
