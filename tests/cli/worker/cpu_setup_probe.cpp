// A program that configures the CPU runtime as the CLI does, but as if OpenBLAS had detected the
// core named by its first argument (runtime/cpu_setup.h's test seam), then prints what
// `trireme env` prints about it: the OpenBLAS core and the OpenMP wait policy.
#include <cstdio>
#include <string>

#include "trireme/runtime/cpu_setup.h"

int main(int argc, char** argv) {
  trireme::runtime::configure_cpu_runtime_as_if_detected(argv, argc > 1 ? argv[1] : "");
  std::printf("runtime.openblas_core %s\n", trireme::runtime::describe_openblas_core().c_str());
  std::printf("runtime.openmp_wait_policy %s\n", trireme::runtime::describe_wait_policy().c_str());
  return 0;
}
