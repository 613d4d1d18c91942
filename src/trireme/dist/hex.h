// Bytes as lowercase hex and back: how binary handles (an NCCL id, a CUDA IPC handle) travel
// through the store, which carries strings.
#pragma once

#include <cstddef>
#include <string>

namespace trireme::dist {

std::string to_hex(const void* data, size_t n);
// False (data untouched past what was read) when s is not 2 n hex digits.
bool from_hex(const std::string& s, void* data, size_t n);

}  // namespace trireme::dist
