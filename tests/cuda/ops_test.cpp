// Every op with a CUDA kernel against the CPU kernel on the same random inputs: forward and
// backward (through the public ops and autograd), each float dtype, odd shapes, and inputs that
// are transposed views rather than contiguous tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>

#include "cuda_op_check.h"
#include "expect_error.h"
#include "graph/graph_test_util.h"
#include "multi_tensor_check.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme {
namespace {

using testing::check_cuda_op;
using testing::Domain;
using testing::expect_close;
using testing::Fn;
using testing::OpCase;
using testing::tolerance_for;

Fn unary(Tensor (*f)(const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return f(x[0]); };
}
Fn binary(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
}

const Shape kOdd = {3, 5, 7};
const Shape kWide = {19, 261};  // more than a block of 256 along the inner dim

TEST(CudaOps, Unary) {
  TRIREME_REQUIRE_GPU();
  std::vector<OpCase> cases = {
      {"neg", {kOdd}, unary(&neg)},
      {"exp", {kOdd}, unary(&exp)},
      {"log", {kOdd}, unary(&log), Domain::positive},
      {"sqrt", {kOdd}, unary(&sqrt), Domain::positive},
      {"rsqrt", {kOdd}, unary(&rsqrt), Domain::positive},
      {"abs", {kOdd}, unary(&abs)},
      {"tanh", {kWide}, unary(&tanh)},
      {"sigmoid", {kOdd}, unary(&sigmoid)},
      {"relu", {kOdd}, unary(&relu)},
      {"silu", {kWide}, unary(&silu)},
      {"gelu_tanh", {kWide}, [](const std::vector<Tensor>& x) { return gelu(x[0], GeluApprox::tanh); }},
      {"gelu_erf", {kOdd}, [](const std::vector<Tensor>& x) { return gelu(x[0], GeluApprox::none); }},
      {"add_scalar", {kOdd}, [](const std::vector<Tensor>& x) { return x[0] + 1.5; }},
      {"mul_scalar", {kOdd}, [](const std::vector<Tensor>& x) { return x[0] * -3.0; }},
      {"pow_scalar", {kOdd}, [](const std::vector<Tensor>& x) { return pow(x[0], 2.0); }},
      {"pow_scalar_frac", {kOdd}, [](const std::vector<Tensor>& x) { return pow(x[0], 1.5); }, Domain::positive},
      {"rsub", {kOdd}, [](const std::vector<Tensor>& x) { return 2.0 - x[0]; }},
      {"rdiv", {kOdd}, [](const std::vector<Tensor>& x) { return 2.0 / x[0]; }, Domain::positive},
  };
  for (const OpCase& c : cases) check_cuda_op(c);
}

TEST(CudaOps, BinaryWithBroadcasting) {
  TRIREME_REQUIRE_GPU();
  std::vector<OpCase> cases = {
      {"add", {kOdd, kOdd}, binary(&add)},
      {"add_broadcast", {{3, 1, 7}, {5, 1}}, binary(&add)},
      {"sub_broadcast", {{4, 9}, {9}}, binary(&sub)},
      {"mul", {kWide, kWide}, binary(&mul)},
      {"mul_broadcast", {{2, 3, 5, 7}, {3, 1, 7}}, binary(&mul)},
      {"div", {kOdd, {5, 7}}, binary(&div), Domain::positive},
      {"pow", {kOdd, kOdd}, binary(&pow), Domain::positive},
      {"maximum", {kOdd, kOdd}, binary(&maximum)},
  };
  for (const OpCase& c : cases) check_cuda_op(c);
}

TEST(CudaOps, WhereAndMaskedFill) {
  TRIREME_REQUIRE_GPU();
  check_cuda_op({"where", {kOdd, kOdd, {5, 7}},
                 [](const std::vector<Tensor>& x) { return where(gt(x[0], 0.0), x[1], x[2]); }});
  check_cuda_op({"masked_fill", {kOdd, {5, 1}},
                 [](const std::vector<Tensor>& x) { return masked_fill(x[0], lt(x[1], 0.0), -7.0); }});
}

TEST(CudaOps, Comparisons) {
  TRIREME_REQUIRE_GPU();
  using CmpFn = Tensor (*)(const Tensor&, const Tensor&);
  for (auto [name, f] : std::vector<std::pair<std::string, CmpFn>>{
           {"eq", &eq}, {"ne", &ne}, {"lt", &lt}, {"le", &le}, {"gt", &gt}, {"ge", &ge}}) {
    // Rounded values so that equal elements occur.
    check_cuda_op({name, {kOdd, {5, 7}},
                   [f](const std::vector<Tensor>& x) {
                     Tensor a = to_dtype(to_dtype(mul(x[0], 2.0), DType::i32), x[0].dtype());
                     Tensor b = to_dtype(to_dtype(mul(x[1], 2.0), DType::i32), x[1].dtype());
                     return f(a, b);
                   },
                   Domain::any, false});
  }
}

TEST(CudaOps, Reductions) {
  TRIREME_REQUIRE_GPU();
  std::vector<OpCase> cases = {
      {"sum_all", {kWide}, [](const std::vector<Tensor>& x) { return sum(x[0]); }},
      {"sum_last", {kWide}, [](const std::vector<Tensor>& x) { return sum(x[0], {-1}); }},
      // Few long rows: summed in pieces by many blocks, then the pieces' totals (a whole
      // gradient's squares in the gradient norm).
      {"sum_all_long", {{300, 700}}, [](const std::vector<Tensor>& x) { return sum(x[0]); }},
      {"sum_last_long", {{3, 50000}}, [](const std::vector<Tensor>& x) { return sum(x[0], {-1}); }},
      // sum_squares returns f64 for every input dtype; cast back, so the comparison's tolerances
      // and its backward's gradient seed follow the input dtype.
      {"sum_squares", {kWide}, [](const std::vector<Tensor>& x) { return to_dtype(sum_squares(x[0]), x[0].dtype()); }},
      {"sum_squares_long", {{300, 700}},
       [](const std::vector<Tensor>& x) { return to_dtype(sum_squares(x[0]), x[0].dtype()); }},
      {"sum_first", {{1030, 3}}, [](const std::vector<Tensor>& x) { return sum(x[0], {0}); }},
      {"sum_cols_many", {{37, 2050}}, [](const std::vector<Tensor>& x) { return sum(x[0], {0}, true); }},
      {"sum_cols_tall", {{3001, 1100}}, [](const std::vector<Tensor>& x) { return sum(x[0], {0}); }},
      {"sum_middle", {kOdd}, [](const std::vector<Tensor>& x) { return sum(x[0], {1}); }},
      {"sum_outer_inner", {kOdd}, [](const std::vector<Tensor>& x) { return sum(x[0], {0, 2}); }},
      // Grouped-query attention's gradient of repeated kv heads: (B, KV, group, T, hd) over group.
      {"sum_broadcast_group", {{2, 3, 7, 33, 16}}, [](const std::vector<Tensor>& x) { return sum(x[0], {2}); }},
      {"sum_middle_many_outputs", {{2, 80, 500, 70}}, [](const std::vector<Tensor>& x) { return sum(x[0], {1}); }},
      {"mean", {kOdd}, [](const std::vector<Tensor>& x) { return mean(x[0], {-1}, true); }},
      {"var", {kWide}, [](const std::vector<Tensor>& x) { return var(x[0], {1}); }},
      {"max_dim_last", {kWide}, [](const std::vector<Tensor>& x) { return max(x[0], -1).first; }},
      {"max_dim_long_rows", {{3, 5003}}, [](const std::vector<Tensor>& x) { return max(x[0], -1).first; }},
      {"max_dim_first", {kOdd}, [](const std::vector<Tensor>& x) { return max(x[0], 0, true).first; }},
      {"max_all", {kOdd}, [](const std::vector<Tensor>& x) { return max(x[0]); }},
  };
  for (const OpCase& c : cases) check_cuda_op(c);
}

// Gradient clipping's ops over many tensors (ops/multi_tensor.h): the bits of the per-tensor
// kernels in one call per dtype; the scale has the CPU's bits, the sum its value to rounding.
TEST(CudaOps, ManyTensorsInOneCallGiveTheBitsOfOneCallPerTensor) {
  TRIREME_REQUIRE_GPU();
  const Device cuda = Device::cuda(0);
  testing::expect_sum_squares_all_matches_sum_squares(cuda);
  testing::expect_mul_all_matches_mul(cuda);
  std::vector<Tensor> on_cpu = testing::random_tensors(Device::cpu(), {100000, 3, 8193}, DType::f32, 3), on_gpu;
  for (const Tensor& x : on_cpu) on_gpu.push_back(to_device(x, cuda));
  const double want = sum_squares_all(on_cpu, Device::cpu()).item();
  EXPECT_NEAR(to_device(sum_squares_all(on_gpu, cuda), Device::cpu()).item(), want, 1e-12 * want);
  NoGradGuard no_grad;
  mul_all_(on_cpu, 0.37);
  mul_all_(on_gpu, 0.37);
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(on_gpu[i], on_cpu[i])) << i;
}

