// The trireme container image a process runs in (container/Containerfile.*, docs/CONTAINERS.md),
// so that `trireme env` can name it and a refusal can say which image to use instead.
#pragma once

#include <string>

namespace trireme {

// Set by trireme's images to their own tag, e.g. trireme:0.1.0-cpu-debian12.
inline constexpr const char* kImageEnv = "TRIREME_IMAGE";

// The tag of the trireme image this process runs in; "" outside one.
std::string container_image();

// Why a build without CUDA cannot use a GPU, naming the GPU image when this is a CPU image.
std::string without_cuda_reason();

}  // namespace trireme
