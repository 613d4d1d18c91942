// Pipeline schedules: generators (GPipe, 1F1B, interleaved 1F1B), the checker, and the
// bubble / activation / timing measures of a table (see pipeline_schedule.h).
#include "trireme/parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "trireme/core/error.h"

namespace trireme::parallel {

ScheduleKind schedule_kind_from_name(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved" || name == "interleaved_1f1b") return ScheduleKind::interleaved;
  TRIREME_FAIL("pipeline schedule '", name, "' is not one of gpipe, 1f1b, interleaved");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
  }
  return "?";
}

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward: return "forward";
    case ActionKind::backward: return "backward";
    case ActionKind::send_activation: return "send_activation";
    case ActionKind::recv_activation: return "recv_activation";
    case ActionKind::send_grad: return "send_grad";
    case ActionKind::recv_grad: return "recv_grad";
  }
  return "?";
}

namespace {

bool is_compute(ActionKind k) { return k == ActionKind::forward || k == ActionKind::backward; }
bool is_send(ActionKind k) { return k == ActionKind::send_activation || k == ActionKind::send_grad; }
bool is_recv(ActionKind k) { return k == ActionKind::recv_activation || k == ActionKind::recv_grad; }

void check_shape(int stages, int micro_batches, int virtual_stages) {
  TRIREME_CHECK(stages >= 1, "pipeline schedule: stages must be >= 1, got ", stages);
  TRIREME_CHECK(micro_batches >= 1, "pipeline schedule: micro_batches must be >= 1, got ", micro_batches);
  TRIREME_CHECK(virtual_stages >= 1, "pipeline schedule: virtual_stages must be >= 1, got ", virtual_stages);
}

}  // namespace

std::string action_describe(const Action& a) {
  std::string s = str_cat(action_kind_name(a.kind), "(mb ", a.micro_batch, ", chunk ", a.chunk, ")");
  if (is_send(a.kind)) s += str_cat(" to rank ", a.peer);
  if (is_recv(a.kind)) s += str_cat(" from rank ", a.peer);
  return s;
}

// ---- Compute orders ----

int pipeline_warmup_count(int stages, int rank, int micro_batches, ScheduleKind kind, int virtual_stages) {
  check_shape(stages, micro_batches, virtual_stages);
  TRIREME_CHECK(rank >= 0 && rank < stages, "pipeline schedule: rank ", rank, " is outside [0, ", stages, ")");
  switch (kind) {
    case ScheduleKind::gpipe: return micro_batches * virtual_stages;
    case ScheduleKind::one_f_one_b: return std::min(stages - rank - 1, micro_batches);
    case ScheduleKind::interleaved: {
      // Megatron: when m == p every forward comes first; otherwise each rank runs ahead by two
      // per later rank (its activations and the gradients coming back) plus a round of chunks.
      const int total = micro_batches * virtual_stages;
      if (micro_batches == stages) return total;
      return std::min((stages - rank - 1) * 2 + (virtual_stages - 1) * stages, total);
    }
  }
  return 0;
}