TEST(CudaOps, MatmulAndLinear) {
  TRIREME_REQUIRE_GPU();
  std::vector<OpCase> cases = {
      {"matmul_2d", {{13, 37}, {37, 21}}, binary(&matmul)},
      {"matmul_vec", {{37}, {37, 5}}, binary(&matmul)},
      {"matmul_batched", {{3, 9, 17}, {3, 17, 6}}, binary(&matmul)},
      {"matmul_broadcast_b", {{2, 3, 9, 17}, {17, 6}}, binary(&matmul)},
      {"matmul_broadcast_batch", {{2, 1, 9, 17}, {3, 17, 6}}, binary(&matmul)},
      {"linear_bias", {{4, 7, 33}, {19, 33}, {19}},
       [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); }},
      {"linear", {{5, 33}, {19, 33}}, [](const std::vector<Tensor>& x) { return linear(x[0], x[1]); }},
      {"addmm_", {{13, 37}, {37, 21}, {13, 21}},
       [](const std::vector<Tensor>& x) {
         Tensor out = clone(x[2]);
         addmm_(out, x[0], x[1]);
         return out;
       },
       Domain::any, /*backward=*/false},
      {"addmm_into", {{13, 37}, {37, 21}, {13, 21}},
       [](const std::vector<Tensor>& x) {
         Tensor out = Tensor::empty({13, 21}, x[2].dtype(), x[2].device());
         addmm_into(out, contiguous(x[2]), x[0], transpose(contiguous(transpose(x[1], 0, 1)), 0, 1));
         return out;
       },
       Domain::any, /*backward=*/false},
  };
  for (const OpCase& c : cases) check_cuda_op(c);
}

