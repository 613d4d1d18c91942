// Seeing a graph: a count of its kernel calls by op, the calls in order, and Graphviz dot.
#pragma once

#include <map>
#include <string>

#include "trireme/graph/graph.h"
#include "trireme/graph/passes.h"

namespace trireme::graph {

std::map<std::string, int64_t> op_counts(const Graph& g);
// One line per kernel call: index, op, dtype, the argument values (w: written).
std::string list_nodes(const Graph& g);
// The calls as a dataflow graph: an edge from the last writer of each buffer to its readers.
std::string to_dot(const Graph& g);
// The fused elementwise calls (graph/fusion.h) by program: how many, the calls each replaces,
// their inputs and outputs; empty when there are none.
std::string describe_fusion(const Graph& g);
// Buffers by kind (count and bytes) and the memory plan against the eager peak.
std::string describe_memory(const Graph& g, const MemoryPlan& plan);

}  // namespace trireme::graph
