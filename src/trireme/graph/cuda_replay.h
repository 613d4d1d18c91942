// The replay of an Executable on a CUDA device as CUDA graphs (docs/STATIC_GRAPH.md, "CUDA
// graphs"). At the first replay the kernel calls are captured on a capture stream into CUDA
// graphs: one per run of calls that can be captured, separated by the calls that run outside
// (collectives and transfers, which wait on the host; calls on another device; a call whose
// capture failed, named once on stderr). Each replay then copies the inputs into the graphs'
// fixed input buffers, writes the scalars that change per step (AdamW's, the dropout streams:
// Note [scalars in device memory]) into one device buffer, launches the graphs and runs the calls
// between them in order on the current stream, and copies the outputs from the graphs' fixed
// buffers into fresh storage. The kernels are the same, in the same order, on the same values,
// so the results are the uncaptured replay's bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "trireme/graph/executable.h"

namespace trireme::graph {

class CudaReplay {
 public:
  virtual ~CudaReplay() = default;
  // Captures `exe`'s calls with this replay's host arguments (`u64`: the bound values); null
  // when its graph has no CUDA kernel call or cannot be captured (then said on stderr, and the
  // replay calls the kernels one by one), and always null in a build without CUDA.
  static std::unique_ptr<CudaReplay> capture(Executable& exe, const std::vector<uint64_t>& u64);

  // One replay; the executable has run its host steps and checked the inputs.
  virtual std::vector<Tensor> replay(const std::vector<Tensor>& inputs, const std::vector<uint64_t>& u64) = 0;
  virtual CaptureSummary summary() const = 0;
};

}  // namespace trireme::graph
