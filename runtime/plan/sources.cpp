#include "plan/sources.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <tuple>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/descriptor.hpp"
#include "loader/host.hpp"
#include "loader/selection.hpp"
#include "parallel/pipeline_plan.hpp"
#include "train/layout_rules.hpp"
#include "train/pipeline.hpp"

namespace loom::plan {

namespace {
// Up to this many micro-batches a schedule's action order is simulated; past it the closed forms
// hold (pipes()). Past kPlanned the planner does not even build the plan to hear a refusal: the
// search's own filters cover the built-in schedules' rules there.
constexpr int kSimulated = 256, kPlanned = 4096;
}  // namespace

struct PluginSources::State {
  plugins::Registry registry;
  // The plugins' options: the user's config's, or every default when the plan has no config.
  config::Config cfg;
  struct Cost {
    const loom_plugin* desc = nullptr;
    loom_cost_fn fn = nullptr;  // nullptr: the plugin has no cost entry
    loom_options options{};
  };
  std::map<std::string, Cost> costs;
  // Each pipeline shape's makespan at backward cost 2 and 3 (see pipes()), or the schedule
  // plugin's refusal of that shape.
  struct Line {
    double at2 = 0, at3 = 0;
    int in_flight = 0, deferred = 0;
    std::string refused;
  };
  std::map<std::tuple<std::string, int, int, int>, Line> lines;
  std::map<std::pair<std::string, int>, const loom_plugin*> descs;
  std::map<std::pair<std::string, int>, std::string> missing;
  std::map<std::tuple<std::string, int, int, std::vector<double>>, std::vector<int32_t>> splits;
  State(std::vector<plugins::SearchDir> dirs, const std::string& tables)
      : registry(std::move(dirs)),
        cfg(config::Config::parse(tables.empty() ? "[plugins]\n" : tables, "<plan: [plugins]>")) {}

  const Cost& cost_of(const std::string& name) {
    auto it = costs.find(name);
    if (it != costs.end()) return it->second;
    const plugins::Found found = registry.find(name, LOOM_KIND_PARALLEL);
    plugins::check_options(cfg, found.desc);  // fills the defaults, as a run does
    return costs[name] = Cost{found.desc, plugins::cost_entry(found.desc),
                              plugins::options_for(cfg, found.desc->name)};
  }

  // The schedule plugin's plan of one shape, built as plan_pipeline builds a run's.
  PipelinePlan plan(const std::string& schedule, int pp, int m, int chunks) {
    const plugins::Found found = registry.find(schedule, LOOM_KIND_PARALLEL);
    loom_options options = plugins::options_for(cfg, schedule);
    return PipelinePlan(found, &options, loom_pipeline_shape{pp, m, chunks > 1 ? chunks : 0});
  }

  // The schedule plugin's split of the layers, as plan_pipeline asks for it (no pp_layout); the
  // split does not depend on the micro-batch count, so the plan has pp of them.
  const std::vector<int32_t>& split(const std::string& schedule, int pp, int chunks,
                                    const std::vector<double>& costs) {
    std::vector<int32_t>& out = splits[std::make_tuple(schedule, pp, chunks, costs)];
    if (out.empty())
      out = plan(schedule, pp, pp, chunks)
                .partition(train::layer_kinds(int64_t(costs.size()) - 2), costs, "");
    return out;
  }

  // A plugin found once, or why it was not: the search asks for each layout, and a failed find
  // lists the plugin directories and builds a "did you mean".
  const loom_plugin* plugin(const std::string& name, loom_kind kind) {
    const std::pair<std::string, int> key{name, int(kind)};
    if (auto miss = missing.find(key); miss != missing.end()) throw ConfigError(miss->second);
    const loom_plugin*& d = descs[key];
    if (!d) {
      try {
        d = registry.find(name, kind).desc;
      } catch (const std::runtime_error& e) {
        missing[key] = e.what();
        throw;
      }
    }
    return d;
  }

