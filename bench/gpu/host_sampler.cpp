// Where the host's main thread spends its time during steps that the host holds back (the
// timelines of bench/gpu/trace_step.sh show the GPU waiting for launches; this says which code the
// host was in instead). LD_PRELOAD it into a process with TRIREME_HOST_SAMPLES set to a folder: a
// timer on the main thread's CPU clock (or on the wall clock with TRIREME_HOST_SAMPLE_CLOCK=wall,
// which also catches where it is blocked) interrupts it every TRIREME_HOST_SAMPLE_US
// microseconds (default 200) and records its stack; at exit the process writes
// <folder>/host_<pid>.stacks, every sample's frames as library offsets, and each library's build
// ID. bench/gpu/host_report.py names them (from unstripped copies of the same builds where the
// machine's are stripped) and counts the functions running (self) and on the stack (inclusive).
// Build (bench/gpu/host_profile.sh does):
//   g++ -shared -fPIC -O2 -std=c++17 bench/gpu/host_sampler.cpp -o libhost_sampler.so -ldl -lrt -lpthread
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace {

constexpr int kDepth = 48;
constexpr size_t kMaxSamples = 400000;

struct Sample {
  int depth;
  void* frames[kDepth];
};

Sample* g_samples = nullptr;  // preallocated: the handler may not allocate
std::atomic<size_t> g_count{0};
timer_t g_timer;
bool g_armed = false;
bool g_wall = false;  // sampling on the wall clock (TRIREME_HOST_SAMPLE_CLOCK=wall)
char g_out[4096];  // plain: no constructor or destructor racing ours

void on_tick(int, siginfo_t*, void*) {
  const size_t i = g_count.load(std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  Sample& s = g_samples[i];
  s.depth = backtrace(s.frames, kDepth);
  g_count.store(i + 1, std::memory_order_relaxed);
}

// A frame as its library and the offset in it, and the library's exported function that holds it
// where there is one (a function with internal linkage, or any in a stripped library, has none
// here: bench/gpu/host_report.py names those from an unstripped copy of the library).
struct Frame {
  std::string lib;
  uintptr_t base = 0;  // where the library is loaded
  uintptr_t offset = 0;
  std::string exported;
};

// The GNU build ID of the library loaded at `base` (hex; empty if it has none): what says that an
// unstripped copy elsewhere is the same build (stripping keeps it).
std::string build_id(uintptr_t base) {
  struct Search {
    uintptr_t base;
    std::string id;
  } search{base, ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* at = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          const char* end = at + ph.p_memsz;
          while (at + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(at);
            const char* name = at + sizeof(ElfW(Nhdr));
            const char* desc = name + ((note->n_namesz + 3) & ~3u);
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              char hex[3];
              for (unsigned b = 0; b < note->n_descsz; ++b) {
                std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(desc[b]));
                s->id += hex;
              }
              return 1;
            }
            at = desc + ((note->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &search);
  return search.id;
}

Frame frame_of(void* pc) {
  Frame f;
  Dl_info info{};
  ElfW(Sym)* sym = nullptr;
  if (dladdr1(pc, &info, reinterpret_cast<void**>(&sym), RTLD_DL_SYMENT) == 0 || info.dli_fname == nullptr) return f;
  f.lib = info.dli_fname;
  f.base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  // The return address points after the call: one byte back is inside the calling instruction.
  const auto at = reinterpret_cast<uintptr_t>(pc) - 1;
  f.offset = at - reinterpret_cast<uintptr_t>(info.dli_fbase);
  // dladdr names the nearest exported symbol below pc even when pc lies past its end.
  const auto begin = reinterpret_cast<uintptr_t>(info.dli_saddr);
  if (info.dli_sname != nullptr && sym != nullptr && at >= begin && at < begin + sym->st_size) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    f.exported = status == 0 && demangled ? demangled : info.dli_sname;
    std::free(demangled);
  }
  return f;
}

__attribute__((constructor)) void start_sampling() {
  const char* dir = std::getenv("TRIREME_HOST_SAMPLES");
  if (dir == nullptr || *dir == '\0') return;
  std::snprintf(g_out, sizeof(g_out), "%s/host_%d.stacks", dir, int(::getpid()));
  g_samples = static_cast<Sample*>(std::calloc(kMaxSamples, sizeof(Sample)));
  if (g_samples == nullptr) return;
  void* warm[4];
  backtrace(warm, 4);  // the first call loads libgcc: not inside the signal handler
  struct sigaction sa {};
  sa.sa_sigaction = on_tick;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, nullptr) != 0) return;
  // The main thread's own CPU clock, its signal delivered to it alone: other threads (the
  // launcher's, NCCL's, the watchdog) neither count nor get interrupted. With
  // TRIREME_HOST_SAMPLE_CLOCK=wall the wall clock instead: the samples then also say where the
  // thread waits (blocked in a launch, a lock, a synchronisation), not only where it computes.
  clockid_t clock = CLOCK_MONOTONIC;
  const char* which = std::getenv("TRIREME_HOST_SAMPLE_CLOCK");
  const bool wall = which && std::strcmp(which, "wall") == 0;
  if (!wall && pthread_getcpuclockid(pthread_self(), &clock) != 0) return;
  g_wall = wall;
  struct sigevent ev {};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGPROF;
  ev._sigev_un._tid = pid_t(syscall(SYS_gettid));
  if (timer_create(clock, &ev, &g_timer) != 0) return;
  const char* us_env = std::getenv("TRIREME_HOST_SAMPLE_US");
  const long us = us_env ? std::max(20L, std::atol(us_env)) : 200;
  struct itimerspec spec {};
  spec.it_interval.tv_sec = us / 1000000;
  spec.it_interval.tv_nsec = (us % 1000000) * 1000;
  spec.it_value = spec.it_interval;
  g_armed = timer_settime(g_timer, 0, &spec, nullptr) == 0;
}

__attribute__((destructor)) void report() {
  if (!g_armed) return;
  timer_delete(g_timer);
  g_armed = false;
  const size_t n = std::min(g_count.load(), kMaxSamples);
  if (n == 0) return;  // a helper process that never ran on its main thread long enough
  FILE* out = std::fopen(g_out, "w");
  if (out == nullptr) return;
  std::fprintf(out, "clock %s\n", g_wall ? "wall" : "cpu");
  std::map<std::string, int> libs;
  std::map<void*, std::string> frames;  // pc -> "lib:offset"
  auto written = [&](void* pc) -> const std::string& {
    auto it = frames.find(pc);
    if (it != frames.end()) return it->second;
    const Frame f = frame_of(pc);
    auto [lib, added] = libs.emplace(f.lib.empty() ? "??" : f.lib, int(libs.size()));
    if (added) {
      const std::string id = f.lib.empty() ? "" : build_id(f.base);
      std::fprintf(out, "lib %d %s %s\n", lib->second, id.empty() ? "-" : id.c_str(), lib->first.c_str());
    }
    char key[64];
    std::snprintf(key, sizeof(key), "%d:%lx", lib->second, static_cast<unsigned long>(f.offset));
    if (!f.exported.empty()) std::fprintf(out, "exported %s %s\n", key, f.exported.c_str());
    return frames.emplace(pc, key).first->second;
  };
  for (size_t i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    // Frames 0-1 are the handler and the signal trampoline's return.
    std::string line = "sample";
    for (int f = 2; f < s.depth; ++f) line += " " + written(s.frames[f]);
    std::fprintf(out, "%s\n", line.c_str());
  }
  std::fclose(out);
}

}  // namespace
