// Layouts and their config overrides (see layout.h).
#include "trireme/plan/layout.h"

namespace trireme::plan {

std::string Layout::describe() const {
  std::string out = str_cat("dp=", dp, " tp=", tp, sequence_parallel ? " sp" : "", " pp=", pp);
  if (pp > 1) out += str_cat(" ", schedule, schedule == "interleaved" ? str_cat("/v", virtual_stages) : "");
  out += str_cat(" mb=", micro_batches, " zero=", zero_stage, " recompute=", recompute);
  return recompute != "none" && recompute_layers >= 0 ? out + str_cat(":", recompute_layers) : out;
}

std::vector<std::string> Layout::overrides() const {
  return {str_cat("parallel.dp=", dp),
          str_cat("parallel.tp=", tp),
          str_cat("parallel.pp=", pp),
          str_cat("parallel.micro_batches=", micro_batches),
          str_cat("parallel.schedule=", schedule),
          str_cat("parallel.virtual_stages=", virtual_stages),
          str_cat("parallel.sequence_parallel=", sequence_parallel ? "true" : "false"),
          str_cat("parallel.zero=", zero_stage),
          str_cat("memory.recompute=", recompute),
          str_cat("memory.recompute_layers=", recompute_layers)};
}

void apply_layout(io::TrainConfig& tc, const Layout& l) {
  tc.parallel.dp = l.dp, tc.parallel.tp = l.tp, tc.parallel.pp = l.pp;
  tc.parallel.micro_batches = l.micro_batches;
  tc.parallel.schedule = l.schedule;
  tc.parallel.virtual_stages = l.virtual_stages;
  tc.parallel.sequence_parallel = l.sequence_parallel;
  tc.parallel.zero = l.zero_stage;
  tc.memory.recompute = l.recompute;
  tc.memory.recompute_layers = l.recompute_layers;
}

Layout layout_of(const io::TrainConfig& tc) {
  const auto& p = tc.parallel;
  return {p.dp,
          p.tp,
          p.pp,
          p.micro_batches,
          p.schedule,
          p.virtual_stages,
          p.sequence_parallel,
          int(p.zero),
          tc.memory.recompute,
          tc.memory.recompute_layers};
}

std::string validate_layout(const io::Config& config, const Layout& l) {
  // All overrides at once, validated once: set one by one, a valid layout can pass through an
  // invalid state (dp raised before micro_batches lowered).
  try {
    io::Config::parse(config.to_toml(), "the planned layout", l.overrides());
  } catch (const io::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace trireme::plan
