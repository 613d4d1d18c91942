// Data loader: windows and targets, determinism, rank slices, resume, permutation property.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "trireme/core/error.h"
#include "trireme/io/data_loader.h"

namespace trireme::io {
namespace {

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

std::vector<int64_t> rows(const Tensor& t) { return t.to_vector<int64_t>(); }

TEST(DataLoader, PermutationIsABijection) {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 100ull, 1000ull}) {
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(permute_index(i, n, 42, 0));
    EXPECT_EQ(seen.size(), n);
    EXPECT_LT(*seen.rbegin(), n);
  }
  // Different keys (epochs) and seeds give different orders.
  int same_key = 0, same_seed = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    same_key += permute_index(i, 100, 1, 0) == permute_index(i, 100, 1, 1);
    same_seed += permute_index(i, 100, 1, 0) == permute_index(i, 100, 2, 0);
  }
  EXPECT_LT(same_key, 20);
  EXPECT_LT(same_seed, 20);
}

TEST(DataLoader, TargetsAreInputsShiftedByOne) {
  DataLoader loader(iota_tokens(50), 8, 7);
  EXPECT_EQ(loader.num_windows(), 42);
  Batch b = loader.batch(3, 4);
  EXPECT_EQ(b.inputs.sizes(), (Shape{4, 8}));
  EXPECT_EQ(b.inputs.dtype(), DType::i64);
  auto x = rows(b.inputs), y = rows(b.targets);
  for (int r = 0; r < 4; ++r) {
    int64_t start = loader.sample_start(3 * 4 + r);
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(x[r * 8 + t], start + t);
      EXPECT_EQ(y[r * 8 + t], start + t + 1);
    }
  }
}

TEST(DataLoader, EachEpochVisitsEveryWindowOnce) {
  DataLoader loader(iota_tokens(40), 4, 3);
  const int64_t n = loader.num_windows();
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> starts;
    for (int64_t i = 0; i < n; ++i) starts.insert(loader.sample_start(epoch * n + i));
    EXPECT_EQ(int64_t(starts.size()), n);
  }
}

TEST(DataLoader, DeterministicAndResumable) {
  DataLoader a(iota_tokens(1000), 16, 1234), b(iota_tokens(1000), 16, 1234), c(iota_tokens(1000), 16, 99);
  // A fresh loader asked for step 57 gives what a loader that went through steps 0..56 gives:
  // there is no hidden state, so resuming needs only (seed, step).
  for (int64_t step = 0; step < 57; ++step) a.batch(step, 8);
  EXPECT_EQ(rows(a.batch(57, 8).inputs), rows(b.batch(57, 8).inputs));
  EXPECT_NE(rows(a.batch(57, 8).inputs), rows(c.batch(57, 8).inputs));
}

TEST(DataLoader, RankSlicesConcatenateToTheWholeBatch) {
  DataLoader loader(iota_tokens(500), 10, 5);
  for (int64_t world : {1, 2, 4, 8}) {
    for (int64_t step : {0, 1, 17}) {
      auto whole = rows(loader.batch(step, 8).inputs);
      std::vector<int64_t> joined;
      for (int64_t rank = 0; rank < world; ++rank) {
        Batch part = loader.batch(step, 8, rank, world);
        EXPECT_EQ(part.inputs.size(0), 8 / world);
        auto r = rows(part.inputs);
        joined.insert(joined.end(), r.begin(), r.end());
      }
      EXPECT_EQ(joined, whole) << "world " << world << " step " << step;
    }
  }
}

TEST(DataLoader, RefusesBadArguments) {
  EXPECT_THROW(DataLoader(iota_tokens(8), 8, 0), Error);  // needs block_size + 1 tokens
  DataLoader loader(iota_tokens(100), 8, 0);
  EXPECT_THROW(loader.batch(0, 6, 0, 4), Error);  // 6 does not divide over 4 ranks
  EXPECT_THROW(loader.batch(0, 8, 4, 4), Error);
  EXPECT_THROW(loader.batch(-1, 8), Error);
}

}  // namespace
}  // namespace trireme::io
