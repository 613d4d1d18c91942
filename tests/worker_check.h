// Shared by the worker programs that the dist and cuda tests start as several processes (no
// GoogleTest there): a failed check prints the rank and line and exits 1, which the launcher
// reports and the test asserts on.
//
//   g_rank = env.rank;
//   EXPECT_TRUE(y.item() == 3.0, "all_reduce gave ", y.item());
#pragma once

#include <cstdio>
#include <cstdlib>

#include "trireme/core/error.h"

inline int g_rank = -1;  // this process's rank, for the messages

#define EXPECT_TRUE(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s %s\n", g_rank, __LINE__, #cond, \
                   ::trireme::str_cat(__VA_ARGS__).c_str());                                     \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
