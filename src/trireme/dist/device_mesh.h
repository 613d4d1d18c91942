// DeviceMesh: the job's ranks laid out as an n-dimensional grid (e.g. dp x tp x pp), with one
// process group per dimension holding the ranks that differ only along it.
//
//   // 8 ranks as dp=2, pp=2, tp=2; the last dimension varies fastest, so tp groups are
//   // neighbouring ranks ({0,1}, {2,3}, ...), which keeps tensor parallelism within a node.
//   DeviceMesh mesh(world, {{"dp", 2}, {"pp", 2}, {"tp", 2}});
//   mesh.group("tp")->all_reduce(partial_sums)->wait();
//   int stage = mesh.coordinate("pp");
//
//   // The same mesh from a string; or the rank order given separately, fastest-varying first
//   // (as Megatron's "tp-cp-ep-dp-pp"): here tp varies fastest, then dp, then pp.
//   DeviceMesh same(world, "dp=2,pp=2,tp=2");
//   DeviceMesh reordered(world, "dp=2,pp=2,tp=2", "tp-dp-pp");   // tp {0,1}, dp {0,2}, pp {0,4}
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trireme/dist/process_group.h"

namespace trireme::dist {

struct MeshDim {
  std::string name;
  int size = 1;
};

// Pure layout arithmetic (row-major: the last dimension varies fastest).
std::vector<int> mesh_coordinates(const std::vector<int>& shape, int rank);
int mesh_rank(const std::vector<int>& shape, const std::vector<int>& coordinates);
// The ranks that share every coordinate of `rank` except along `dim`, in order along `dim`.
std::vector<int> mesh_group_ranks(const std::vector<int>& shape, int dim, int rank);

// "dp=2,pp=1,tp=2" (also "dp=2 x pp=1 x tp=2"): the dimensions, slowest-varying first. Throws
// on a malformed spec, naming it.
std::vector<MeshDim> parse_mesh_dims(const std::string& spec);
// The dimensions laid out in `order` ("tp-dp-pp": fastest-varying first, naming each dimension
// once), returned slowest first as DeviceMesh takes them. An empty order keeps dims as they are.
std::vector<MeshDim> order_mesh_dims(const std::vector<MeshDim>& dims, const std::string& order);

class DeviceMesh {
 public:
  // The product of the sizes must be world->size(). Every rank of world calls this: it
  // creates this rank's group along each dimension (size-1 dimensions included, so code can
  // use mesh.group("pp") whether or not pipeline parallelism is on).
  DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<MeshDim> dims);
  // From a spec string and an optional rank order (parse_mesh_dims, order_mesh_dims).
  DeviceMesh(std::shared_ptr<ProcessGroup> world, const std::string& spec, const std::string& order = "");

  // dims() lists the dimensions in their layout order: slowest-varying first.
  int ndim() const { return static_cast<int>(dims_.size()); }
  const std::vector<MeshDim>& dims() const { return dims_; }
  std::vector<int> shape() const;
  int dim_index(const std::string& name) const;  // throws naming the known dimensions
  int size(const std::string& name) const;
  int coordinate(const std::string& name) const;  // this rank's position along `name`
  const std::shared_ptr<ProcessGroup>& group(const std::string& name) const;
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  std::vector<MeshDim> dims_;
  std::vector<int> coordinates_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace trireme::dist
