// Shared by tests that count which kernels run: a kernel tape that counts the calls on its
// thread by op while alive, and lets them run.
#pragma once

#include <map>
#include <string>

#include "trireme/kernels/kernel_tape.h"

namespace trireme::testing {

class CountingTape final : public ObservingKernelTape {
 public:
  std::map<std::string, int> calls;

 private:
  void observe(const KernelCallRecord& call) override { ++calls[std::string(call.op)]; }
};

}  // namespace trireme::testing
