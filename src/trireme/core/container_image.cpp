#include "trireme/core/container_image.h"

#include <cstdlib>

namespace trireme {

std::string container_image() {
  const char* tag = std::getenv(kImageEnv);
  return tag ? tag : "";
}

std::string without_cuda_reason() {
  const std::string image = container_image();
  if (image.empty()) return "trireme was built without CUDA";
  return "this container image, " + image +
         ", has no GPU support; run trireme's GPU image instead (trireme:" TRIREME_VERSION
         "-gpu-cuda<X.Y>-cudnn<N>, docs/CONTAINERS.md)";
}

}  // namespace trireme
