#include "plan/mixed.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/errors.hpp"
#include "distributed/node_groups.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "plan/from_config.hpp"
#include "plan/sources.hpp"
#include "train/pipeline.hpp"

namespace loom::plan {

namespace {

using Ranges = std::vector<int>;  // stage s holds layers [r[s], r[s + 1]) of E, the blocks, L

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(b < 10 ? "%.2f" : "%.1f", b) + " " + units[u];
}

// The group of every pipeline stage: the groups in `order` hold consecutive stages, as many as
// their devices make (world / pp ranks each).
std::vector<int> stage_groups(const MixedCluster& mc, const Layout& l,
                              const std::vector<int>& order) {
  const int per_stage = l.world() / l.pp;
  std::vector<int> out;
  for (int g : order)
    for (int s = 0; s < mc.groups[size_t(g)].devices() / per_stage; ++s) out.push_back(g);
  return out;
}

// A stage's part of the model: its blocks (MoE ones counted), and the ends it holds.
StagePart part_of(const model::Config& m, int from, int to) {
  StagePart p;
  p.average = false;
  p.first = from == 0, p.last = to == m.n_layer + 2;
  for (int i = std::max(from, 1); i < std::min(to, int(m.n_layer) + 1); ++i) {
    p.blocks += 1;
    p.moe_blocks += m.is_moe_block(i - 1) ? 1 : 0;
  }
  p.head_share = p.last ? 1 : 0;
  return p;
}

// What each layer adds to a stage's forward and backward per micro-batch on one group (ms), and
// what a stage costs with none (its share of in-loop communication and fixed overheads).
struct LayerCosts {
  double base = 0, dense = 0, moe = 0, head = 0;
};

LayerCosts layer_costs_on(const Cluster& c, const Workload& w, const Layout& l,
                          const CostSource& costs) {
  auto time = [&](double blocks, double moe_blocks, bool head) {
    StagePart p;
    p.average = false, p.blocks = blocks, p.moe_blocks = moe_blocks, p.last = head,
    p.head_share = head ? 1 : 0;
    const StageEstimate s = estimate_stage(c, w, l, p, 1, costs);
    return s.forward_ms + s.backward_ms;
  };
  LayerCosts lc;
  lc.base = time(0, 0, false);
  lc.dense = time(1, 0, false) - lc.base;
  lc.moe = w.model.moe.experts > 0 ? time(1, 1, false) - lc.base : lc.dense;
  lc.head = time(0, 0, true) - lc.base;
  return lc;
}

// The contiguous split with the smallest slowest stage, every stage holding a block:
// best[s][i] = the least bottleneck of stages 0..s-1 over layers [0, i).
Ranges balanced_split(const model::Config& m, const std::vector<int>& groups,
                      const std::vector<LayerCosts>& by_group) {
  const int S = int(groups.size()), N = int(m.n_layer) + 2;
  auto layer = [&](const LayerCosts& c, int i) {
    return i == 0 ? 0.0 : i == N - 1 ? c.head : m.is_moe_block(i - 1) ? c.moe : c.dense;
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(S) + 1, std::vector<double>(size_t(N) + 1, inf));
  std::vector<std::vector<int>> from(size_t(S) + 1, std::vector<int>(size_t(N) + 1, -1));
  best[0][0] = 0;
  for (int s = 1; s <= S; ++s) {
    const LayerCosts& c = by_group[size_t(groups[size_t(s - 1)])];
    for (int i = 1; i <= N; ++i) {
      double t = c.base;
      for (int j = i - 1; j >= 0; --j) {  // the stage holds [j, i)
        t += layer(c, j);
        if (std::max(j, 1) >= std::min(i, N - 1) || best[size_t(s - 1)][size_t(j)] == inf)
          continue;  // no block in it
        const double worst = std::max(best[size_t(s - 1)][size_t(j)], t);
        if (worst < best[size_t(s)][size_t(i)])
          best[size_t(s)][size_t(i)] = worst, from[size_t(s)][size_t(i)] = j;
      }
    }
  }
  Ranges r(size_t(S) + 1, N);
  for (int s = S, i = N; s > 0; --s) r[size_t(s - 1)] = i = from[size_t(s)][size_t(i)];
  return r;
}

std::string layout_text(const model::Config& m, const Ranges& r) {
  const std::string kinds = train::layer_kinds(m.n_layer);
  std::string out;
  for (size_t s = 0; s + 1 < r.size(); ++s) {
    if (s) out += " |";
    for (int i = r[s]; i < r[s + 1]; ++i)
      out += (out.empty() ? "" : " ") + std::string(1, kinds[size_t(i)]);
  }
  return out;
}

// A [parallel] pp_layout's stages as ranges, spaces optional ("Ett|ttL"); ConfigError when it is
// not pp non-empty stages of the model's layers in order.
Ranges parse_split(const model::Config& m, const std::string& text, int pp) {
  const std::string kinds = train::layer_kinds(m.n_layer);
  Ranges r = {0};
  std::string seen;
  for (char c : text) {
    if (c == '|') {
      if (int(seen.size()) == r.back()) break;  // an empty stage
      r.push_back(int(seen.size()));
    } else if (c != ' ') {
      seen += c;
    }
  }
  r.push_back(int(seen.size()));
  if (seen != kinds || int(r.size()) != pp + 1 || r[r.size() - 2] == r.back())
    throw ConfigError("pp_layout \"" + text + "\" is not " + std::to_string(pp) +
                      " non-empty stages of " + kinds);
  return r;
}

// The split the schedule plugin makes with pp_layout "" (by each layer's cost, devices alike).
Ranges uniform_split(const Workload& w, const Layout& l, int mbs, const PipeSource& pipes) {
  const PipeShape shape = pipes(l.schedule, l.pp, mbs, 1, 2.0, train::layer_costs(w.model));
  Ranges r = {0};
  for (size_t i = 1; i < shape.stage_of.size(); ++i)
    if (shape.stage_of[i] != shape.stage_of[i - 1]) r.push_back(int(i));
  r.push_back(int(shape.stage_of.size()));
  return r;
}

// The pipeline formula of plan/mixed.hpp over stages already costed.
void pipeline_time(MixedEstimate& e, const MixedCluster& mc, const Workload& w, int mbs) {
  const Layout& l = e.layout;
  e.boundary_bytes = double(l.micro_batch) * w.model.seq_len / l.cp * w.model.d_model *
                     (w.dtype == "fp32" ? 4 : 2);
  e.boundary_ms = 2 *
                  (mc.between.latency +
                   (mc.between.bandwidth > 0 ? e.boundary_bytes / mc.between.bandwidth : 0)) *
                  1e3;
  double sum = 0, slowest = 0, after = 0;
  for (size_t s = 0; s < e.stages.size(); ++s) {
    const MixedStage& st = e.stages[s];
    sum += st.time_ms, slowest = std::max(slowest, st.time_ms),
                       after = std::max(after, st.after_ms);
    if (s + 1 < e.stages.size() && e.stages[s + 1].group != st.group)
      sum += e.boundary_ms, slowest = std::max(slowest, e.boundary_ms);
  }
  e.pipeline_ms = sum + (mbs - 1) * slowest;
  e.step_ms = e.pipeline_ms + after;
}

// Costs every stage of a split and the step they make.
MixedEstimate cost_split(const MixedCluster& mc, const Workload& w, const Layout& l,
                         const std::vector<int>& order, const Ranges& r, const CostSource& costs) {
  MixedEstimate e;
  e.layout = l, e.order = order, e.pp_layout = layout_text(w.model, r);
  const std::vector<int> groups = stage_groups(mc, l, order);
  const int mbs = microbatches(w, l);
  double peak = 0;
  for (size_t s = 0; s < groups.size(); ++s) {
    const NodeGroupKind& g = mc.groups[size_t(groups[s])];
    const StagePart p = part_of(w.model, r[s], r[s + 1]);
    const int in_flight = l.schedule == "gpipe" ? mbs : std::min(mbs, l.pp - int(s));
    const StageEstimate se = estimate_stage(g.cluster, w, l, p, in_flight, costs);
    MixedStage st{groups[s],        int(p.blocks), p.first, p.last, se.forward_ms + se.backward_ms,
                  se.after_loop_ms, se.detail};
    if (!st.detail.fits && e.fits)
      e.fits = false,
      e.why_not = "stage " + std::to_string(s) + " on " + g.name + " " + st.detail.why_not;
    e.stages.push_back(st);
    peak += g.cluster.peak(w.dtype) * (l.world() / l.pp);
  }
  pipeline_time(e, mc, w, mbs);
  const double tokens = double(w.global_batch) * w.model.seq_len, seconds = e.step_ms / 1e3;
  e.mfu = w.model.flops_per_token() * tokens / seconds / peak;
  e.tokens_per_s_per_device = tokens / seconds / l.world();
  return e;
}

// What a layout's estimates in every group order share: the checks, each group's per-layer costs
// (when the split is to be balanced) and the devices-alike split.
struct LayoutCosts {
  std::vector<LayerCosts> by_group;
  Ranges uniform;
};

LayoutCosts layout_costs(const MixedCluster& mc, const Workload& w, const Layout& l, bool balance,
                         const CostSource& costs, const PipeSource& pipes) {
  const std::string bad = invalid_reason(w, l);
  if (!bad.empty()) throw ConfigError("layout " + l.name() + ": " + bad);
  if (l.chunks != 1 || (l.schedule != "1f1b" && l.schedule != "gpipe"))
    throw ConfigError(
        "layout " + l.name() +
        ": a mixed cluster's pipeline is costed for 1f1b and gpipe with one chunk per rank");
  LayoutCosts lc;
  for (const NodeGroupKind& g : mc.groups) {
    if (g.cluster.peak(w.dtype) <= 0)
      throw ConfigError("group '" + g.name + "' (" + g.cluster.source + ") gives no " + w.dtype +
                        " peak: plan another precision (--dtype)");
    if (balance) lc.by_group.push_back(layer_costs_on(g.cluster, w, l, costs));
  }
  lc.uniform = uniform_split(w, l, microbatches(w, l), pipes);
  return lc;
}

// One group order: the split `given`, or the balanced one; beside it the devices-alike split's
// step, which is kept instead where its whole step is faster (the balance is of per-layer costs).
MixedEstimate estimate_order(const MixedCluster& mc, const Workload& w, const Layout& l,
                             const std::vector<int>& order, const Ranges* given,
                             const LayoutCosts& lc, const CostSource& costs) {
  const std::vector<int> groups = stage_groups(mc, l, order);
  if (int(groups.size()) != l.pp)
    throw ConfigError("layout " + l.name() + ": the groups hold " + std::to_string(groups.size()) +
                      " stages of " + std::to_string(l.world() / l.pp) + " ranks; it has pp " +
                      std::to_string(l.pp));
  const Ranges split = given ? *given : balanced_split(w.model, groups, lc.by_group);
  MixedEstimate e = cost_split(mc, w, l, order, split, costs);
  if (lc.uniform == split) {
    e.uniform_step_ms = e.step_ms;
  } else {
    MixedEstimate alike = cost_split(mc, w, l, order, lc.uniform, costs);
    if (!given && alike.step_ms < e.step_ms) e = alike;
    e.uniform_step_ms = alike.step_ms;
  }
  e.uniform_pp_layout = layout_text(w.model, lc.uniform);
  return e;
}

}  // namespace

