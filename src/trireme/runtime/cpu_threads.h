// How many CPU threads trireme uses by default: the CPUs this process may run on (its affinity
// mask), capped by a cgroup CPU quota (a container started with --cpus=N). OpenMP counts only
// the affinity mask, so in a container limited to 2 CPUs of a 64-core host it would start 64
// threads that the quota then throttles in turn, each stalling the others at every barrier.
#pragma once

#include <string_view>

namespace trireme::runtime {

// CPUs a quota of `quota` per `period` allows, rounded down (at least 1): with 1.5 CPUs, two
// threads would use up the quota early in each period and both wait out the rest. 0 when there
// is no limit (quota < 0, period <= 0).
int cpus_from_quota(long long quota, long long period);

// Parses cgroup v2's cpu.max ("max 100000" or "200000 100000"); 0 when unlimited or unreadable.
int cpus_from_cpu_max(std::string_view cpu_max);

// The affinity mask's CPU count, capped by this process's cgroup quota (v2 or v1) when it has one.
int available_cpus();

}  // namespace trireme::runtime
