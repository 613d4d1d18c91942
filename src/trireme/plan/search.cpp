// The layout search (see search.h).
#include "trireme/plan/search.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "trireme/train/memory_check.h"

namespace trireme::plan {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    out.push_back(i);
    if (i != n / i) out.push_back(n / i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

constexpr int64_t kMaxVirtualStages = 8;

// "504, 512, 520": up to three numbers nearest n for which works() holds (looking as far as
// `reach` either side), for refusals.
std::string nearest_that_work(int64_t n, int64_t reach, const std::function<bool(int64_t)>& works) {
  std::vector<int64_t> found;
  for (int64_t delta = 1; delta <= reach && found.size() < 3; ++delta) {
    if (n - delta >= 1 && works(n - delta)) found.push_back(n - delta);
    if (found.size() < 3 && works(n + delta)) found.push_back(n + delta);
  }
  std::sort(found.begin(), found.end());
  std::string out;
  for (size_t i = 0; i < found.size(); ++i) out += (i ? ", " : "") + std::to_string(found[i]);
  return out.empty() ? "none nearby" : out;
}

}  // namespace

const Plan* best_for_split(const SearchResult& r, int64_t dp, int64_t tp, int64_t pp) {
  for (const Plan& p : r.best_per_split)
    if (p.layout.dp == dp && p.layout.tp == tp && p.layout.pp == pp) return &p;
  return nullptr;
}

std::vector<Layout> enumerate_layouts(const io::TrainConfig& tc, int64_t devices) {
  std::vector<Layout> out;
  const auto& m = tc.model;
  const bool adamw = tc.optim.name == "adamw";
  for (int64_t tp : divisors(devices)) {
    if (m.n_head % tp != 0) continue;
    for (int64_t pp : divisors(devices / tp)) {
      if (pp > m.n_layer) continue;
      const int64_t dp = devices / tp / pp;
      if (tc.train.batch_size % dp != 0) continue;
      for (int64_t mb : divisors(tc.train.batch_size / dp)) {
        std::vector<std::pair<std::string, int64_t>> schedules = {{"1f1b", 1}};
        if (pp > 1) {
          schedules.push_back({"gpipe", 1});
          if (mb % pp == 0) {
            for (int64_t v = 2; v <= kMaxVirtualStages && pp * v <= m.n_layer; ++v)
              schedules.push_back({"interleaved", v});
          }
        }
        for (const auto& [schedule, v] : schedules) {
          // Recomputation of every block of a stage's chunks, or of the first quarter, half or
          // three quarters of them (memory.recompute_layers): as much as the memory needs.
          const int64_t chunk = m.n_layer / (pp * v);
          std::vector<int64_t> counts = {-1};
          for (int64_t q : {1, 2, 3}) {
            const int64_t n = std::max<int64_t>(1, chunk * q / 4);
            if (n < chunk && std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
          }
          for (bool sp : {false, true}) {
            if (sp && (tp < 2 || pp > 1)) continue;
            for (int zero = 0; zero <= 3; ++zero) {
              // What the config would refuse anyway: ZeRO without dp or AdamW, ZeRO-3 in a pipeline.
              if (zero > 0 && (dp < 2 || !adamw)) continue;
              if (zero == 3 && pp > 1) continue;
              out.push_back({dp, tp, pp, mb, schedule, v, sp, zero, "none"});
              for (const char* recompute : {"selective", "full"})
                for (int64_t n : counts) out.push_back({dp, tp, pp, mb, schedule, v, sp, zero, recompute, n});
            }
          }
        }
      }
    }
  }
  return out;
}

SearchResult search_plans(const io::Config& config, const PlanInputs& in_given, int64_t devices, int top) {
  const auto start = std::chrono::steady_clock::now();
  PlanInputs in = in_given;
  if (devices <= 0) devices = in.cluster.devices();
  TRIREME_CHECK(devices <= in.cluster.devices(), "plan: ", devices, " devices asked of a cluster of ",
                in.cluster.devices());
  const io::TrainConfig& tc = in.train;
  SearchResult r;
  const std::vector<Layout> layouts = enumerate_layouts(tc, devices);
  r.examined = int64_t(layouts.size());
  std::vector<Plan> feasible, unfit;
  feasible.reserve(layouts.size());
  for (const Layout& l : layouts) {
    PlanCost c = predict(in, l);
    (c.fits ? feasible : unfit).push_back({l, c});
  }
  r.unfit = int64_t(unfit.size());
  auto by_time = [](const Plan& a, const Plan& b) { return a.cost.step_s < b.cost.step_s; };
  std::sort(feasible.begin(), feasible.end(), by_time);
  // The config's own validation has the last word: a plan it refuses is dropped (and counted).
  for (const Plan& p : feasible) {
    if (int(r.plans.size()) >= std::max(top, 1)) break;
    if (!validate_layout(config, p.layout).empty()) {
      ++r.invalid;
      continue;
    }
    r.plans.push_back(p);
  }
  std::sort(unfit.begin(), unfit.end(), by_time);
  // Per split: the fastest fitting plan the config accepts, else the least memory.
  auto same_split = [](const Layout& a, const Layout& b) { return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp; };
  for (const Plan& p : feasible) {
    const bool seen = std::any_of(r.best_per_split.begin(), r.best_per_split.end(),
                                  [&](const Plan& q) { return same_split(q.layout, p.layout); });
    if (!seen && validate_layout(config, p.layout).empty()) r.best_per_split.push_back(p);
  }
  for (const Plan& p : unfit) {
    auto it = std::find_if(r.best_per_split.begin(), r.best_per_split.end(),
                           [&](const Plan& q) { return same_split(q.layout, p.layout); });
    if (it == r.best_per_split.end())
      r.best_per_split.push_back(p);
    else if (!it->cost.fits && p.cost.peak_bytes < it->cost.peak_bytes)
      *it = p;
  }
  for (const Plan& p : unfit) {
    if (r.plans.empty() || p.cost.step_s >= r.plans[0].cost.step_s) break;
    ++r.faster_unfit_count;
    if (r.faster_unfit.size() < 3) r.faster_unfit.push_back(p);
  }

  if (r.plans.empty()) {
    const auto& m = tc.model;
    if (layouts.empty()) {
      auto splits = [&](int64_t n, int64_t batch) {
        for (int64_t tp : divisors(n)) {
          if (m.n_head % tp != 0) continue;
          for (int64_t pp : divisors(n / tp))
            if (pp <= m.n_layer && batch % (n / tp / pp) == 0) return true;
        }
        return false;
      };
      r.impossible = str_cat(
          "no layout splits the run over ", devices, " devices: dp x tp x pp = ", devices, " needs dp to divide ",
          "train.batch_size = ", tc.train.batch_size, ", tp to divide model.n_head = ", m.n_head,
          " and pp <= model.n_layer = ", m.n_layer, ". Device counts that work: ",
          nearest_that_work(devices, 4 * devices, [&](int64_t n) { return splits(n, tc.train.batch_size); }),
          "; batch sizes that work on ", devices, " devices: ",
          nearest_that_work(tc.train.batch_size, 4 * std::max(tc.train.batch_size, devices),
                            [&](int64_t b) { return splits(devices, b); }));
    } else if (feasible.empty()) {
      const Plan& least = *std::min_element(unfit.begin(), unfit.end(), [](const Plan& a, const Plan& b) {
        return a.cost.peak_bytes < b.cost.peak_bytes;
      });
      r.impossible = str_cat("no layout of ", devices, " devices fits in memory: the one that needs the least, ",
                             least.layout.describe(), ", needs ", train::format_bytes(least.cost.peak_bytes),
                             " per device and a device offers ", train::format_bytes(least.cost.capacity_bytes), " (",
                             in.cluster.device.name, ")");
      // The smallest larger cluster of the same devices where something fits.
      const int64_t per_node = in.cluster.devices_per_node;
      for (int64_t more = devices * 2; more <= devices * 64; more *= 2) {
        PlanInputs bigger = in;
        bigger.cluster.nodes = std::max<int64_t>(1, (more + per_node - 1) / per_node);
        bool found = false;
        for (const Layout& l : enumerate_layouts(tc, more)) {
          if (predict(bigger, l).fits && validate_layout(config, l).empty()) {
            r.impossible += str_cat("; ", more, " devices (", bigger.cluster.nodes, " node",
                                    bigger.cluster.nodes > 1 ? "s" : "", ") would fit it, e.g. ", l.describe());
            found = true;
            break;
          }
        }
        if (found) break;
        if (more * 2 > devices * 64)
          r.impossible += str_cat("; not even ", more, " devices would: make the model smaller or the devices larger");
      }
      if (tc.train.batch_size > 1)
        r.impossible += str_cat("; or lower train.batch_size (now ", tc.train.batch_size, ")");
    } else {
      r.impossible = str_cat("every layout that fits failed the config's validation (", r.invalid, " tried)");
    }
  }
  const Layout own = layout_of(tc);
  if (own.devices() == devices) {
    r.given = Plan{own, predict(in, own)};
    if (r.given->cost.fits)
      r.given_rank = 1 + std::count_if(feasible.begin(), feasible.end(),
                                       [&](const Plan& p) { return p.cost.step_s < r.given->cost.step_s; });
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace trireme::plan
