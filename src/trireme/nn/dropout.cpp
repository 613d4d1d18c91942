// Dropout layer, its stream derivation and the global-row scope (Note [dropout keyed by global
// sample], dropout.h).
#include "trireme/nn/dropout.h"

#include "trireme/core/rng.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::nn {

namespace {
// splitmix64's finaliser: spreads consecutive counters over the whole 64-bit range.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

thread_local std::optional<int64_t> t_first_row;
}  // namespace

uint64_t dropout_stream(const std::string& qualified_name, uint64_t counter) {
  return mix64(rng_stream_for(qualified_name) ^ mix64(counter));
}

GlobalRowScope::GlobalRowScope(int64_t first_row) : previous_(t_first_row) {
  TRIREME_CHECK(first_row >= 0, "GlobalRowScope: the first row must be >= 0, got ", first_row);
  t_first_row = first_row;
}
GlobalRowScope::~GlobalRowScope() { t_first_row = previous_; }
std::optional<int64_t> GlobalRowScope::current() { return t_first_row; }

namespace {
thread_local bool t_redrawing = false;
}  // namespace

RedrawScope::RedrawScope() : previous_(t_redrawing) { t_redrawing = true; }
RedrawScope::~RedrawScope() { t_redrawing = previous_; }
bool RedrawScope::active() { return t_redrawing; }

void bind_dropout_stream(Module& module, uint64_t counter, bool advances, uint64_t stream) {
  KernelTape* tape = active_kernel_tape();
  if (!tape || tape->in_kernel() || RedrawScope::active()) return;
  auto counter_now = std::make_shared<uint64_t>(counter);
  Module* m = &module;
  tape->on_replay([m, counter_now, advances] { *counter_now = advances ? m->next_rng_counter() : m->peek_rng_counter(); });
  tape->bind_u64(stream, [m, counter_now] { return dropout_stream(m->qualified_name(), *counter_now); });
}

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  TRIREME_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  const std::optional<int64_t> first_row = GlobalRowScope::current();
  // Inside a scope every micro-batch of the step draws with the same counter; outside, each
  // call is a fresh draw.
  const uint64_t counter = first_row ? peek_rng_counter() : next_rng_counter();
  const int64_t row_numel = x.dim() > 0 && x.size(0) > 0 ? x.numel() / x.size(0) : 0;
  const uint64_t offset = uint64_t(first_row.value_or(0)) * uint64_t(row_numel);
  const uint64_t stream = dropout_stream(qualified_name(), counter);
  bind_dropout_stream(*this, counter, /*advances=*/!first_row, stream);
  return dropout(x, p, true, rng_seed(), stream, offset);
}

}  // namespace trireme::nn
