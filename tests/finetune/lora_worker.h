// What the LoRA layout tests that run their own two-process Gloo workers share: the worker's
// entry (started by parallel::testing::expect_worker_ok as "parallel-worker <scenario>") and the
// comparison of tensors, and random adapters for both sides of a comparison.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/models/lora.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"

namespace trireme::testing {

// The largest |a - b| over the elements, in f64.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  TRIREME_CHECK(a.sizes() == b.sizes(), "shapes ", a.sizes(), " vs ", b.sizes());
  auto x = contiguous(to_dtype(a.detach(), DType::f64)).to_vector<double>();
  auto y = contiguous(to_dtype(b.detach(), DType::f64)).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Random adapters (B is zero at first, so the adapters would not show), the same whole values in
// the one-process model `ref` and the parallel one.
inline void load_random_adapters(models::GPT& ref, models::GPT& parallel_model) {
  std::map<std::string, Tensor> full;
  uint64_t seed = 50;
  for (auto& [n, t] : ref.full_state_dict()) {
    full[n] = t.detach();
    if (models::is_lora_name(n)) {
      Tensor r = zeros(t.sizes());
      nn::init_normal(r, 0.3, seed++, n);
      full[n] = r;
    }
  }
  ref.load_full_state_dict(full);
  parallel_model.load_full_state_dict(full);
}

using GlooWorkerBody = void (*)(const std::shared_ptr<dist::ProcessGroup>& world, int rank);

// Constructed at namespace scope, before GoogleTest's main: when this binary was started as the
// worker of `scenario`, runs `body` on a Gloo group of the launched ranks and exits (1 with the
// error on stderr, which names the rank); otherwise does nothing (other files' scenarios pass).
struct GlooWorkerEntry {
  GlooWorkerEntry(const char* scenario, GlooWorkerBody body) {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    if (args.size() < 3 || args[1] != "parallel-worker" || args[2] != scenario) return;
    int rc = 0;
    try {
      using namespace std::chrono_literals;
      const dist::DistEnv env = dist::dist_env_from_environment();
      auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, 20s));
      auto world = std::make_shared<dist::ProcessGroupGloo>(store, env.rank, env.world_size,
                                                            dist::GlooOptions{.timeout = 20s});
      body(world, env.rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    std::_Exit(rc);
  }
};

}  // namespace trireme::testing