std::vector<Action> pipeline_compute_order(int stages, int rank, int m, ScheduleKind kind, int v) {
  check_shape(stages, m, v);
  TRIREME_CHECK(rank >= 0 && rank < stages, "pipeline schedule: rank ", rank, " is outside [0, ", stages, ")");
  std::vector<Action> order;
  auto F = [&](int mb, int chunk) { order.push_back({ActionKind::forward, mb, chunk, -1}); };
  auto B = [&](int mb, int chunk) { order.push_back({ActionKind::backward, mb, chunk, -1}); };
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b: {
      TRIREME_CHECK(v == 1, "pipeline schedule ", schedule_kind_name(kind), " runs one chunk per rank, not ", v,
                    " (use interleaved for virtual stages)");
      const int warmup = pipeline_warmup_count(stages, rank, m, kind, 1);
      for (int i = 0; i < warmup; ++i) F(i, 0);
      for (int i = 0; i < m - warmup; ++i) {  // steady state: one forward, one backward
        F(warmup + i, 0);
        B(i, 0);
      }
      for (int i = m - warmup; i < m; ++i) B(i, 0);  // cool-down
      break;
    }
    case ScheduleKind::interleaved: {
      TRIREME_CHECK(v == 1 || stages >= 2, "interleaved pipeline schedule: ", v,
                    " virtual stages need at least 2 pipeline ranks");
      TRIREME_CHECK(m % stages == 0, "interleaved pipeline schedule: micro_batches (", m,
                    ") must be a multiple of the pipeline stages (", stages, ")");
      // Virtual micro-batch k: groups of `stages` micro-batches run through chunk 0, then the
      // same group through chunk 1, ...; backwards visit the chunks in reverse.
      auto chunk_of = [&](int k, bool forward) {
        int c = (k % (stages * v)) / stages;
        return forward ? c : v - 1 - c;
      };
      auto mb_of = [&](int k) { return (k / (stages * v)) * stages + k % stages; };
      const int total = m * v;
      const int warmup = pipeline_warmup_count(stages, rank, m, kind, v);
      for (int k = 0; k < warmup; ++k) F(mb_of(k), chunk_of(k, true));
      for (int k = 0; k < total - warmup; ++k) {
        F(mb_of(warmup + k), chunk_of(warmup + k, true));
        B(mb_of(k), chunk_of(k, false));
      }
      for (int k = total - warmup; k < total; ++k) B(mb_of(k), chunk_of(k, false));
      break;
    }
  }
  return order;
}

// ---- Placing the communication (Note [pipeline communication order]) ----

ScheduleTable pipeline_schedule(int stages, int m, ScheduleKind kind, int v) {
  check_shape(stages, m, v);
  const int p = stages, V = p * v;
  std::vector<std::vector<Action>> orders(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) orders[size_t(r)] = pipeline_compute_order(p, r, m, kind, v);

  // List-schedule the computations with forward = 1, backward = 2 (integers: no ties by rounding).
  // end[(forward?, mb, virtual stage)] = finish time.
  std::map<std::tuple<bool, int, int>, long> end;
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<long> free_at(static_cast<size_t>(p), 0);
  std::vector<std::vector<long>> start(static_cast<size_t>(p));
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& pc = next[size_t(r)];
      while (pc < orders[size_t(r)].size()) {
        const Action& a = orders[size_t(r)][pc];
        const int vs = a.chunk * p + r;
        const bool fwd = a.kind == ActionKind::forward;
        long ready = free_at[size_t(r)];
        auto dep = [&](bool f, int stage) {
          auto it = end.find({f, a.micro_batch, stage});
          if (it == end.end()) return false;
          ready = std::max(ready, it->second);
          return true;
        };
        bool ok = fwd ? (vs == 0 || dep(true, vs - 1)) : (dep(true, vs) && (vs == V - 1 || dep(false, vs + 1)));
        if (!ok) break;
        start[size_t(r)].push_back(ready);
        free_at[size_t(r)] = ready + (fwd ? 1 : 2);
        end[{fwd, a.micro_batch, vs}] = free_at[size_t(r)];
        ++pc;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    TRIREME_CHECK(next[size_t(r)] == orders[size_t(r)].size(), "pipeline_schedule: internal error: the ",
                  schedule_kind_name(kind), " compute order of rank ", r, " stalls at ",
                  action_describe(orders[size_t(r)][next[size_t(r)]]));

  // Items of each rank's table, sorted by (time, class, index): a transfer (class 0) at the time
  // its producer ends, a computation (class 1) at its start. Transfers carry one global index.
  struct Transfer {
    long time;
    int src_vs, dir, mb;  // dir 0: activation (vs -> vs + 1), 1: gradient (vs -> vs - 1)
  };
  std::vector<Transfer> transfers;
  for (const auto& [key, t] : end) {
    auto [fwd, mb, vs] = key;
    if (fwd && vs < V - 1) transfers.push_back({t, vs, 0, mb});
    if (!fwd && vs > 0) transfers.push_back({t, vs, 1, mb});
  }
  std::sort(transfers.begin(), transfers.end(), [](const Transfer& a, const Transfer& b) {
    return std::tie(a.time, a.src_vs, a.dir, a.mb) < std::tie(b.time, b.src_vs, b.dir, b.mb);
  });
  using Key = std::tuple<long, int, long>;
  std::vector<std::vector<std::pair<Key, Action>>> items(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < orders[size_t(r)].size(); ++i)
      items[size_t(r)].push_back({Key{start[size_t(r)][i], 1, long(i)}, orders[size_t(r)][i]});
  for (size_t g = 0; g < transfers.size(); ++g) {
    const Transfer& t = transfers[g];
    const int dst_vs = t.dir == 0 ? t.src_vs + 1 : t.src_vs - 1;
    const int src = t.src_vs % p, dst = dst_vs % p;
    const Key key{t.time, 0, long(g)};
    items[size_t(src)].push_back(
        {key, {t.dir == 0 ? ActionKind::send_activation : ActionKind::send_grad, t.mb, t.src_vs / p, dst}});
    items[size_t(dst)].push_back(
        {key, {t.dir == 0 ? ActionKind::recv_activation : ActionKind::recv_grad, t.mb, dst_vs / p, src}});
  }
  ScheduleTable table(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& list = items[size_t(r)];
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [key, action] : list) table[size_t(r)].push_back(action);
  }
  return table;
}