// GEMMs of a model's sizes, where cuBLASLt takes other algorithms than for the small cases above:
// the layouts of a linear layer's forward, input gradient and weight gradient, an accumulating
// GEMM, and the linear's backward, whose weight-gradient GEMM also makes the bias gradient
// (cuBLASLt's BGRADB epilogue): right against the CPU, and the same bits when run again.
TEST(CudaOps, ModelSizedGemmsAndALinearsBackwardMatchTheCpu) {
  TRIREME_REQUIRE_GPU();
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator gen(5);
    const Tensor x = to_dtype(randn({2048, 1024}, gen, DType::f64), dtype);
    const Tensor w = to_dtype(randn({2048, 1024}, gen, DType::f64), dtype);
    const Tensor b = to_dtype(randn({2048}, gen, DType::f64), dtype);
    const Tensor xg = to_device(x, gpu), wg = to_device(w, gpu), bg = to_device(b, gpu);
    const double tol = tolerance_for(dtype);

    // Sums of 1,024 or 2,048 products: their rounding is judged against the result's typical size.
    auto expect_near = [&](const Tensor& got, const Tensor& want, const char* what) {
      const double rms = std::sqrt(mean(mul(to_dtype(want, DType::f64), to_dtype(want, DType::f64))).item());
      expect_close(mul(to_dtype(got, DType::f64), 1 / rms), mul(to_dtype(want, DType::f64), 1 / rms), tol, what);
    };
    const Tensor y = linear(xg, wg, bg);  // 2 * 2048 * 2048 * 1024 = 8.6e9 operations
    expect_near(y, linear(x, w, b), "linear");
    EXPECT_TRUE(trireme::testing::bitwise_equal(y, linear(xg, wg, bg))) << "linear again";
    const Tensor y_host = to_device(y, cpu);
    expect_near(matmul(y, wg), matmul(y_host, w), "input gradient (g W)");
    const Tensor gw = matmul(transpose(y, 0, 1), xg);
    expect_near(gw, matmul(transpose(y_host, 0, 1), x), "weight gradient (g^T x)");
    EXPECT_TRUE(trireme::testing::bitwise_equal(gw, matmul(transpose(y, 0, 1), xg))) << "weight gradient again";
    Tensor acc = clone(y), acc_host = clone(y_host);
    addmm_(acc, xg, transpose(wg, 0, 1));
    addmm_(acc_host, x, transpose(w, 0, 1));
    expect_near(acc, acc_host, "addmm_");
    // The backward: the weight gradient's product makes the bias gradient too (BGRADB epilogue).
    auto grads = [](Tensor xs, Tensor ws, Tensor bs, const Tensor& r) {
      for (Tensor* t : {&xs, &ws, &bs}) *t = t->detach(), t->set_requires_grad(true);
      sum(mul(linear(xs, ws, bs), r)).backward();
      return std::vector<Tensor>{xs.grad(), ws.grad(), bs.grad()};
    };
    const std::vector<Tensor> on_gpu = grads(xg, wg, bg, to_device(y_host, gpu)), on_cpu = grads(x, w, b, y_host);
    expect_near(on_gpu[0], on_cpu[0], "linear's input gradient");
    expect_near(on_gpu[1], on_cpu[1], "linear's weight gradient");
    expect_near(on_gpu[2], on_cpu[2], "linear's bias gradient");
  }
}

