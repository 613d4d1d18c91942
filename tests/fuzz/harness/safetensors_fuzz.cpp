// parse_safetensors on arbitrary bytes: it either refuses them with trireme::Error or returns
// tensors whose bytes lie inside the buffer (ASan checks every byte read below), and what it
// returns serializes to a file that parses back to the same names, dtypes and shapes.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "trireme/core/error.h"
#include "trireme/io/safetensors.h"

using namespace trireme;

volatile uint64_t g_sink;  // keeps the reads of every tensor byte from being optimised away

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  io::SafetensorsFile file;
  try {
    file = io::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  FUZZ_REQUIRE(file.order.size() == file.tensors.size(), "order lists every tensor once");
  uint64_t sum = 0;
  for (const auto& [name, t] : file.tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    const size_t nbytes = size_t(t.numel()) * t.element_size();
    FUZZ_REQUIRE(nbytes <= size, "a tensor's bytes come from the file");
    for (size_t i = 0; i < nbytes; ++i) sum += p[i];
  }
  const io::SafetensorsFile again = io::parse_safetensors(io::serialize_safetensors([&] {
    std::vector<std::pair<std::string, Tensor>> named;
    for (const std::string& n : file.order) named.emplace_back(n, file.tensors.at(n));
    return named;
  }(), file.metadata), "round trip");
  FUZZ_REQUIRE(again.order == file.order && again.metadata == file.metadata, "round trip keeps names and metadata");
  for (const auto& [name, t] : file.tensors) {
    const Tensor& u = again.tensors.at(name);
    FUZZ_REQUIRE(u.dtype() == t.dtype() && u.sizes() == t.sizes(), "round trip keeps dtype and shape");
  }
  g_sink = sum;
  return 0;
}
