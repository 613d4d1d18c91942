// CUDA streams and events. Each thread has a current stream per device, which every kernel and
// copy on that device is launched on; it starts as the device's default (legacy) stream.
//
//   cuda::Stream side = cuda::Stream::create(0);
//   {
//     cuda::StreamGuard g(side);        // work on cuda:0 in this scope goes to `side`
//     y = matmul(a, b);
//   }
//   cuda::Event done;
//   done.record(side);
//   done.wait(cuda::current_stream(0));  // the default stream waits for y, without blocking the host
//
// Memory freed while a stream is current is reused only by work on that same stream (see
// Note [allocator streams] in allocator.h), so a tensor handed to another stream must be kept
// alive until that stream is done with it.
#pragma once

#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*; this header needs no CUDA include
struct CUevent_st;

namespace trireme::cuda {

class Stream {
 public:
  Stream() = default;  // device 0's default stream
  Stream(int device, CUstream_st* handle) : device_(device), handle_(handle) {}

  // A new non-blocking stream on `device`. Streams live until the process exits, so a stream's
  // handle never names two streams (the allocator keys its free lists by it).
  static Stream create(int device, bool high_priority = false);
  static Stream default_stream(int device) { return Stream(device, nullptr); }

  int device() const { return device_; }
  CUstream_st* handle() const { return handle_; }
  void synchronize() const;  // blocks the host until the stream's work is done
  bool query() const;        // true when all its work is done
  friend bool operator==(const Stream&, const Stream&) = default;

 private:
  int device_ = 0;
  CUstream_st* handle_ = nullptr;
};

Stream current_stream(int device = -1);  // -1: the current device
void set_current_stream(const Stream& stream);

// Makes `stream` current on its device (and that device current) for a scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_stream_;
  int previous_device_;
};

// A marker in a stream: other streams wait on it, the host synchronizes on it, and two of them
// time the work between (created with timing on).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void record();                            // on the current stream of the current device
  void wait(const Stream& stream) const;    // `stream`'s later work waits for this event
  void synchronize() const;                 // the host waits for it
  bool query() const;                       // true once it has happened
  float elapsed_ms(const Event& end) const; // this (start) to end; both recorded with timing

 private:
  CUevent_st* handle_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

}  // namespace trireme::cuda
