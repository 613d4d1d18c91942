// The counting scope of ops/op_count.h: a thread-local chain of scopes.
#include "trireme/ops/op_count.h"

namespace trireme {

namespace {
thread_local OpCountScope* innermost = nullptr;
}

OpCountScope::OpCountScope(OpCounts& counts) : counts_(&counts), outer_(innermost) { innermost = this; }

OpCountScope::~OpCountScope() { innermost = outer_; }

void op_count_matmul(double flops, double bytes) {
  for (OpCountScope* s = innermost; s != nullptr; s = s->outer_) {
    s->counts_->matmul_flops += flops;
    s->counts_->matmul_bytes += bytes;
    s->counts_->matmul_calls += 1;
  }
}

void op_count_attention(double flops, double bytes) {
  for (OpCountScope* s = innermost; s != nullptr; s = s->outer_) {
    s->counts_->attention_flops += flops;
    s->counts_->attention_bytes += bytes;
    s->counts_->attention_calls += 1;
  }
}

void op_count_memory(double bytes) {
  for (OpCountScope* s = innermost; s != nullptr; s = s->outer_) {
    s->counts_->memory_bytes += bytes;
    s->counts_->memory_calls += 1;
  }
}

}  // namespace trireme
