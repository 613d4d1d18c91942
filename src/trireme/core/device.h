// Devices: a type (CPU now, CUDA later) and an index.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace trireme {

enum class DeviceType : uint8_t { cpu, cuda };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"
  friend bool operator==(const Device&, const Device&) = default;
};

inline const char* device_type_name(DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; }
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace trireme