// ---- The checker ----

namespace {

// A message between virtual stages: (0 activation | 1 gradient, micro-batch, sender's virtual stage).
using Message = std::tuple<int, int, int>;

struct Checker {
  const ScheduleTable& table;
  int p, m, v, V;

  int stage_of(int rank, const Action& a) const { return a.chunk * p + rank; }
  int rank_of(int vs) const { return vs % p; }
  std::string at(int rank, size_t i) const {
    return str_cat("rank ", rank, ", action ", i, " ", action_describe(table[size_t(rank)][i]));
  }
  Message message_of(int rank, const Action& a) const {
    const int vs = stage_of(rank, a);
    switch (a.kind) {
      case ActionKind::send_activation: return {0, a.micro_batch, vs};
      case ActionKind::send_grad: return {1, a.micro_batch, vs};
      case ActionKind::recv_activation: return {0, a.micro_batch, vs - 1};
      case ActionKind::recv_grad: return {1, a.micro_batch, vs + 1};
      default: return {-1, -1, -1};
    }
  }

  // Ranges, and that each send/recv goes to the neighbouring stage in its direction.
  std::string check_static() const {
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < table[size_t(r)].size(); ++i) {
        const Action& a = table[size_t(r)][i];
        if (a.micro_batch < 0 || a.micro_batch >= m)
          return str_cat(at(r, i), ": micro-batch outside [0, ", m, ")");
        if (a.chunk < 0 || a.chunk >= v) return str_cat(at(r, i), ": chunk outside [0, ", v, ")");
        if (is_compute(a.kind)) continue;
        const int vs = stage_of(r, a);
        const bool downstream = a.kind == ActionKind::send_activation || a.kind == ActionKind::recv_grad;
        const int other = downstream ? vs + 1 : vs - 1;
        if (other < 0 || other >= V)
          return str_cat(at(r, i), ": virtual stage ", vs, " has no ", downstream ? "next" : "previous", " stage");
        if (a.peer != rank_of(other))
          return str_cat(at(r, i), ": the peer of virtual stage ", vs, " in this direction is rank ", rank_of(other));
      }
    }
    return "";
  }

  // Every send has exactly one receive with the same message, and the reverse.
  std::string check_matching() const {
    std::map<Message, std::pair<int, size_t>> sends, recvs;
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < table[size_t(r)].size(); ++i) {
        const Action& a = table[size_t(r)][i];
        if (is_compute(a.kind)) continue;
        auto& side = is_send(a.kind) ? sends : recvs;
        auto [it, fresh] = side.emplace(message_of(r, a), std::pair{r, i});
        if (!fresh) return str_cat(at(r, i), ": repeats ", at(it->second.first, it->second.second));
      }
    }
    auto counterpart = [](ActionKind k) {
      switch (k) {
        case ActionKind::send_activation: return ActionKind::recv_activation;
        case ActionKind::recv_activation: return ActionKind::send_activation;
        case ActionKind::send_grad: return ActionKind::recv_grad;
        default: return ActionKind::send_grad;
      }
    };
    for (auto [from, to] : {std::pair{&sends, &recvs}, std::pair{&recvs, &sends}}) {
      for (const auto& [msg, where] : *from) {
        if (to->count(msg)) continue;
        const Action& a = table[size_t(where.first)][where.second];
        return str_cat(at(where.first, where.second), " has no matching ", action_kind_name(counterpart(a.kind)),
                       "(mb ", a.micro_batch, ") on rank ", a.peer);
      }
    }
    return "";
  }

  struct RankState {
    size_t pc = 0;
    std::set<std::pair<int, int>> forwarded, backwarded, got_activation, got_grad;  // (mb, chunk)
  };

  // Per-rank ordering rules for the action at the head of rank r (assumed runnable).
  std::string apply(int r, RankState& s) const {
    const size_t i = s.pc;
    const Action& a = table[size_t(r)][i];
    const std::pair<int, int> id{a.micro_batch, a.chunk};
    const int vs = stage_of(r, a);
    switch (a.kind) {
      case ActionKind::forward:
        if (s.forwarded.count(id)) return str_cat(at(r, i), ": this forward already ran");
        if (vs > 0 && !s.got_activation.count(id)) return str_cat(at(r, i), ": runs before its recv_activation");
        s.forwarded.insert(id);
        break;
      case ActionKind::backward:
        if (s.backwarded.count(id)) return str_cat(at(r, i), ": this backward already ran");
        if (!s.forwarded.count(id)) return str_cat(at(r, i), ": runs before the forward of the same micro-batch");
        if (vs < V - 1 && !s.got_grad.count(id)) return str_cat(at(r, i), ": runs before its recv_grad");
        s.backwarded.insert(id);
        break;
      case ActionKind::send_activation:
        if (!s.forwarded.count(id)) return str_cat(at(r, i), ": sends before the forward that produces it");
        break;
      case ActionKind::send_grad:
        if (!s.backwarded.count(id)) return str_cat(at(r, i), ": sends before the backward that produces it");
        break;
      case ActionKind::recv_activation: s.got_activation.insert(id); break;
      case ActionKind::recv_grad: s.got_grad.insert(id); break;
    }
    ++s.pc;
    return "";
  }

  std::string simulate(CommSemantics semantics) const {
    std::vector<RankState> st(static_cast<size_t>(p));
    std::set<Message> posted;  // eager: sends posted and not yet received
    auto done = [&](int r) { return st[size_t(r)].pc >= table[size_t(r)].size(); };
    auto head = [&](int r) -> const Action& { return table[size_t(r)][st[size_t(r)].pc]; };
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < p; ++r) {
        while (!done(r)) {
          const Action& a = head(r);
          if (is_compute(a.kind)) {
            // Computations never wait.
          } else if (semantics == CommSemantics::eager) {
            if (is_send(a.kind)) {
              posted.insert(message_of(r, a));
            } else if (!posted.erase(message_of(r, a))) {
              break;
            }
          } else if (is_send(a.kind)) {
            // Rendezvous: the send completes with its receive, which must be at the peer's head.
            const int q = a.peer;
            if (done(q) || !is_recv(head(q).kind) || message_of(q, head(q)) != message_of(r, a)) break;
            if (auto err = apply(q, st[size_t(q)]); !err.empty()) return err;
          } else {
            break;  // a receive completes from its sender's side
          }
          if (auto err = apply(r, st[size_t(r)]); !err.empty()) return err;
          progress = true;
        }
      }
    }
    std::string blocked;
    for (int r = 0; r < p; ++r)
      if (!done(r)) blocked += str_cat(blocked.empty() ? "" : "; ", at(r, st[size_t(r)].pc));
    if (!blocked.empty()) return str_cat("deadlock: every unfinished rank waits: ", blocked);
    for (int r = 0; r < p; ++r)
      for (int c = 0; c < v; ++c)
        for (int mb = 0; mb < m; ++mb) {
          if (!st[size_t(r)].forwarded.count({mb, c}))
            return str_cat("rank ", r, " never runs forward(mb ", mb, ", chunk ", c, ")");
          if (!st[size_t(r)].backwarded.count({mb, c}))
            return str_cat("rank ", r, " never runs backward(mb ", mb, ", chunk ", c, ")");
        }
    return "";
  }
};

}  // namespace

