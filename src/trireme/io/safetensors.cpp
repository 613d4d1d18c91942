// safetensors reader and writer (format in safetensors.h).
#include "trireme/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trireme/core/checked.h"
#include "trireme/ops/copy.h"

namespace trireme::io {

using json = nlohmann::json;

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::boolean: return "BOOL";
  }
  TRIREME_FAIL("safetensors: invalid dtype");
}

DType safetensors_dtype_from_name(const std::string& name) {
  static const std::pair<const char*, DType> names[] = {{"F64", DType::f64}, {"F32", DType::f32},
                                                        {"BF16", DType::bf16}, {"F16", DType::f16},
                                                        {"I64", DType::i64}, {"I32", DType::i32},
                                                        {"BOOL", DType::boolean}};
  for (auto& [n, d] : names) {
    if (name == n) return d;
  }
  TRIREME_FAIL("unsupported dtype '", name, "' (trireme reads F64, F32, BF16, F16, I64, I32, BOOL)");
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TRIREME_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' cannot name a tensor");
    TRIREME_CHECK(!header.contains(name), "save_safetensors: tensor name '", name, "' appears twice");
    TRIREME_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    Tensor c = contiguous(to_device(t.detach(), Device::cpu()));
    uint64_t nbytes = uint64_t(c.numel()) * c.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(c.dtype())}, {"shape", c.sizes()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    host.push_back(c);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += h;
  for (const Tensor& c : host) out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::string bytes = serialize_safetensors(tensors, metadata);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TRIREME_CHECK(f.good(), "save_safetensors: cannot open '", path, "' for writing");
  f.write(bytes.data(), std::streamsize(bytes.size()));
  f.flush();
  TRIREME_CHECK(f.good(), "save_safetensors: writing '", path, "' failed (disk full?)");
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what) {
  auto fail = [&](auto&&... parts) -> void { TRIREME_FAIL(what, ": not a valid safetensors file: ", parts...); };
  if (bytes.size() < 8) fail("only ", bytes.size(), " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  if (n > kSafetensorsMaxHeader) fail("header length ", n, " is over the limit of ", kSafetensorsMaxHeader, " bytes");
  if (n > bytes.size() - 8) fail("header length ", n, " runs past the end of the file (", bytes.size(), " bytes)");
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(n));
  } catch (const json::exception& e) {
    fail("the header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) fail("the header is not a JSON object");

  SafetensorsFile file;
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  struct Span { uint64_t begin, end; std::string name; };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ value for '", m.key(), "' is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail("entry '", name, "' needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) fail("entry '", name, "': dtype is not a string");
    DType dtype;
    try {
      dtype = safetensors_dtype_from_name(e["dtype"].get<std::string>());
    } catch (const Error& err) {
      fail("entry '", name, "': ", err.what());
    }
    if (!e["shape"].is_array()) fail("entry '", name, "': shape is not an array");
    // Sizes come from the file: every product is checked, and the byte count must match the
    // offsets, which must lie inside the data, before anything is allocated.
    Shape shape;
    int64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)) ||
          d.get<int64_t>() < 0)
        fail("entry '", name, "': shape has a negative, non-integer or too large size");
      shape.push_back(d.get<int64_t>());
      numel = checked_mul(numel, shape.back(), what, ": not a valid safetensors file: entry '", name,
                          "': the element count of shape ", shape);
    }
    const int64_t nbytes = checked_mul(numel, int64_t(dtype_size(dtype)), what, ": not a valid safetensors file: entry '",
                                       name, "': the byte count of ", dtype_name(dtype), " x ", shape);
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("entry '", name, "': data_offsets must be two non-negative integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail("entry '", name, "': data_offsets [", begin, ", ", end, "] are out of bounds (data is ", data_size, " bytes)");
    if (end - begin != uint64_t(nbytes))
      fail("entry '", name, "': ", end - begin, " bytes do not match ", dtype_name(dtype), " x ", shape, " = ", nbytes,
           " bytes");
    Tensor t = Tensor::empty(shape, dtype, Device::cpu());
    if (end > begin) std::memcpy(t.data_ptr(), data + begin, end - begin);
    file.tensors.emplace(name, t);
    spans.push_back({begin, end, name});
  }
  // The data must be covered exactly: sorted spans touch end to begin, from 0 to the end.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const Span& s : spans) {
    if (s.begin < cursor) fail("tensor '", s.name, "' overlaps the previous tensor's bytes");
    if (s.begin > cursor) fail("there is a hole of ", s.begin - cursor, " bytes before tensor '", s.name, "'");
    cursor = s.end;
    file.order.push_back(s.name);
  }
  if (cursor != data_size) fail(data_size - cursor, " bytes after the last tensor belong to no tensor");
  return file;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TRIREME_CHECK(f.good(), "cannot open '", path, "': no such file or not readable");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_safetensors(ss.str(), path);
}

}  // namespace trireme::io
