// Thread count for CPU kernels.
#include "trireme/kernels/cpu/loops.h"

namespace trireme::cpu {
int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
}  // namespace trireme::cpu
