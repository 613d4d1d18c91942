// One candidate way of running a training config: the [parallel] and [memory] choices the
// planner searches over, and how they become config overrides.
//
//   Layout l{.dp = 2, .tp = 2, .pp = 1, .micro_batches = 4, .sequence_parallel = true};
//   l.describe();          // "dp=2 tp=2 sp pp=1 mb=4 zero=0 recompute=none"
//   l.overrides();         // {"parallel.dp=2", "parallel.tp=2", ...}: what --set would say
//   apply_layout(tc, l);   // the same, into a resolved config
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trireme/io/config.h"

namespace trireme::plan {

struct Layout {
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t micro_batches = 1;
  std::string schedule = "1f1b";  // "1f1b" | "gpipe" | "interleaved" (pp > 1)
  int64_t virtual_stages = 1;     // interleaved only
  bool sequence_parallel = false;
  int zero_stage = 0;              // parallel.zero: 0 replicated; 1, 2, 3 the ZeRO stages
  std::string recompute = "none";  // "none" | "selective" | "full"
  int64_t recompute_layers = -1;   // memory.recompute_layers: the first N blocks of each stage; -1 all

  int64_t devices() const { return dp * tp * pp; }
  std::string describe() const;
  std::vector<std::string> overrides() const;  // "key=value" for Config::set / --set
  bool operator==(const Layout&) const = default;
};

// tc's [parallel] and [memory] keys set to the layout's (the rest of tc as it is).
void apply_layout(io::TrainConfig& tc, const Layout& l);
// The layout tc's keys describe (the inverse of apply_layout).
Layout layout_of(const io::TrainConfig& tc);

// "" when `config` with the layout's overrides passes the config's own validation, else its
// message (the config's checks are the single source of what a layout may be).
std::string validate_layout(const io::Config& config, const Layout& l);

}  // namespace trireme::plan
