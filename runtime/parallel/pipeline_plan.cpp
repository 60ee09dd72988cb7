#include "parallel/pipeline_plan.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/errors.hpp"
#include "loader/host.hpp"

namespace loom {

namespace {

std::string label(const loom_pipe_action& a, bool chunks) {
  std::string s = "FBW"[a.op] + std::to_string(a.microbatch);
  if (chunks) s += "." + std::to_string(a.chunk);
  return s;
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

double PipeTimeline::bubble() const {
  if (ranks.empty() || makespan <= 0) return 0;
  double busy = 0;
  for (const auto& r : ranks)
    for (const auto& s : r) busy += s.end - s.start;
  return 1 - busy / (makespan * static_cast<double>(ranks.size()));
}

PipelinePlan::PipelinePlan(const plugins::Found& plugin, const loom_options* options,
                           loom_pipeline_shape shape)
    : name_(plugin.desc->name), shape_(shape) {
  if (plugin.desc->slot != LOOM_SLOT_PIPELINE)
    throw ConfigError("plugin '" + name_ + "' is not a pipeline schedule");
  plugin_ = std::make_unique<plugins::Instance>(plugin, options);
  table_ = plugin_->table<loom_pipeline_v2>();
  loom_error e;
  loom_status s = table_->configure(plugin_->self(), &shape_, &e);
  if (s == LOOM_BAD_CONFIG) throw ConfigError(e.message);
  if (s != LOOM_OK)
    throw RuntimeError("pipeline schedule '" + name_ + "': " + plugins::describe(e));
  if (shape_.chunks < 1) throw RuntimeError("pipeline schedule '" + name_ + "' left chunks at 0");
  const int64_t cap = 3 * int64_t{shape_.microbatches} * shape_.chunks;
  for (int r = 0; r < shape_.stages; ++r) {
    std::vector<loom_pipe_action> a(cap);
    int64_t n = 0;
    s = table_->schedule(plugin_->self(), &shape_, r, a.data(), cap, &n, &e);
    if (s != LOOM_OK)
      throw RuntimeError("pipeline schedule '" + name_ + "' for rank " + str(r) + ": " +
                         plugins::describe(e));
    if (n < 0 || n > cap)
      throw RuntimeError("pipeline schedule '" + name_ + "' for rank " + str(r) + " reports " +
                         str(n) + " actions; a step has at most " + str(cap));
    a.resize(n);
    actions_.push_back(std::move(a));
  }
  check();
}

bool PipelinePlan::split(int rank, int microbatch, int chunk) const {
  return split_[rank][static_cast<size_t>(chunk) * shape_.microbatches + microbatch];
}

PipelinePlan::~PipelinePlan() = default;

std::vector<int32_t> PipelinePlan::partition(const std::string& kinds,
                                             const std::vector<double>& costs,
                                             const std::string& layout) const {
  std::vector<int32_t> stage_of(kinds.size(), -1);
  loom_error e;
  loom_status s =
      table_->partition(plugin_->self(), &shape_, static_cast<int32_t>(kinds.size()), kinds.c_str(),
                        costs.data(), layout.c_str(), stage_of.data(), &e);
  if (s == LOOM_BAD_CONFIG) throw ConfigError(e.message);
  if (s != LOOM_OK)
    throw RuntimeError("pipeline schedule '" + name_ + "' partition: " + plugins::describe(e));
  // Contiguous, in order, every virtual stage used: the runtime relies on all three.
  int expect = 0;
  for (size_t i = 0; i < stage_of.size(); ++i) {
    if (stage_of[i] == expect + 1 && i > 0) ++expect;
    if (stage_of[i] != expect)
      throw RuntimeError("pipeline schedule '" + name_ + "' put layer " + str(i) + " in stage " +
                         str(stage_of[i]) + ": stages must be contiguous and in order");
  }
  if (expect + 1 != virtual_stages())
    throw RuntimeError("pipeline schedule '" + name_ + "' used " + str(expect + 1) + " of " +
                       str(virtual_stages()) + " stages");
  return stage_of;
}

// Each rank must run every (micro-batch, chunk) forward once and backward once, the backward
// after the forward, and at most one weight action, after the backward; then the order must
// finish under the execution rules.
void PipelinePlan::check() {
  const int m = shape_.microbatches, v = shape_.chunks;
  split_.assign(shape_.stages, std::vector<bool>(static_cast<size_t>(m) * v, false));
  for (int r = 0; r < shape_.stages; ++r) {
    std::vector<int> seen(3 * m * v, 0);
    for (const auto& a : actions_[r]) {
      if (a.microbatch < 0 || a.microbatch >= m || a.chunk < 0 || a.chunk >= v || a.op < 0 ||
          a.op > 2)
        throw RuntimeError("pipeline schedule '" + name_ + "' gave rank " + str(r) +
                           " an action outside " + str(m) + " micro-batches x " + str(v) +
                           " chunks (or an op other than F, B, W)");
      auto count = [&](int op) -> int& { return seen[(op * v + a.chunk) * m + a.microbatch]; };
      if (++count(a.op) > 1)
        throw RuntimeError("pipeline schedule '" + name_ + "' runs " + label(a, v > 1) +
                           " twice on rank " + str(r));
      const int before = a.op == LOOM_PIPE_WEIGHT ? LOOM_PIPE_BACKWARD : LOOM_PIPE_FORWARD;
      if (a.op != LOOM_PIPE_FORWARD && count(before) == 0)
        throw RuntimeError("pipeline schedule '" + name_ + "' runs " + label(a, v > 1) +
                           " before its " + (before == LOOM_PIPE_FORWARD ? "forward" : "backward") +
                           " on rank " + str(r));
      if (a.op == LOOM_PIPE_WEIGHT)
        split_[r][static_cast<size_t>(a.chunk) * m + a.microbatch] = true;
    }
    const int64_t weights = std::count(split_[r].begin(), split_[r].end(), true);
    if (static_cast<int64_t>(actions_[r].size()) != 2 * m * v + weights)
      throw RuntimeError("pipeline schedule '" + name_ + "' gave rank " + str(r) + " " +
                         str(actions_[r].size()) + " actions; a step needs " + str(2 * m * v) +
                         " forwards and backwards" +
                         (weights ? " and its " + str(weights) + " weight actions" : ""));
  }
  simulate();
}

PipeTimeline PipelinePlan::simulate(double forward_cost, double backward_cost,
                                    double weight_share) const {
  const int p = shape_.stages, S = virtual_stages();
  std::map<std::tuple<int, int, int>, double> done;  // (op, micro-batch, virtual stage) -> end
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  PipeTimeline t;
  t.ranks.resize(p);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < actions_[r].size()) {
        const loom_pipe_action& a = actions_[r][next[r]];
        const int s = virtual_stage(r, a.chunk);
        std::tuple<int, int, int> needs;
        bool has_dep = true;
        if (a.op == LOOM_PIPE_FORWARD) {
          has_dep = s > 0;
          needs = {LOOM_PIPE_FORWARD, a.microbatch, s - 1};
        } else if (a.op == LOOM_PIPE_WEIGHT) {
          has_dep = false;  // its backward ran earlier on this rank
        } else {
          needs = s + 1 < S ? std::tuple{LOOM_PIPE_BACKWARD, a.microbatch, s + 1}
                            : std::tuple{LOOM_PIPE_FORWARD, a.microbatch, s};
        }
        double ready = 0;
        if (has_dep) {
          auto it = done.find(needs);
          if (it == done.end()) break;
          ready = it->second;
        }
        const double start = std::max(free_at[r], ready);
        const double weight = backward_cost * weight_share;
        const double cost = a.op == LOOM_PIPE_FORWARD         ? forward_cost
                            : a.op == LOOM_PIPE_WEIGHT        ? weight
                            : split(r, a.microbatch, a.chunk) ? backward_cost - weight
                                                              : backward_cost;
        const double end = start + cost;
        done[{a.op, a.microbatch, s}] = end;
        free_at[r] = end;
        t.ranks[r].push_back({a, start, end});
        t.makespan = std::max(t.makespan, end);
        ++next[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    if (next[r] < actions_[r].size())
      stuck += "\n  rank " + str(r) + " waits to run " +
               label(actions_[r][next[r]], shape_.chunks > 1) + " (action " + str(next[r]) +
               " of " + str(actions_[r].size()) + ")";
  if (!stuck.empty())
    throw RuntimeError("pipeline schedule '" + name_ + "' would deadlock (pp = " + str(p) + ", " +
                       str(shape_.microbatches) + " micro-batches, " + str(shape_.chunks) +
                       " chunks): every rank left is waiting on another" + stuck);
  return t;
}

// On a timeline where a forward takes 1 and a backward 2 (1 + 1 when split), every end time is
// an integer, so equal points compare exactly.
std::vector<PipeExchange> PipelinePlan::exchanges(int rank) const {
  const PipeTimeline t = simulate(1, 2, 0.5);
  const int p = shape_.stages, S = virtual_stages();
  std::map<std::tuple<int, int, int>, double> ends;  // (op, micro-batch, virtual stage) -> end
  for (int r = 0; r < p; ++r)
    for (const PipeSpan& sp : t.ranks[r])
      ends[{sp.action.op, sp.action.microbatch, virtual_stage(r, sp.action.chunk)}] = sp.end;
  std::map<double, PipeExchange> at;
  const std::vector<PipeSpan>& mine = t.ranks[rank];
  for (size_t k = 0; k < mine.size(); ++k) {
    const loom_pipe_action& a = mine[k].action;
    const int s = virtual_stage(rank, a.chunk);
    if (a.op == LOOM_PIPE_WEIGHT) continue;
    const bool forward = a.op == LOOM_PIPE_FORWARD;
    if (forward ? s + 1 < S : s > 0) at[mine[k].end].sends.push_back(k);
    if (forward ? s > 0 : s + 1 < S)
      at[ends.at({a.op, a.microbatch, forward ? s - 1 : s + 1})].recvs.push_back(k);
  }
  std::vector<PipeExchange> out;
  for (auto& [point, x] : at) {
    x.at = point;
    x.before = mine.size();
    for (size_t k = 0; k < mine.size(); ++k)
      if (mine[k].start >= point) {
        x.before = k;
        break;
      }
    out.push_back(std::move(x));
  }
  return out;
}

int PipelinePlan::peak_in_flight(int rank) const {
  int live = 0, peak = 0;
  for (const auto& a : actions_[rank]) {
    if (a.op != LOOM_PIPE_WEIGHT) live += a.op == LOOM_PIPE_FORWARD ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

int PipelinePlan::peak_deferred(int rank) const {
  int pending = 0, peak = 0;
  for (const auto& a : actions_[rank]) {
    if (a.op == LOOM_PIPE_BACKWARD && split(rank, a.microbatch, a.chunk)) ++pending;
    if (a.op == LOOM_PIPE_WEIGHT) --pending;
    peak = std::max(peak, pending);
  }
  return peak;
}

double PipelinePlan::theoretical_bubble() const {
  const double p = shape_.stages, vm = double(shape_.chunks) * shape_.microbatches;
  return (p - 1) / (vm + p - 1);
}

std::string PipelinePlan::render(const PipeTimeline& t) const {
  const bool chunks = shape_.chunks > 1;
  const int slots = static_cast<int>(std::ceil(t.makespan - 1e-9));
  size_t width = 2;
  for (const auto& r : t.ranks)
    for (const auto& s : r) width = std::max(width, label(s.action, chunks).size());
  ++width;
  auto cell = [&](std::string s) { return s + std::string(width - s.size(), ' '); };
  std::string out = "time    ";
  for (int i = 0; i < slots; ++i) out += cell(str(i));
  out += "\n";
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::string row = "rank " + str(r);
    row += std::string(8 - std::min<size_t>(8, row.size()), ' ');
    for (int i = 0; i < slots; ++i) {
      std::string c = ".";
      for (const auto& s : t.ranks[r])
        if (s.start <= i + 1e-9 && i + 0.5 < s.end) c = label(s.action, chunks);
      row += cell(c);
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

}  // namespace loom