// GELU and its gradient in the GEMM's epilogue (cuBLASLt's GELU_AUX, GELU_AUX_BIAS and DGELU; the
// static mode's folds, graph/gemm_folds.h) against the CPU's unfused calls: the product, GELU's
// input kept for the backward, and the backward's product through GELU's gradient. The epilogue
// applies GELU to the product before rounding, so 16-bit results agree within a rounding of the
// product. Shapes whose rows cuBLASLt cannot take (N not a multiple of 8) run the unfused calls.
TEST(CudaOps, GeluInTheGemmEpilogueMatchesTheCpu) {
  TRIREME_REQUIRE_GPU();
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  struct Shape3 {
    int64_t m, k, n;
    bool bias;
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const Shape3 s : {Shape3{512, 256, 1024, true}, Shape3{300, 96, 384, false}, Shape3{64, 32, 36, true}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " m" + std::to_string(s.m) + " k" + std::to_string(s.k) + " n" +
                   std::to_string(s.n));
      Generator gen(7);
      auto make = [&](const Shape& shape, double scale) { return to_dtype(mul(randn(shape, gen, DType::f64), scale), dtype); };
      const Tensor x = make({s.m, s.k}, 1.0), w = make({s.n, s.k}, 1.0 / std::sqrt(double(s.k)));
      const Tensor b = s.bias ? make({s.n}, 0.5) : Tensor(), grad = make({s.m, s.k}, 1.0);
      const Tensor w2 = make({s.k, s.n}, 1.0 / std::sqrt(double(s.n)));  // the next layer's (in, out) weight
      auto forward = [&](const Device& d, Tensor& out, Tensor& pre) {
        out = Tensor::empty({s.m, s.n}, dtype, d), pre = Tensor::empty({s.m, s.n}, dtype, d);
        const Tensor bias = b.defined() ? to_device(b, d) : Tensor();
        find_kernel<MatmulGeluKernel>("matmul_gelu", d, dtype)(to_device(x, d), transpose(to_device(w, d), 0, 1), bias, out, pre);
      };
      auto backward = [&](const Device& d, const Tensor& pre) {
        Tensor out = Tensor::empty({s.m, s.n}, dtype, d);
        find_kernel<MatmulGeluBackwardKernel>("matmul_gelu_backward", d, dtype)(to_device(grad, d), to_device(w2, d),
                                                                                 to_device(pre, d), out);
        return out;
      };
      Tensor out_gpu, pre_gpu, out_cpu, pre_cpu;
      forward(gpu, out_gpu, pre_gpu);
      forward(cpu, out_cpu, pre_cpu);
      const double tol = tolerance_for(dtype);
      expect_close(pre_gpu, pre_cpu, tol, "GELU's input");
      expect_close(out_gpu, out_cpu, tol, "GELU's output");
      // The backward from the same GELU input on both devices.
      expect_close(backward(gpu, pre_cpu), backward(cpu, pre_cpu), tol, "GELU's input gradient");
      Tensor again, pre_again;
      forward(gpu, again, pre_again);
      EXPECT_TRUE(trireme::testing::bitwise_equal(again, out_gpu)) << "the same bits when run again";
    }
  }
}