std::string pipeline_schedule_check(const ScheduleTable& table, int micro_batches, int virtual_stages,
                                    CommSemantics semantics) {
  if (table.empty()) return "pipeline schedule: the table has no ranks";
  if (micro_batches < 1 || virtual_stages < 1) return "pipeline schedule: micro_batches and virtual_stages must be >= 1";
  const int p = static_cast<int>(table.size());
  Checker c{table, p, micro_batches, virtual_stages, p * virtual_stages};
  if (auto err = c.check_static(); !err.empty()) return err;
  if (auto err = c.check_matching(); !err.empty()) return err;
  return c.simulate(semantics);
}

void pipeline_schedule_require(const ScheduleTable& table, int micro_batches, int virtual_stages,
                               CommSemantics semantics) {
  std::string err = pipeline_schedule_check(table, micro_batches, virtual_stages, semantics);
  TRIREME_CHECK(err.empty(), "pipeline schedule check failed: ", err);
}

// ---- Measures ----

double pipeline_bubble_fraction(int stages, int micro_batches, int virtual_stages) {
  check_shape(stages, micro_batches, virtual_stages);
  return double(stages - 1) / double(virtual_stages * micro_batches + stages - 1);
}

std::vector<int> pipeline_peak_activations(const ScheduleTable& table) {
  std::vector<int> peak;
  for (const auto& actions : table) {
    int live = 0, most = 0;
    for (const Action& a : actions) {
      if (a.kind == ActionKind::forward) most = std::max(most, ++live);
      if (a.kind == ActionKind::backward) --live;
    }
    peak.push_back(most);
  }
  return peak;
}

