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
