#include "trireme/runtime/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace trireme::runtime {
namespace {

// The quota as the process sees its cgroup (inside a container, its own cgroup is the root).
int cgroup_quota_cpus() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string line;
  if (v2 && std::getline(v2, line)) return cpus_from_cpu_max(line);
  std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long long quota = -1, period = 0;
  if (q >> quota && p >> period) return cpus_from_quota(quota, period);
  return 0;
}

}  // namespace

int cpus_from_quota(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  return int(std::max(1LL, quota / period));
}

int cpus_from_cpu_max(std::string_view cpu_max) {
  std::istringstream in{std::string(cpu_max)};
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  try {
    return cpus_from_quota(std::stoll(quota), period);
  } catch (const std::exception&) {
    return 0;
  }
}

int available_cpus() {
  int cpus = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  const int quota = cgroup_quota_cpus();
  return quota > 0 ? std::min(cpus, quota) : cpus;
}

}  // namespace trireme::runtime
