// What this build of trireme contains (compile time) and what it finds at run time
// (BLAS, thread counts, GPUs), for `trireme env` and for the logs of every run.
#pragma once

#include <nlohmann/json.hpp>

namespace trireme::runtime {

const char* git_commit();       // the commit built, "-dirty" with uncommitted changes (generated)
nlohmann::json build_info();    // version, compiler, build type, backends compiled in
nlohmann::json runtime_info();  // BLAS configuration, threads, devices visible now

}  // namespace trireme::runtime