ScheduleTiming pipeline_schedule_timing(const ScheduleTable& table, double forward_cost, double backward_cost) {
  const int p = static_cast<int>(table.size());
  int v = 1;
  for (const auto& actions : table)
    for (const Action& a : actions) v = std::max(v, a.chunk + 1);
  Checker c{table, p, 0, v, p * v};
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<double> now(static_cast<size_t>(p), 0.0), busy(static_cast<size_t>(p), 0.0);
  std::map<Message, double> sent;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& i = pc[size_t(r)];
      for (; i < table[size_t(r)].size(); ++i) {
        const Action& a = table[size_t(r)][i];
        double& t = now[size_t(r)];
        if (is_compute(a.kind)) {
          double cost = a.kind == ActionKind::forward ? forward_cost : backward_cost;
          t += cost;
          busy[size_t(r)] += cost;
        } else if (is_send(a.kind)) {
          sent[c.message_of(r, a)] = t;
        } else {
          auto it = sent.find(c.message_of(r, a));
          if (it == sent.end()) break;
          t = std::max(t, it->second);
        }
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    TRIREME_CHECK(pc[size_t(r)] == table[size_t(r)].size(), "pipeline_schedule_timing: rank ", r, " stalls at ",
                  c.at(r, pc[size_t(r)]), " (run pipeline_schedule_check)");
  ScheduleTiming timing;
  timing.makespan = *std::max_element(now.begin(), now.end());
  for (int r = 0; r < p; ++r)
    timing.idle_fraction.push_back(timing.makespan > 0 ? 1.0 - busy[size_t(r)] / timing.makespan : 0.0);
  return timing;
}

}  // namespace trireme::parallel
