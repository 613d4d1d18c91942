// Marks kernel calls whose shapes change from one call to the next: eager generation, whose
// sequence grows a token a call. Kernels that build a plan per shape and keep it (cuDNN's
// attention: about 0.2 s a new shape) run without one on this thread while a scope lives.
//
//   { kernels::VaryingShapes varying; logits = model.forward(context); }
#pragma once

namespace trireme::kernels {

class VaryingShapes {
 public:
  VaryingShapes();
  ~VaryingShapes();
  VaryingShapes(const VaryingShapes&) = delete;
  VaryingShapes& operator=(const VaryingShapes&) = delete;
};

// Whether a VaryingShapes scope lives on this thread.
bool shapes_vary();

}  // namespace trireme::kernels
