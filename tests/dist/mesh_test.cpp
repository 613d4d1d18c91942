// Device-mesh layout arithmetic, and the "backend X does not support Y" error.
#include <gtest/gtest.h>

#include "trireme/dist/device_mesh.h"

using namespace trireme;
using namespace trireme::dist;

TEST(DeviceMesh, CoordinatesAreRowMajor) {
  std::vector<int> shape = {2, 3, 2};  // dp, pp, tp
  EXPECT_EQ(mesh_coordinates(shape, 0), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(mesh_coordinates(shape, 1), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(mesh_coordinates(shape, 7), (std::vector<int>{1, 0, 1}));
  for (int r = 0; r < 12; ++r) EXPECT_EQ(mesh_rank(shape, mesh_coordinates(shape, r)), r);
  EXPECT_THROW(mesh_coordinates(shape, 12), Error);
}

TEST(DeviceMesh, GroupsVaryOneDimension) {
  std::vector<int> shape = {2, 3, 2};
  EXPECT_EQ(mesh_group_ranks(shape, 2, 7), (std::vector<int>{6, 7}));       // tp: neighbours
  EXPECT_EQ(mesh_group_ranks(shape, 1, 7), (std::vector<int>{7, 9, 11}));   // pp
  EXPECT_EQ(mesh_group_ranks(shape, 0, 7), (std::vector<int>{1, 7}));       // dp
  // Every rank is in exactly one group per dimension, and the groups partition the world.
  for (int d = 0; d < 3; ++d) {
    std::vector<int> seen(12, 0);
    for (int r = 0; r < 12; ++r) {
      auto g = mesh_group_ranks(shape, d, r);
      EXPECT_EQ(static_cast<int>(g.size()), shape[static_cast<size_t>(d)]);
      EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
      if (g[0] == r) for (int m : g) ++seen[static_cast<size_t>(m)];
    }
    EXPECT_EQ(seen, std::vector<int>(12, 1));
  }
}

namespace {

// A backend that implements nothing: the base class's errors show through.
class NothingGroup : public ProcessGroup {
 public:
  NothingGroup() : ProcessGroup(0, 1) {}
  std::string backend_name() const override { return "nothing"; }
};

}  // namespace

TEST(ProcessGroup, UnsupportedCallsSayWhichBackendAndOp) {
  NothingGroup g;
  try {
    g.all_reduce(Tensor::empty({2}, DType::f32));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "backend nothing does not support all_reduce");
  }
  EXPECT_THROW(g.barrier(), Error);
  // A mesh whose world cannot make sub-groups says so too.
  auto world = std::make_shared<NothingGroup>();
  try {
    DeviceMesh mesh(world, {{"dp", 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "backend nothing does not support new_group");
  }
  EXPECT_THROW(DeviceMesh(world, {{"dp", 2}}), Error);  // 2 ranks in a world of 1
}

TEST(DeviceMesh, SpecStringsParse) {
  auto dims = parse_mesh_dims("dp=2,pp=1,tp=2");
  ASSERT_EQ(dims.size(), 3u);
  EXPECT_EQ(dims[0].name, "dp");
  EXPECT_EQ(dims[2].size, 2);
  auto spaced = parse_mesh_dims("dp=2 x pp=3 x tp=4");
  ASSERT_EQ(spaced.size(), 3u);
  EXPECT_EQ(spaced[1].name, "pp");
  EXPECT_EQ(spaced[1].size, 3);
  EXPECT_EQ(parse_mesh_dims("expert=2,x=3")[1].name, "x");  // 'x' inside a name is no separator
  EXPECT_THROW(parse_mesh_dims(""), Error);
  EXPECT_THROW(parse_mesh_dims("dp"), Error);
  EXPECT_THROW(parse_mesh_dims("dp=two"), Error);
  // Order: fastest first in the string, slowest first in the result.
  auto ordered = order_mesh_dims(dims, "tp-dp-pp");
  EXPECT_EQ(ordered[0].name, "pp");
  EXPECT_EQ(ordered[1].name, "dp");
  EXPECT_EQ(ordered[2].name, "tp");
  EXPECT_THROW(order_mesh_dims(dims, "tp-dp"), Error);
  EXPECT_THROW(order_mesh_dims(dims, "tp-dp-ep"), Error);
  EXPECT_THROW(order_mesh_dims(dims, "tp-tp-dp"), Error);
}

namespace {

// A world that records the groups the mesh asks for, without any processes.
class RecordingGroup : public ProcessGroup {
 public:
  RecordingGroup(int rank, int size, std::vector<std::vector<int>>* made) : ProcessGroup(rank, size), made_(made) {}
  std::string backend_name() const override { return "recording"; }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string&) override {
    made_->push_back(ranks);
    int me = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
    return std::make_shared<RecordingGroup>(me, static_cast<int>(ranks.size()), made_);
  }

 private:
  std::vector<std::vector<int>>* made_;
};

}  // namespace

TEST(DeviceMesh, RankOrderFromAString) {
  // 8 ranks, dp=2 pp=2 tp=2. Default order: tp fastest, then pp, then dp.
  std::vector<std::vector<int>> made;
  DeviceMesh plain(std::make_shared<RecordingGroup>(5, 8, &made), "dp=2,pp=2,tp=2");
  EXPECT_EQ(made, (std::vector<std::vector<int>>{{1, 5}, {5, 7}, {4, 5}}));  // dp, pp, tp groups of rank 5
  EXPECT_EQ(plain.coordinate("dp"), 1);
  EXPECT_EQ(plain.coordinate("pp"), 0);
  EXPECT_EQ(plain.coordinate("tp"), 1);
  // "tp-dp-pp": tp fastest, then dp, then pp: rank 5 = tp 1 + 2 * (dp 0) + 4 * (pp 1).
  made.clear();
  DeviceMesh mesh(std::make_shared<RecordingGroup>(5, 8, &made), "dp=2,pp=2,tp=2", "tp-dp-pp");
  EXPECT_EQ(mesh.coordinate("tp"), 1);
  EXPECT_EQ(mesh.coordinate("dp"), 0);
  EXPECT_EQ(mesh.coordinate("pp"), 1);
  EXPECT_EQ(mesh.group("tp")->size(), 2);
  EXPECT_EQ(made, (std::vector<std::vector<int>>{{1, 5}, {5, 7}, {4, 5}}));  // pp, dp, tp groups of rank 5
  EXPECT_THROW(DeviceMesh(std::make_shared<RecordingGroup>(0, 8, &made), "dp=2,tp=2"), Error);  // 4 != 8
}
