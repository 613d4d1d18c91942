// Whether this thread's kernel calls are being recorded to run again (a trace, graph/trace.h)
// rather than run now or only watched (an ObservingKernelTape). Asked by the code that has a
// one-call form for many tensors (the optimizers' multi-tensor updates, gradient clipping, the
// loss scaler's unscale): a traced step keeps a call per tensor instead, which the graph's passes
// fuse or merge and refresh before each replay.
#pragma once

#include "trireme/kernels/kernel_tape.h"

namespace trireme {

inline bool recording_for_replay() {
  KernelTape* tape = active_kernel_tape();
  return tape && !tape->in_kernel() && tape->records_for_replay();
}

}  // namespace trireme
