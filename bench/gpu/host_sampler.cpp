// Where the host's main thread spends its time during steps that the host holds back (the
// timelines of bench/gpu/trace_step.sh show the GPU waiting for launches; this says which code the
// host was in instead). LD_PRELOAD it into a process with TRIREME_HOST_SAMPLES set to a folder: a
// timer on the main thread's CPU clock (or on the wall clock with TRIREME_HOST_SAMPLE_CLOCK=wall,
// which also catches where it is blocked) interrupts it every TRIREME_HOST_SAMPLE_US
// microseconds (default 200) and records its stack; at exit the process writes
// <folder>/host_<pid>.txt with the functions that were running (self) and on the stack
// (inclusive), by share of the samples. Build (bench/gpu/host_profile.sh does):
//   g++ -shared -fPIC -O2 -std=c++17 bench/gpu/host_sampler.cpp -o libhost_sampler.so -ldl -lrt -lpthread
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
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
#include <set>
#include <string>
#include <vector>

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

// A frame's function: its dynamic symbol if it has one, else (functions with internal linkage,
// which dladdr cannot see) what addr2line finds in the library's symbol table.
std::string addr2line(const char* lib, uintptr_t offset) {
  char cmd[4600];
  std::snprintf(cmd, sizeof(cmd), "addr2line -f -C -e '%s' 0x%lx 2>/dev/null", lib, (unsigned long)offset);
  FILE* p = popen(cmd, "r");
  if (p == nullptr) return "";
  char line[2048] = {0};
  std::string name;
  if (std::fgets(line, sizeof(line), p)) name = line;
  pclose(p);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return name == "??" ? "" : name;
}

std::string name_of(void* pc) {
  Dl_info info{};
  std::string name;
  if (dladdr(pc, &info) != 0 && info.dli_sname != nullptr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    name = status == 0 && demangled ? demangled : info.dli_sname;
    std::free(demangled);
  } else if (info.dli_fname != nullptr) {
    name = addr2line(info.dli_fname, reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1);
    if (name.empty()) {
      const char* lib = std::strrchr(info.dli_fname, '/');
      name = std::string("?? in ") + (lib ? lib + 1 : info.dli_fname);
    }
  } else {
    name = "??";
  }
  if (name.size() > 160) name = name.substr(0, 157) + "...";
  return name;
}

__attribute__((constructor)) void start_sampling() {
  const char* dir = std::getenv("TRIREME_HOST_SAMPLES");
  if (dir == nullptr || *dir == '\0') return;
  std::snprintf(g_out, sizeof(g_out), "%s/host_%d.txt", dir, int(::getpid()));
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
  ::unsetenv("TRIREME_HOST_SAMPLES");  // the addr2line processes below are not to be sampled
  const size_t n = std::min(g_count.load(), kMaxSamples);
  if (n == 0) return;  // a helper process that never ran on its main thread long enough
  std::map<void*, std::string> names;
  auto named = [&](void* pc) -> const std::string& {
    auto it = names.find(pc);
    if (it == names.end()) it = names.emplace(pc, name_of(pc)).first;
    return it->second;
  };
  std::map<std::string, size_t> self, inclusive;
  for (size_t i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    // Frames 0-2 are the handler, the signal trampoline's return and (often) a libc frame.
    const int first = std::min(2, s.depth - 1);
    if (s.depth <= first) continue;
    ++self[named(s.frames[first])];
    std::set<std::string> seen;
    for (int f = first; f < s.depth; ++f)
      if (seen.insert(named(s.frames[f])).second) ++inclusive[named(s.frames[f])];
  }
  FILE* out = std::fopen(g_out, "w");
  if (out == nullptr) return;
  auto top = [&](const char* title, const std::map<std::string, size_t>& counts, size_t limit) {
    std::vector<std::pair<size_t, std::string>> v;
    for (const auto& [name, c] : counts) v.emplace_back(c, name);
    std::sort(v.rbegin(), v.rend());
    std::fprintf(out, "== %s (%% of %zu samples of the main thread's %s time)\n", title, n, g_wall ? "wall" : "CPU");
    for (size_t i = 0; i < v.size() && i < limit; ++i)
      std::fprintf(out, "%6.2f  %s\n", 100.0 * double(v[i].first) / double(std::max<size_t>(n, 1)), v[i].second.c_str());
  };
  top("self", self, 40);
  top("inclusive", inclusive, 80);
  std::fclose(out);
}

}  // namespace
