// What the folds (norm_folds.h, gemm_folds.h) ask of a graph before they merge two calls into
// one: per buffer, the calls that touch it, in order, and whether each writes it.
#pragma once

#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

#include "trireme/graph/graph.h"

namespace trireme::graph {

class CallTouches {
 public:
  explicit CallTouches(const Graph& g);

  const Value& value(int v) const { return g_.values[size_t(v)]; }
  // The call after `call` that touches the buffer of value v, when v's buffer is an intermediate
  // that `call` writes and that exactly these two calls touch; else -1.
  int only_other_toucher(int v, int call) const;
  // The call before `call` that writes the buffer of v, when v's buffer is an intermediate that
  // exactly these two calls touch, and `call` only reads; else -1.
  int only_writer_before(int v, int call) const;
  // The first call that touches the buffer of v, when v's buffer is an intermediate and that call
  // writes it; else -1.
  int first_writer(int v) const;
  // The first call after `call` that touches the buffer of v, when v's buffer is an intermediate
  // that `call` is the first to touch and writes, and no later call writes; else -1.
  int next_reader_of_own_write(int v, int call) const;
  // Whether a call strictly between `from` and `to` touches the buffer of v (writes it, when writes_only).
  bool touched_between(int v, int from, int to, bool writes_only) const;

 private:
  const Graph& g_;
  std::vector<std::vector<std::pair<int, bool>>> touching_;
};

// Whether n is a call of `kernel` that passes may rewrite (graph.h: rewritable).
bool is_kernel(const Node& n, std::type_index kernel);
// A rewritable copy kernel call from one value into another (a cast when their dtypes differ).
bool is_cast(const Node& n);
// A rewritable binary elementwise call `op` ("add", "mul") of two values into a third.
bool is_binary(const Node& n, std::string_view op);

// The graph without the calls marked dropped, with `nodes` in place of its calls.
Graph without_dropped(const Graph& g, std::vector<Node> nodes, const std::vector<bool>& dropped);

}  // namespace trireme::graph
