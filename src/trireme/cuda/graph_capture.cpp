// Stream capture into CUDA graphs (see graph_capture.h).
#include "trireme/cuda/graph_capture.h"

#include <array>
#include <mutex>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"

namespace trireme::cuda {

Stream capture_stream(int device) {
  static std::mutex mu;
  static std::array<CUstream_st*, 64> streams{};
  TRIREME_CHECK(device >= 0 && device < int(streams.size()), "cuda::capture_stream: device ", device);
  std::lock_guard lock(mu);
  if (streams[size_t(device)] == nullptr) streams[size_t(device)] = Stream::create(device).handle();
  return Stream(device, streams[size_t(device)]);
}

void begin_capture(const Stream& stream) {
  DeviceGuard g(stream.device());
  TRIREME_CUDA_CHECK(cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeThreadLocal));
}

GraphExec::~GraphExec() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void GraphExec::launch(const Stream& stream) const {
  TRIREME_CUDA_CHECK(cudaGraphLaunch(exec_, stream.handle()));
}

std::unique_ptr<GraphExec> end_capture(const Stream& stream, std::string& error) {
  DeviceGuard g(stream.device());
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream.handle(), &graph);
  if (err != cudaSuccess || graph == nullptr) {
    error = str_cat("the capture failed (", cudaGetErrorString(err), ")");
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return nullptr;
  }
  size_t nodes = 0;
  cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    error = str_cat("instantiating the graph failed (", cudaGetErrorString(err), ")");
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<GraphExec>(exec, nodes);
}

bool capture_is_active(const Stream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream.handle(), &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

RelaxedCaptureScope::RelaxedCaptureScope() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  previous_ = int(mode);
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  auto mode = cudaStreamCaptureMode(previous_);
  cudaThreadExchangeStreamCaptureMode(&mode);
}

}  // namespace trireme::cuda
