// safetensors files, written and read following the published format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the tensors' bytes, contiguous and in offset order.
//
//   save_safetensors("model.safetensors", {{"wte", wte}, {"wpe", wpe}}, {{"step", "10"}});
//   SafetensorsFile f = load_safetensors("model.safetensors");
//   Tensor wte = f.tensors.at("wte");
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::io {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;          // CPU tensors
  std::vector<std::string> order;                  // names in data-offset order
  std::map<std::string, std::string> metadata;
};

// The reader refuses headers larger than this (the reference implementation's limit is 100 MB).
inline constexpr uint64_t kSafetensorsMaxHeader = 100ull * 1000 * 1000;

// Writes tensors (any device, any layout; copied to contiguous CPU) in the given order.
// Names must be unique and not "__metadata__". Not atomic by itself: see io/checkpoint for that.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a file: every error names the file and what is wrong (header length over
// the limit or past the end of the file, JSON that is not an object of entries, unknown dtype,
// negative shape, byte length != dtype size × elements, offsets out of bounds, overlapping, or
// leaving holes, trailing bytes).
SafetensorsFile load_safetensors(const std::string& path);
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what = "buffer");
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// safetensors dtype names ("F32", "BF16", "I64", "BOOL", ...).
std::string safetensors_dtype_name(DType dtype);
DType safetensors_dtype_from_name(const std::string& name);  // throws on unknown names

}  // namespace trireme::io
