#include "trireme/kernels/varying_shapes.h"

namespace trireme::kernels {
namespace {
thread_local int scopes = 0;
}  // namespace

VaryingShapes::VaryingShapes() { ++scopes; }
VaryingShapes::~VaryingShapes() { --scopes; }
bool shapes_vary() { return scopes > 0; }

}  // namespace trireme::kernels
