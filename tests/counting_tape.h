// Shared by tests that count which kernels run: a kernel tape that counts the calls on its
// thread by op while alive, and lets them run.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "trireme/kernels/kernel_tape.h"

namespace trireme::testing {

class CountingTape final : public KernelTape {
 public:
  CountingTape() : outer_(active_kernel_tape()) { active_kernel_tape() = this; }
  ~CountingTape() override { active_kernel_tape() = outer_; }
  CountingTape(const CountingTape&) = delete;
  CountingTape& operator=(const CountingTape&) = delete;
  bool record(KernelCallRecord call) override {
    ++calls[std::string(call.op)];
    return true;
  }
  void begin_kernel() override { ++depth_; }
  void end_kernel() override { --depth_; }
  bool in_kernel() const override { return depth_ > 0; }
  void refresh_next_call(std::type_index, std::function<void(void*)>) override {}
  void bind_u64(uint64_t, std::function<uint64_t()>) override {}
  void on_replay(std::function<void()>) override {}

  std::map<std::string, int> calls;

 private:
  KernelTape* outer_;
  int depth_ = 0;
};

}  // namespace trireme::testing
