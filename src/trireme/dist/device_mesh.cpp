// DeviceMesh: rank <-> coordinate arithmetic and one sub-group per mesh dimension.
#include "trireme/dist/device_mesh.h"

#include <algorithm>

namespace trireme::dist {

namespace {

int shape_product(const std::vector<int>& shape) {
  int n = 1;
  for (int s : shape) n *= s;
  return n;
}

}  // namespace

std::vector<int> mesh_coordinates(const std::vector<int>& shape, int rank) {
  int n = shape_product(shape);
  TRIREME_CHECK(rank >= 0 && rank < n, "mesh: rank ", rank, " is outside a mesh of ", n, " ranks");
  std::vector<int> coords(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coords[d] = rank % shape[d];
    rank /= shape[d];
  }
  return coords;
}

int mesh_rank(const std::vector<int>& shape, const std::vector<int>& coordinates) {
  TRIREME_CHECK(coordinates.size() == shape.size(), "mesh: ", coordinates.size(), " coordinates for a ",
                shape.size(), "-dimensional mesh");
  int rank = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    TRIREME_CHECK(coordinates[d] >= 0 && coordinates[d] < shape[d], "mesh: coordinate ", coordinates[d],
                  " is outside dimension ", d, " of size ", shape[d]);
    rank = rank * shape[d] + coordinates[d];
  }
  return rank;
}

std::vector<int> mesh_group_ranks(const std::vector<int>& shape, int dim, int rank) {
  TRIREME_CHECK(dim >= 0 && dim < static_cast<int>(shape.size()), "mesh: dimension ", dim, " is outside a ",
                shape.size(), "-dimensional mesh");
  std::vector<int> coords = mesh_coordinates(shape, rank);
  std::vector<int> ranks;
  for (int i = 0; i < shape[static_cast<size_t>(dim)]; ++i) {
    coords[static_cast<size_t>(dim)] = i;
    ranks.push_back(mesh_rank(shape, coords));
  }
  return ranks;
}

std::vector<MeshDim> parse_mesh_dims(const std::string& spec) {
  std::vector<MeshDim> dims;
  std::string item;
  auto take = [&] {
    if (item.empty()) return;
    auto eq = item.find('=');
    TRIREME_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "mesh spec '", spec, "': '", item,
                  "' is not NAME=SIZE");
    std::string name = item.substr(0, eq), size = item.substr(eq + 1);
    TRIREME_CHECK(size.find_first_not_of("0123456789") == std::string::npos && size.size() < 9, "mesh spec '", spec,
                  "': the size of '", name, "' is not a number: '", size, "'");
    dims.push_back({name, std::stoi(size)});
    item.clear();
  };
  for (size_t i = 0; i <= spec.size(); ++i) {
    char c = i < spec.size() ? spec[i] : ',';
    // Separators: ',' or ' x ' (an 'x' alone between spaces, or beside one, ends the item).
    bool x_separator = c == 'x' && (i == 0 || spec[i - 1] == ' ') && (i + 1 == spec.size() || spec[i + 1] == ' ');
    if (c == ',' || c == ' ' || c == '*' || x_separator) {
      take();
    } else {
      item += c;
    }
  }
  TRIREME_CHECK(!dims.empty(), "mesh spec '", spec, "' names no dimension (write e.g. \"dp=2,pp=1,tp=2\")");
  return dims;
}

std::vector<MeshDim> order_mesh_dims(const std::vector<MeshDim>& dims, const std::string& order) {
  if (order.empty()) return dims;
  std::vector<std::string> names;
  std::string item;
  for (size_t i = 0; i <= order.size(); ++i) {
    if (i == order.size() || order[i] == '-' || order[i] == ',') {
      if (!item.empty()) names.push_back(item);
      item.clear();
    } else {
      item += order[i];
    }
  }
  std::string known;
  for (size_t i = 0; i < dims.size(); ++i) known += (i ? ", " : "") + dims[i].name;
  TRIREME_CHECK(names.size() == dims.size(), "mesh order '", order, "' must name each of the ", dims.size(),
                " dimensions (", known, ") once");
  std::vector<MeshDim> out;
  for (size_t i = names.size(); i-- > 0;) {  // fastest first in the string; slowest first here
    auto it = std::find_if(dims.begin(), dims.end(), [&](const MeshDim& d) { return d.name == names[i]; });
    TRIREME_CHECK(it != dims.end(), "mesh order '", order, "': no dimension '", names[i], "' (the mesh has ", known, ")");
    for (const auto& o : out)
      TRIREME_CHECK(o.name != names[i], "mesh order '", order, "' names '", names[i], "' twice");
    out.push_back(*it);
  }
  return out;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, const std::string& spec, const std::string& order)
    : DeviceMesh(std::move(world), order_mesh_dims(parse_mesh_dims(spec), order)) {}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<MeshDim> dims)
    : world_(std::move(world)), dims_(std::move(dims)) {
  TRIREME_CHECK(world_, "DeviceMesh: a world process group is required");
  TRIREME_CHECK(!dims_.empty(), "DeviceMesh: at least one dimension is required");
  std::string described;
  for (size_t i = 0; i < dims_.size(); ++i) {
    TRIREME_CHECK(dims_[i].size >= 1, "DeviceMesh: dimension '", dims_[i].name, "' has size ", dims_[i].size);
    for (size_t j = 0; j < i; ++j)
      TRIREME_CHECK(dims_[j].name != dims_[i].name, "DeviceMesh: dimension '", dims_[i].name, "' appears twice");
    described += (i ? " x " : "") + dims_[i].name + "=" + std::to_string(dims_[i].size);
  }
  TRIREME_CHECK(shape_product(shape()) == world_->size(), "DeviceMesh: ", described, " holds ",
                shape_product(shape()), " ranks but the world has ", world_->size());
  coordinates_ = mesh_coordinates(shape(), world_->rank());
  for (int d = 0; d < ndim(); ++d) {
    std::vector<int> ranks = mesh_group_ranks(shape(), d, world_->rank());
    groups_.push_back(world_->new_group(ranks, "mesh." + dims_[static_cast<size_t>(d)].name));
  }
}

std::vector<int> DeviceMesh::shape() const {
  std::vector<int> s;
  for (const auto& d : dims_) s.push_back(d.size);
  return s;
}

int DeviceMesh::dim_index(const std::string& name) const {
  std::string known;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name == name) return static_cast<int>(i);
    known += (i ? ", " : "") + dims_[i].name;
  }
  TRIREME_FAIL("DeviceMesh: no dimension '", name, "' (the mesh has ", known, ")");
}

int DeviceMesh::size(const std::string& name) const { return dims_[static_cast<size_t>(dim_index(name))].size; }
int DeviceMesh::coordinate(const std::string& name) const {
  return coordinates_[static_cast<size_t>(dim_index(name))];
}
const std::shared_ptr<ProcessGroup>& DeviceMesh::group(const std::string& name) const {
  return groups_[static_cast<size_t>(dim_index(name))];
}

}  // namespace trireme::dist
