// CUDA graphs from stream capture: the work queued on a stream between begin_capture and
// end_capture is recorded instead of run, then launched as one graph as often as wanted
// (graph/executable.h replays a static step this way; docs/STATIC_GRAPH.md).
//
//   cuda::Stream s = cuda::capture_stream(0);
//   cuda::begin_capture(s);
//   { cuda::StreamGuard g(s); /* kernels */ }
//   std::string why;
//   std::unique_ptr<cuda::GraphExec> exe = cuda::end_capture(s, why);   // null: see `why`
//   exe->launch(cuda::current_stream(0));
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "trireme/cuda/stream.h"

struct CUgraphExec_st;

namespace trireme::cuda {

// A stream of `device` that only captures (the default stream cannot be captured); one per
// device for the process. The graphs captured there share its GEMM workspace, so they must run
// one after another (they do when they are launched on one stream).
Stream capture_stream(int device);

// Starts recording the stream's work. A call on this thread that the capture cannot record (a
// synchronization, a copy from pageable memory) fails, and the capture with it.
void begin_capture(const Stream& stream);

class GraphExec {
 public:
  GraphExec(CUgraphExec_st* exec, size_t nodes) : exec_(exec), nodes_(nodes) {}
  ~GraphExec();
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  void launch(const Stream& stream) const;
  size_t nodes() const { return nodes_; }  // the CUDA graph's nodes (kernels, copies, memsets)

 private:
  CUgraphExec_st* exec_;
  size_t nodes_;
};

// Ends the recording. Returns the instantiated graph, or null with `error` saying why when the
// capture failed; either way the stream records nothing more and the error is cleared.
std::unique_ptr<GraphExec> end_capture(const Stream& stream, std::string& error);

// Whether `stream` is capturing and its capture is still valid (a refused call invalidates it).
bool capture_is_active(const Stream& stream);

// Lets this thread make calls that a capture refuses but that are right in it: a cudaMalloc whose
// block the graph keeps (Note [graph pools] in allocator.h), a kernel attribute. A no-op when
// nothing is captured.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  int previous_;
};

}  // namespace trireme::cuda
