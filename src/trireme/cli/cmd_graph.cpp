// `trireme graph -c CONFIG [--set key=value ...] [--vocab V] [--dot FILE] [--list]`: the training
// step of a config in static mode (docs/STATIC_GRAPH.md), traced on a batch of random tokens: its
// kernel calls by op, the count after each pass, and the memory plan beside the eager peak.
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/core/rng.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/fusion.h"
#include "trireme/graph/gemm_folds.h"
#include "trireme/graph/multi_tensor.h"
#include "trireme/graph/norm_folds.h"
#include "trireme/graph/static_function.h"
#include "trireme/io/file_write.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/train/memory_check.h"
#include "trireme/train/parallel_runner.h"
#include "trireme/train/step_runner.h"

namespace trireme::cli {

namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  int64_t vocab = 0;
  std::string dot;
  bool list = false;
};

int run_graph(const Options& opt, const io::TrainConfig& tc) {
  if (tc.parallel.tp != 1) {
    throw io::ConfigError("parallel.tp: trireme graph traces one process; its step with the whole model is that of "
                          "--set parallel.tp=1 (each tp rank's adds its collectives)");
  }
  if (tc.parallel.pp != 1) {
    throw io::ConfigError("parallel.pp: trireme graph traces one process; each stage of a pipeline traces its part of "
                          "the schedule with its sends and receives, whose computation is that of --set parallel.pp=1");
  }
  if (tc.parallel.dp != 1) {
    throw io::ConfigError(str_cat("parallel.dp: trireme graph traces one process; each of the ", tc.parallel.dp,
                                  " ranks of this run traces the step of --set parallel.dp=1 --set train.batch_size=",
                                  tc.train.batch_size / tc.parallel.dp, " plus the gradient all-reduces"));
  }
  const int64_t vocab = opt.vocab > 0 ? opt.vocab : run_vocab(tc).value_or(256);
  TRIREME_CHECK(tc.train.device == "cpu", "trireme graph: traces on the CPU for now; train.device is \"",
                tc.train.device, "\" (use --set train.device=cpu)");
  auto runner = train::make_step_runner(tc, vocab, train::ParallelJob::single(tc.parallel, Device::cpu()));
  runner->set_lr(tc.optim.lr);
  Generator gen(uint64_t(tc.train.seed));
  const Shape shape{tc.train.batch_size, tc.model.block_size};
  auto tokens = [&] { return to_dtype(mul(rand(shape, gen, DType::f64), double(vocab) - 0.5), DType::i64); };
  const io::Batch batch{.inputs = tokens(), .targets = tokens()};
  const graph::Graph traced = runner->trace_step(batch).graph;
  const graph::Graph dce = graph::eliminate_dead_code(traced);
  const graph::Graph cse = graph::eliminate_common_subexpressions(dce);
  graph::StaticOptions unfused;
  unfused.fold_into_norms = false;
  unfused.fold_into_gemms = false;
  unfused.fuse_elementwise = false;
  unfused.schedule_for_memory = false;
  unfused.multi_tensor_adamw = false;
  unfused.multi_tensor_clip = false;
  const graph::Graph dce2 = graph::optimize(traced, unfused);
  const graph::Graph folded_casts = graph::fold_norm_casts(dce2);
  const graph::Graph folded_residuals = graph::fold_norm_residual_adds(folded_casts);
  const graph::Graph folded_adds = graph::fold_norm_gradient_adds(folded_residuals);
  const graph::Graph folded = graph::fold_norm_gradient_casts(folded_adds);
  const graph::Graph folded_gelu = graph::fold_gelu_into_gemms(folded);
  const graph::Graph merged_clip = graph::merge_scales(graph::merge_sum_squares(folded_gelu));
  const graph::Graph fused = graph::fuse_elementwise(merged_clip);
  graph::StaticOptions unmerged;
  unmerged.multi_tensor_adamw = false;
  const graph::Graph scheduled = graph::optimize(traced, unmerged);
  const graph::Graph final_graph = graph::optimize(traced);
  const graph::MemoryPlan plan = graph::plan_memory(final_graph);
  graph::StaticOptions unscheduled;
  unscheduled.schedule_for_memory = false;
  const graph::MemoryPlan plan_unscheduled = graph::plan_memory(graph::optimize(traced, unscheduled));

  std::printf("step: GPT d_model=%lld n_layer=%lld, batch %lld x %lld tokens, vocabulary %lld, precision %s\n",
              (long long)tc.model.d_model, (long long)tc.model.n_layer, (long long)shape[0], (long long)shape[1],
              (long long)vocab, tc.train.precision.c_str());
  std::printf("\nkernel calls per step:\n  traced                          %6zu\n", traced.nodes.size());
  std::printf("  after dead-code elimination     %6zu\n", dce.nodes.size());
  std::printf("  after common subexpressions     %6zu\n", cse.nodes.size());
  std::printf("  after dead-code elimination     %6zu\n", dce2.nodes.size());
  std::printf("  casts folded into norms         %6zu\n", folded_casts.nodes.size());
  std::printf("  residual adds folded into norms %6zu\n", folded_residuals.nodes.size());
  std::printf("  gradient adds folded into norms %6zu\n", folded_adds.nodes.size());
  std::printf("  gradient casts folded into norms%6zu\n", folded.nodes.size());
  std::printf("  GELU folded into GEMMs          %6zu\n", folded_gelu.nodes.size());
  std::printf("  clipping in multi-tensor calls  %6zu\n", merged_clip.nodes.size());
  std::printf("  after elementwise fusion        %6zu\n", fused.nodes.size());
  std::printf("  scheduled for memory            %6zu  (updates moved next to their gradient's last write)\n",
              scheduled.nodes.size());
  int64_t merged = 0;
  for (const auto& n : final_graph.nodes) merged += n.calls > 1 ? n.calls : 0;
  std::printf("  multi-tensor AdamW              %6zu  (replayed; %lld updates in %lld adamw_multi calls)\n",
              final_graph.nodes.size(), (long long)merged,
              (long long)graph::op_counts(final_graph)["adamw_multi"]);
  std::printf("%s", graph::describe_fusion(final_graph).c_str());
  std::printf("\nby op (replayed):\n");
  for (const auto& [op, n] : graph::op_counts(final_graph)) std::printf("  %-40s %6lld\n", op.c_str(), (long long)n);
  int64_t dynamic = 0;
  for (const auto& n : final_graph.nodes) dynamic += n.dynamic;
  std::printf("\nhost work per replay: %zu host steps (optimizer step count, dropout counters), %lld calls whose "
              "host arguments are recomputed (learning rate, bias corrections, dropout streams)\n",
              final_graph.host_steps.size(), (long long)dynamic);
  std::printf("\nmemory:\n%s", graph::describe_memory(final_graph, plan).c_str());
  std::printf("  arena without the scheduling pass: %s\n", train::format_bytes(double(plan_unscheduled.arena_bytes)).c_str());
  std::printf("  arena / eager peak: %.2f (%s against %s)\n",
              double(plan.arena_bytes) / double(std::max<size_t>(final_graph.eager_peak_bytes, 1)),
              train::format_bytes(double(plan.arena_bytes)).c_str(),
              train::format_bytes(double(final_graph.eager_peak_bytes)).c_str());
  if (opt.list) std::printf("\ncalls:\n%s", graph::list_nodes(final_graph).c_str());
  if (!opt.dot.empty()) {
    io::write_file(opt.dot, graph::to_dot(final_graph));
    std::printf("\nwrote %s (render: dot -Tsvg %s -o step.svg)\n", opt.dot.c_str(), opt.dot.c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_graph_command(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand(
      "graph", "The training step of a config as static mode traces it: ops, passes, memory plan");
  app->add_option("-c,--config", opt->config, "TOML config file (default: every key at its default)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", opt->overrides, "override a config key, e.g. --set model.n_layer=2 (repeatable)");
  app->add_option("--vocab", opt->vocab, "the vocabulary size (default: from the prepared data, else 256)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app->add_option("--dot", opt->dot, "write the replayed graph as Graphviz dot to FILE");
  app->add_flag("--list", opt->list, "print every kernel call of the replayed graph");
  return {app, [opt] {
            try {
              std::vector<std::string> overrides = opt->overrides;
              overrides.push_back("train.mode=static");
              io::TrainConfig tc = (opt->config.empty() ? io::Config::parse("", "defaults", overrides)
                                                        : io::Config::load(opt->config, overrides))
                                       .resolve();
              return run_graph(*opt, tc);
            } catch (const io::ConfigError& e) {
              std::fprintf(stderr, "trireme graph: config error:\n%s\n", e.what());
              return kExitUsage;
            }
          }};
}

}  // namespace trireme::cli
