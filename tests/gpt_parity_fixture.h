// The PyTorch parity fixture (tests/fixtures/gpt_parity.safetensors, written by
// scripts/make_gpt_fixture.py), shared by the CPU test (tests/models) and the GPU test (tests/cuda).
//
// Relative error of a tensor a against the reference b is max|a - b| / max|b| over the whole tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "trireme/io/safetensors.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/optim/adamw.h"

namespace trireme::testing {

// Either tensor may be on any device.
inline double rel_error(const Tensor& a_any, const Tensor& b_any) {
  const Tensor a = to_device(a_any.detach(), Device::cpu()), b = to_device(b_any.detach(), Device::cpu());
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    diff = std::max(diff, std::abs(double(av[i]) - double(bv[i])));
    scale = std::max(scale, std::abs(double(bv[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

struct GptParityFixture {
  io::SafetensorsFile file;
  models::GPTConfig config;

  GptParityFixture() {
    file = io::load_safetensors(std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/gpt_parity.safetensors");
    config.vocab_size = int64_t(meta("vocab_size"));
    config.block_size = int64_t(meta("block_size"));
    config.n_layer = int64_t(meta("n_layer"));
    config.n_head = int64_t(meta("n_head"));
    config.d_model = int64_t(meta("d_model"));
    config.ln_eps = meta("ln_eps");
    config.dropout = 0.0;
    config.tie_embeddings = true;
  }
  const Tensor& get(const std::string& name) const {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw Error("fixture has no tensor '" + name + "'");
    return it->second;
  }
  // The tensors under "<prefix>.", with the prefix removed.
  std::map<std::string, Tensor> group(const std::string& prefix) const {
    std::map<std::string, Tensor> out;
    for (const auto& [name, t] : file.tensors) {
      if (name.rfind(prefix + ".", 0) == 0) out[name.substr(prefix.size() + 1)] = t;
    }
    return out;
  }
  double meta(const std::string& key) const { return std::stod(file.metadata.at(key)); }
  optim::AdamWOptions adamw() const {
    return {.lr = meta("lr"), .betas = {meta("beta1"), meta("beta2")}, .eps = meta("eps"),
            .weight_decay = meta("weight_decay")};
  }
  // A GPT holding the fixture's initial weights (strict load: every name must match PyTorch's).
  std::unique_ptr<models::GPT> model() const {
    auto gpt = std::make_unique<models::GPT>(config, /*seed=*/0);
    gpt->load_state_dict(group("param"));
    return gpt;
  }
};

}  // namespace trireme::testing