TEST(CudaOps, MaxIndicesMatch) {
  TRIREME_REQUIRE_GPU();
  Generator gen(5);
  // Short rows (a thread per row) and long rows (a block per row), both with ties.
  for (int64_t n : {33, 3001}) {
    Tensor x = to_dtype(to_dtype(mul(randn({17, n}, gen), 3.0), DType::i32), DType::f32);
    auto [v_cpu, i_cpu] = max(x, 1);
    auto [v_gpu, i_gpu] = max(to_device(x, Device::cuda(0)), 1);
    expect_close(i_gpu, i_cpu, 0.0, "indices, first maximum wins");
    expect_close(v_gpu, v_cpu, 0.0, "values");
  }
}

TEST(CudaOps, IntegerKernels) {
  TRIREME_REQUIRE_GPU();
  Generator gen(6);
  for (DType dt : {DType::i64, DType::i32}) {
    Tensor a = to_dtype(mul(randn({7, 9}, gen), 100.0), dt), b = to_dtype(mul(randn({9}, gen), 100.0), dt);
    Tensor ga = to_device(a, Device::cuda(0)), gb = to_device(b, Device::cuda(0));
    expect_close(add(ga, gb), add(a, b), 0.0, "int add");
    expect_close(sub(ga, gb), sub(a, b), 0.0, "int sub");
    expect_close(mul(ga, gb), mul(a, b), 0.0, "int mul");
    expect_close(add(ga, 3.0), add(a, 3.0), 0.0, "int add_scalar");
    expect_close(sum(ga, {0}), sum(a, {0}), 0.0, "int sum");
    expect_close(max(ga, 1).first, max(a, 1).first, 0.0, "int max");
  }
}

// Contiguous operands move as 16-byte vectors; a contiguous view that starts off a 16-byte
// boundary, or a length that leaves a tail, must give the same values as the CPU.
TEST(CudaOps, VectorPathTailsAndUnalignedViews) {
  TRIREME_REQUIRE_GPU();
  auto offset_by_one = [](const Tensor& x) { return narrow(x, 0, 1, x.size(0) - 1); };
  std::vector<OpCase> cases = {
      {"gelu_tanh_long", {{4099}}, [](const std::vector<Tensor>& x) { return gelu(x[0], GeluApprox::tanh); }},
      {"gelu_tanh_offset_view", {{1001}},
       [&](const std::vector<Tensor>& x) { return gelu(offset_by_one(x[0]), GeluApprox::tanh); }},
      {"mul_offset_view", {{1001}, {1000}}, [&](const std::vector<Tensor>& x) { return mul(offset_by_one(x[0]), x[1]); }},
      {"add_long", {{8, 1027}, {8, 1027}}, binary(&add)},
      // a row broadcast over the rows (a bias): vectors when the row length allows, else the general path
      {"add_bias_row", {{6, 40}, {40}}, binary(&add)},
      {"mul_bias_row_3d", {{5, 3, 16}, {1, 16}}, binary(&mul)},
      {"sub_bias_row_short", {{4, 12}, {12}}, binary(&sub)},
  };
  for (const OpCase& c : cases) check_cuda_op(c);
  // Casts between f32 and the 16-bit types (autocast's), aligned and not.
  Generator gen(5);
  Tensor x = randn({2051}, gen);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor g = to_device(x, Device::cuda(0));
    expect_close(to_dtype(g, dt), to_dtype(x, dt), 0.0, "f32 -> 16-bit cast");
    expect_close(to_dtype(offset_by_one(g), dt), to_dtype(offset_by_one(x), dt), 0.0, "cast of an offset view");
    expect_close(to_dtype(to_dtype(g, dt), DType::f32), to_dtype(to_dtype(x, dt), DType::f32), 0.0, "16-bit -> f32 cast");
  }
}

TEST(CudaOps, InPlaceOnStridedViews) {
  TRIREME_REQUIRE_GPU();
  Generator gen(4);
  Tensor base = randn({6, 8}, gen);
  Tensor g = to_device(base, Device::cuda(0));
  Tensor c = clone(base);
  Tensor gv = slice(g, 1, 1, 8, 2), cv = slice(c, 1, 1, 8, 2);  // every other column
  Tensor upd = randn({6, 4}, gen);
  add_(gv, to_device(upd, Device::cuda(0)), 0.5);
  add_(cv, upd, 0.5);
  mul_(gv, 3.0);
  mul_(cv, 3.0);
  expect_close(g, c, 1e-6, "in-place ops through a strided view");
}

}  // namespace
}  // namespace trireme