MixedEstimate estimate_mixed(const MixedCluster& mc, const Workload& w, const Layout& l,
                             const std::vector<int>& order, const std::string& pp_layout,
                             const CostSource& costs, const PipeSource& pipes) {
  const LayoutCosts lc = layout_costs(mc, w, l, pp_layout.empty(), costs, pipes);
  if (pp_layout.empty()) return estimate_order(mc, w, l, order, nullptr, lc, costs);
  const Ranges given = parse_split(w.model, pp_layout, l.pp);
  return estimate_order(mc, w, l, order, &given, lc, costs);
}

MixedSearch search_mixed(const MixedCluster& mc, const Workload& w, const Fixed& fixed,
                         const CostSource& costs, const PipeSource& pipes,
                         const ProblemSource& problems) {
  int max_tp = 1 << 30;
  for (const NodeGroupKind& g : mc.groups) max_tp = std::min(max_tp, g.per_node);
  std::vector<int> order(mc.groups.size());
  std::iota(order.begin(), order.end(), 0);
  MixedSearch out;
  for (const Layout& l : candidate_layouts(w, mc.devices(), max_tp, fixed, problems)) {
    if (l.chunks != 1 || (l.schedule != "1f1b" && l.schedule != "gpipe") ||
        (mc.groups.size() > 1 && l.pp == 1))
      continue;
    const int per_stage = l.world() / l.pp;
    if (std::any_of(mc.groups.begin(), mc.groups.end(),
                    [&](const NodeGroupKind& g) { return g.devices() % per_stage != 0; }))
      continue;
    const LayoutCosts lc =
        layout_costs(mc, w, l, true, costs, pipes);  // once per layout, for every order
    std::sort(order.begin(), order.end());
    do {
      out.ranked.push_back(estimate_order(mc, w, l, order, nullptr, lc, costs));
      ++out.considered;
    } while (std::next_permutation(order.begin(), order.end()));
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const MixedEstimate& a, const MixedEstimate& b) {
                     return a.fits != b.fits ? a.fits : a.step_ms < b.step_ms;
                   });
  return out;
}

Estimate summary_of(const MixedEstimate& e) {
  Estimate s;
  s.layout = e.layout;
  s.step_ms = e.step_ms, s.pipeline_ms = e.pipeline_ms, s.mfu = e.mfu,
  s.tokens_per_s_per_device = e.tokens_per_s_per_device;
  s.fits = e.fits, s.why_not = e.why_not;
  for (const MixedStage& st : e.stages) {
    if (st.detail.memory.total() > s.memory.total()) s.memory = st.detail.memory;
    s.exposed_comm_ms = std::max(s.exposed_comm_ms, st.detail.exposed_comm_ms);
  }
  s.extrapolated = "a mixed cluster's pipeline: no calibration run spans node groups";
  return s;
}

std::vector<std::string> group_entries(const MixedCluster& mc, const std::vector<int>& order) {
  std::vector<std::string> out;
  for (int g : order)
    out.push_back(mc.groups[size_t(g)].name +
                  " nodes=" + std::to_string(mc.groups[size_t(g)].nodes));
  return out;
}

std::string explain_mixed(const MixedCluster& mc, const MixedEstimate& e) {
  const Layout& l = e.layout;
  std::string out = "layout " + l.name() + " on " + mc.name + ", groups in node order:";
  for (int g : e.order) out += " " + mc.groups[size_t(g)].name;
  out += "\n  split " + e.pp_layout + ": step " + fmt("%.1f", e.step_ms) + " ms (pipeline " +
         fmt("%.1f", e.pipeline_ms) + " ms)\n";
  for (size_t s = 0; s < e.stages.size(); ++s) {
    const MixedStage& st = e.stages[s];
    const NodeGroupKind& g = mc.groups[size_t(st.group)];
    out += "  stage " + std::to_string(s) + " on " + g.name + " (" + g.cluster.device +
           (g.speed != 1 ? fmt(" at %.3g speed", g.speed) : "") + "): " + (st.first ? "E + " : "") +
           std::to_string(st.blocks) + " block" + (st.blocks == 1 ? "" : "s") +
           (st.last ? " + L" : "") + ", " + fmt("%.2f", st.time_ms) +
           " ms forward and backward per micro-batch, " + fmt("%.2f", st.after_ms) +
           " ms after the loop, " + fmt("%.3f", st.detail.memory.total() / double(1ull << 30)) +
           " GiB" + (st.detail.fits ? "" : " (does not fit)") + "\n";
  }
  out += "  the split the devices-alike default makes, " + e.uniform_pp_layout + ", takes " +
         fmt("%.1f", e.uniform_step_ms) + " ms: ";
  out +=
      e.uniform_pp_layout == e.pp_layout
          ? "the same split\n"
          : "this one is " + fmt("%.1f", 100 * (1 - e.step_ms / e.uniform_step_ms)) + "% faster\n";
  if (mc.groups.size() > 1) {
    const double grads = e.stages.front().detail.memory.grads;
    out += "  the groups meet at pipeline boundaries: " + bytes(e.boundary_bytes) +
           " of activations per micro-batch each way " + "over [between] " + mc.between.kind +
           " (" + fmt("%.3f", e.boundary_ms) + " ms both ways); dp, tp, cp and ep stay inside a " +
           "group, where a data-parallel group across them would reduce " + bytes(grads) +
           " of gradients per rank per step\n";
    out +=
        "  Loom's mesh gives every stage the same dp x tp x cp x ep, so the groups differ in layer "
        "count only\n";
  }
  return out;
}

MixedEstimate predict_mixed(const MixedCluster& mc, const train::JobSettings& job, int world) {
  const std::vector<dist::NodeGroup>& groups = job.groups;
  const dist::ParallelSettings& par = job.parallel;
  MixedCluster run = mc;
  run.groups.clear();
  std::vector<int> order;
  for (const dist::NodeGroup& g : groups) {
    auto it = std::find_if(mc.groups.begin(), mc.groups.end(),
                           [&](const NodeGroupKind& k) { return k.name == g.name; });
    if (it == mc.groups.end())
      throw ConfigError("[parallel] groups names '" + g.name + "', which " + mc.source +
                        " has no [[group]] of");
    NodeGroupKind k = *it;
    k.nodes = g.nodes, k.per_node = k.cluster.per_node = par.nproc;
    order.push_back(int(run.groups.size()));
    run.groups.push_back(k);
  }
  if (groups.empty())
    throw ConfigError(mc.source +
                      " is a mixed cluster: the run needs [parallel] groups naming its [[group]]s");
  PluginSources sources(plugins::Registry::default_dirs(job.plugins.path), job.plugins.tables);
  const Workload w = workload_of(job);
  const Layout l = layout_of(job, world);
  const int mbs = microbatches(w, l);
  const std::string split = par.pp_layout.empty()
                                ? layout_text(w.model, uniform_split(w, l, mbs, sources.pipes()))
                                : par.pp_layout;
  return estimate_mixed(run, w, l, order, split, sources.costs(), sources.pipes());
}

}  // namespace loom::plan
