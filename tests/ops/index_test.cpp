// index_select and embedding through the op harness, repeated-index accumulation, errors, determinism.
#include <gtest/gtest.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "expect_error.h"
#include "op_harness.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;
using namespace trireme::testing;

namespace {

using trireme::testing::expect_error;

// out[..., i, ...] = x[..., index[i], ...] with loops over a row-major output index.
Tensor naive_index_select(const Tensor& x, int64_t dim, const std::vector<int64_t>& index) {
  Shape s = x.sizes();
  s[size_t(dim)] = int64_t(index.size());
  Tensor out = zeros(s, DType::f64);
  double* o = out.data<double>();
  Shape idx(s.size(), 0);
  for (int64_t n = 0; n < out.numel(); ++n) {
    Shape src = idx;
    src[size_t(dim)] = index[size_t(idx[size_t(dim)])];
    o[n] = x.at(src);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// out[t, :] = weight[ids[t], :].
Tensor naive_embedding(const Tensor& weight, const Tensor& ids) {
  const int64_t dim = weight.size(1);
  Shape s = ids.sizes();
  s.push_back(dim);
  Tensor out = zeros(s, DType::f64);
  double* o = out.data<double>();
  const auto id = to_dtype(ids, DType::i64).to_vector<int64_t>();
  for (size_t t = 0; t < id.size(); ++t) {
    for (int64_t j = 0; j < dim; ++j) o[int64_t(t) * dim + j] = weight.at({id[t], j});
  }
  return out;
}


}  // namespace

TEST(IndexSelect, Dims) {
  // Repeated indices: the backward must add both gradients into the same row.
  const std::vector<int64_t> rows = {2, 0, 2, 3};
  check_op({.name = "index_select dim 0 (i64)", .shapes = {{4, 3}},
            .fn = [rows](const Inputs& x) { return index_select(x[0], 0, from_vector<int64_t>(rows, {4})); },
            .reference = [rows](const Inputs& x) { return naive_index_select(x[0], 0, rows); }});
  const std::vector<int64_t> cols = {1, 1, 0};
  check_op({.name = "index_select dim 1 (i32)", .shapes = {{2, 3, 2}},
            .fn = [cols](const Inputs& x) {
              return index_select(x[0], 1, from_vector<int32_t>({1, 1, 0}, {3}));
            },
            .reference = [cols](const Inputs& x) { return naive_index_select(x[0], 1, cols); }});
  check_op({.name = "index_select dim -1", .shapes = {{3, 4}},
            .fn = [](const Inputs& x) { return index_select(x[0], -1, from_vector<int64_t>({3, 0}, {2})); },
            .reference = [](const Inputs& x) { return naive_index_select(x[0], 1, {3, 0}); }});
  check_op({.name = "index_select transposed input", .shapes = {{3, 4}},
            .fn = [](const Inputs& x) { return index_select(transpose(x[0], 0, 1), 0, from_vector<int64_t>({3, 1, 3}, {3})); },
            .reference = [](const Inputs& x) { return naive_index_select(contiguous(transpose(x[0], 0, 1)), 0, {3, 1, 3}); }});
}

TEST(IndexSelect, Errors) {
  Tensor x = zeros({5, 3});
  expect_error([&] { index_select(x, 0, from_vector<int64_t>({1, 7}, {2})); }, {"index_select", "7", "5"});
  expect_error([&] { index_select(x, 1, from_vector<int32_t>({-1}, {1})); }, {"index_select", "-1", "3"});
  expect_error([&] { index_select(x, 0, zeros({2})); }, {"index_select", "i64 or i32"});
  expect_error([&] { index_select(x, 0, from_vector<int64_t>({0, 1}, {1, 2})); }, {"index_select", "1-D"});
  expect_error([&] { index_select(x, 2, from_vector<int64_t>({0}, {1})); }, {"index_select"});
}

TEST(Embedding, RepeatedIdsAccumulate) {
  auto make = [](Generator& g) {
    return Inputs{random_f64({6, 4}, g), from_vector<int64_t>({1, 3, 1, 0, 5, 1}, {2, 3})};
  };
  check_op({.name = "embedding i64", .make_inputs = make,
            .fn = [](const Inputs& x) { return embedding(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_embedding(x[0], x[1]); }});
  check_op({.name = "embedding i32 1-D",
            .make_inputs = [](Generator& g) { return Inputs{random_f64({5, 3}, g), from_vector<int32_t>({4, 4, 0}, {3})}; },
            .fn = [](const Inputs& x) { return embedding(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_embedding(x[0], x[1]); }});

  // The gradient of id 1 (used three times) is the sum of its three output gradients.
  Generator gen(5);
  Tensor w = randn({6, 4}, gen).set_requires_grad(true);
  Tensor ids = from_vector<int64_t>({1, 3, 1, 0, 5, 1}, {6});
  Tensor g = randn({6, 4}, gen);
  embedding(w, ids).backward(g);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_NEAR(w.grad().at({1, j}), g.at({0, j}) + g.at({2, j}) + g.at({5, j}), 1e-6);
    EXPECT_EQ(w.grad().at({2, j}), 0.0);
  }
}

TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
#ifdef _OPENMP
  Generator gen(9);
  const int64_t vocab = 37, dim = 96, n = 3000;  // large enough for the parallel path
  Tensor w = randn({vocab, dim}, gen);
  std::vector<int64_t> idv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idv[size_t(i)] = (i * 7919) % vocab;
  Tensor ids = from_vector<int64_t>(idv, {n});
  Tensor g = randn({n, dim}, gen);
  auto grad_with = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor leaf = w.detach();
    leaf.set_requires_grad(true);
    embedding(leaf, ids).backward(g);
    omp_set_num_threads(saved);
    return leaf.grad().to_vector<float>();
  };
  const auto one = grad_with(1), many = grad_with(4);
  EXPECT_EQ(one, many);  // bitwise
#endif
}

TEST(Embedding, Errors) {
  Tensor w = zeros({10, 4});
  expect_error([&] { embedding(w, from_vector<int64_t>({3, 10}, {2})); }, {"embedding", "10", "V = 10"});
  expect_error([&] { embedding(w, from_vector<int32_t>({-2}, {1})); }, {"embedding", "-2"});
  expect_error([&] { embedding(w, zeros({2})); }, {"embedding", "i64 or i32"});
  expect_error([&] { embedding(zeros({10}), from_vector<int64_t>({0}, {1})); }, {"embedding", "2-D", "[10]"});
}