  // One shape's simulated line, or the schedule's refusal of it, which is then the run's.
  const Line& line(const std::string& schedule, int pp, int m, int chunks) {
    Line& line = lines[std::make_tuple(schedule, pp, m, chunks)];
    if (line.in_flight != 0 || !line.refused.empty()) return line;
    try {
      const PipelinePlan p = plan(schedule, pp, m, chunks);
      line.in_flight = p.peak_in_flight(0);
      for (int r = 0; r < pp; ++r) line.deferred = std::max(line.deferred, p.peak_deferred(r));
      if (m <= kSimulated)
        line.at2 = p.simulate(1.0, 2.0).makespan, line.at3 = p.simulate(1.0, 3.0).makespan;
    } catch (const ConfigError& e) {
      line.refused = e.what();
    }
    return line;
  }
};

// An ABI 2 entry writes elements of ABI 2's size (plugins::kCostV2Size), copied into ABI 3's with
// every = 0 (each step); the ABI 1 adapter's entry writes ABI 3's.

loom_status call_cost(const loom_plugin* desc, loom_cost_fn fn, const loom_options& opts,
                      const loom_cost_query& q, std::vector<loom_cost_collective>& out, int64_t& n,
                      loom_error& e) {
  if (desc->v.major != 2) return fn(desc, &opts, &q, out.data(), n, &n, &e);
  using plugins::kCostV2Size;
  std::vector<unsigned char> raw(static_cast<size_t>(n) * kCostV2Size);
  const loom_status s =
      fn(desc, &opts, &q, reinterpret_cast<loom_cost_collective*>(raw.data()), n, &n, &e);
  if (s == LOOM_OK)
    plugins::widen_costs(raw.data(), std::min<int64_t>(n, static_cast<int64_t>(out.size())),
                         offsetof(loom_cost_collective, every), out.data());
  return s;
}

PluginSources::PluginSources(std::vector<plugins::SearchDir> dirs, const std::string& plugin_tables)
    : state_(std::make_shared<State>(std::move(dirs), plugin_tables)) {}
PluginSources::~PluginSources() = default;

CostSource PluginSources::costs() {
  auto st = state_;
  return [st](const std::string& plugin, const loom_cost_query& q, bool& has) {
    std::vector<loom_cost_collective> out;
    const State::Cost& cost = st->cost_of(plugin);
    has = cost.fn != nullptr;
    if (!has) return out;
    int64_t n = 0;
    loom_error e;
    if (cost.fn(cost.desc, &cost.options, &q, nullptr, 0, &n, &e) != LOOM_OK || n < 0 || n > 4096)
      throw RuntimeError("plugin '" + plugin + "': its cost entry failed: " + plugins::describe(e));
    out.resize(size_t(n));
    if (n && call_cost(cost.desc, cost.fn, cost.options, q, out, n, e) != LOOM_OK)
      throw RuntimeError("plugin '" + plugin + "': its cost entry failed: " + plugins::describe(e));
    for (loom_cost_collective& c : out) {
      c.what[sizeof c.what - 1] = '\0';
      if (c.op < LOOM_COST_ALL_REDUCE || c.op > LOOM_COST_SEND_RECV ||
          c.phase < LOOM_COST_FORWARD || c.phase > LOOM_COST_STEP || c.bytes < 0 || c.calls < 0 ||
          !(c.hidden >= 0 && c.hidden <= 1) || c.group < 0 || c.axis < 0 || c.axis > LOOM_AXES ||
          c.every < 0)
        throw RuntimeError("plugin '" + plugin +
                           "': its cost entry gave an impossible collective ('" + c.what +
                           "': op " + std::to_string(c.op) + ", phase " + std::to_string(c.phase) +
                           ", " + std::to_string(c.bytes) + " bytes x " + std::to_string(c.calls) +
                           ", hidden " + std::to_string(c.hidden) + ")");
    }
    return out;
  };
}

// Up to kSimulated micro-batches the schedule plugin's own order is simulated; past that the
// steady state repeats and the closed forms hold: (v m + p - 1)(1 + k) chunk-forward units
// (zbh1, its backwards split in halves of k / 2: m (1 + k) + (p - 1) max(1, k / 2), the longer
// of a forward and a half on the critical path of its fill), and 1f1b's and zbh1's p
// (interleaved: 2(p - 1) + (v - 1) p + 1) chunks in flight on the first rank.
// The makespan is linear in the backward cost k wherever one critical path stays critical (for
// gpipe and 1f1b everywhere: (m + p - 1)(1 + k)), so each shape is simulated at k = 2 and 3 and
// other k read off that line: a search of 60,000 layouts meets thousands of distinct k.
PipeSource PluginSources::pipes() {
  auto st = state_;
  return [st](const std::string& schedule, int pp, int m, int chunks, double k,
              const std::vector<double>& layer_costs) {
    const int v = std::max(1, chunks);
    PipeShape s;
    s.stage_of = st->split(schedule, pp, chunks, layer_costs);
    if (m > kSimulated) {
      s.makespan = schedule == "zbh1" ? double(m) * (1 + k) + (pp - 1) * std::max(1.0, k / 2)
                                      : (double(v) * m + pp - 1) * (1 + k);
      s.in_flight = schedule == "gpipe"         ? m * v
                    : schedule == "interleaved" ? 2 * (pp - 1) + (v - 1) * pp + 1
                                                : pp;
      // Split backwards pending at once stop growing with m: the simulated shape's.
      if (schedule == "zbh1") s.deferred = st->line(schedule, pp, kSimulated, chunks).deferred;
      return s;
    }
    const State::Line& line = st->line(schedule, pp, m, chunks);
    if (!line.refused.empty()) throw ConfigError(line.refused);
    s.makespan = line.at2 + (k - 2) * (line.at3 - line.at2);
    s.in_flight = line.in_flight;
    s.deferred = line.deferred;
    return s;
  };
}

// The facts of a layout as its run would have them: layout_facts' plugins, with the comm and data
// plugins' real capabilities, then the schedule plugin's plan of the layout's pipeline.
ProblemSource PluginSources::problems() {
  auto st = state_;
  return [st](const Workload& w, const Layout& l) {
    train::LayoutFacts f = layout_facts(w, l);
    try {
      if (!f.comm.empty()) train::comm_facts(f, st->plugin(f.comm, LOOM_KIND_COMM));
    } catch (const std::runtime_error& e) {
      // The cluster's comm runs on the cluster's build (nccl needs CUDA and NCCL, which this one
      // may lack): planned as it ships there, send and recv declared. The config's own comm
      // would fail its run here too.
      if (!w.comm_of_cluster) return std::string(e.what());
    }
    try {
      if (!f.data.empty()) train::data_facts(f, st->plugin(f.data, LOOM_KIND_PARALLEL));
    } catch (const std::runtime_error& e) {  // not installed: the run would fail to find it too
      return std::string(e.what());
    }
    std::string why = train::layout_problem(f);
    if (why.empty() && l.pp > 1) {  // the batch splits: layout_problem said so
      const int64_t m = w.global_batch / (int64_t{l.dp} * l.ep) / l.micro_batch;
      if (m <= kPlanned) why = st->line(l.schedule, l.pp, int(m), l.chunks).refused;
    }
    return why;
  };
}

}  // namespace loom::plan
