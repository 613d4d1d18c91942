// A GPU timeline of any CUDA program, for finding where a step waits: LD_PRELOAD this library
// (built by bench/gpu/trace_step.sh) and every kernel, copy and memset of the process is
// recorded through CUPTI's activity API and appended, as CUPTI hands the records over (every
// 100 ms), to $TRIREME_CUPTI_DIR/trace_<pid>.csv:
//   kind,device,stream,start_ns,end_ns,bytes,name
// kind is kernel, memcpy (name: its kind, e.g. DtoD or PtoP) or memset. bench/gpu/timeline.py
// reads the files: each stream's busy time, the compute stream's idle gaps and what ended just
// before each gap closed. No CUDA program needs to know about it; nsys is not on the GPU machine.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include <unistd.h>

namespace {

std::mutex g_mutex;
FILE* g_out = nullptr;

void write_row(const char* kind, uint32_t device, uint32_t stream, uint64_t start, uint64_t end, uint64_t bytes,
               const char* name) {
  std::fprintf(g_out, "%s,%u,%u,%llu,%llu,%llu,\"%s\"\n", kind, device, stream, (unsigned long long)start,
               (unsigned long long)end, (unsigned long long)bytes, name);
}

const char* memcpy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    default: return "other";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 16 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard lock(g_mutex);
  if (!g_out) {
    std::free(buffer);
    return;
  }
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        write_row("kernel", k->deviceId, k->streamId, k->start, k->end, 0, k->name ? k->name : "?");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        write_row("memcpy", m->deviceId, m->streamId, m->start, m->end, m->bytes, memcpy_kind(m->copyKind));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpyPtoP4*>(record);
        write_row("memcpy", m->deviceId, m->streamId, m->start, m->end, m->bytes, "PtoP");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        write_row("memset", m->deviceId, m->streamId, m->start, m->end, m->bytes, "memset");
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {  // host calls: "stream" holds the calling thread
        auto* a = reinterpret_cast<CUpti_ActivityAPI*>(record);
        const bool runtime = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
        const char* name = nullptr;
        cuptiGetCallbackName(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &name);
        write_row(runtime ? "runtime" : "driver", 0, a->threadId, a->start, a->end, 0, name ? name : "?");
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
}

__attribute__((constructor)) void start_tracing() {
  const char* dir = std::getenv("TRIREME_CUPTI_DIR");
  const std::string path = std::string(dir ? dir : ".") + "/trace_" + std::to_string(::getpid()) + ".csv";
  g_out = std::fopen(path.c_str(), "w");
  if (!g_out) {
    std::fprintf(stderr, "cupti_trace: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(g_out, "kind,device,stream,start_ns,end_ns,bytes,name\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_trace: cannot register CUPTI's callbacks\n");
    return;
  }
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET}) {
    if (cuptiActivityEnable(k) != CUPTI_SUCCESS) std::fprintf(stderr, "cupti_trace: cannot enable kind %d\n", int(k));
  }
  // TRIREME_CUPTI_API=1: the host's CUDA calls too (where the host spends its time between
  // launches; costs a little on every call).
  if (const char* api = std::getenv("TRIREME_CUPTI_API"); api && std::string(api) == "1") {
    for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER}) {
      if (cuptiActivityEnable(k) != CUPTI_SUCCESS) std::fprintf(stderr, "cupti_trace: cannot enable kind %d\n", int(k));
    }
  }
  cuptiActivityFlushPeriod(100);
}

__attribute__((destructor)) void stop_tracing() {
  cuptiActivityFlushAll(1);
  std::lock_guard lock(g_mutex);
  if (g_out) std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace
