#include "plan/search.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/errors.hpp"
#include "core/nearest.hpp"

namespace loom::plan {

namespace {

const std::vector<std::string> kFixKeys = {"dp", "tp", "pp",       "cp",     "ep",       "zero",
                                           "mb", "sp", "schedule", "chunks", "recompute"};

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::string value_of(const Layout& l, const std::string& key) {
  if (key == "dp") return std::to_string(l.dp);
  if (key == "tp") return std::to_string(l.tp);
  if (key == "pp") return std::to_string(l.pp);
  if (key == "cp") return std::to_string(l.cp);
  if (key == "ep") return std::to_string(l.ep);
  if (key == "zero") return std::to_string(l.zero);
  if (key == "mb") return std::to_string(l.micro_batch);
  if (key == "sp") return l.sp ? "true" : "false";
  if (key == "schedule") return l.pp > 1 ? l.schedule : "";
  if (key == "chunks") return std::to_string(l.chunks);
  return l.recompute;
}

// Micro-batches tried: powers of two up to 16, and the whole per-rank batch.
std::vector<int> micro_batches(int64_t per_rank) {
  std::vector<int> out;
  for (int mb = 1; mb <= 16 && mb <= per_rank; mb *= 2)
    if (per_rank % mb == 0) out.push_back(mb);
  if (per_rank <= 4096 && std::find(out.begin(), out.end(), int(per_rank)) == out.end())
    out.push_back(int(per_rank));
  return out;
}

// Model chunks per rank for the interleaved schedule: every depth up to 8 whose chunks each hold
// at least one block (Loom balances uneven chunks by cost), and any depth --fix names.
std::vector<int> interleave_depths(int64_t blocks, int pp, const Fixed& fixed) {
  std::vector<int> out;
  for (int v = 2; v <= 8 && int64_t{pp} * v <= blocks; ++v) out.push_back(v);
  const auto it = fixed.values.find("chunks");
  if (it != fixed.values.end()) {
    const int v = std::atoi(it->second.c_str());
    if (v > 8 && int64_t{pp} * v <= blocks) out.push_back(v);
  }
  return out;
}

}  // namespace

bool Fixed::allows(const Layout& l) const {
  for (const auto& [k, v] : values) {
    const std::string have = value_of(l, k);
    if (k == "schedule" && l.pp == 1) return false;
    if (have != v) return false;
  }
  return true;
}

Fixed parse_fixed(const std::vector<std::string>& items) {
  Fixed f;
  for (const std::string& item : items) {
    std::istringstream in(item);
    std::string part;
    while (std::getline(in, part, ',')) {
      const size_t eq = part.find('=');
      if (eq == std::string::npos)
        throw ConfigError("--fix " + part + ": expected KEY=VALUE (" +
                          "tp=8, zero=1, schedule=1f1b)");
      const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
      if (std::find(kFixKeys.begin(), kFixKeys.end(), key) == kFixKeys.end())
        throw ConfigError("--fix " + part + ": unknown key '" + key + "'" +
                          did_you_mean(key, kFixKeys));
      f.values[key] = value == "on" ? "true" : value == "off" ? "false" : value;
    }
  }
  return f;
}

std::vector<Layout> candidate_layouts(const Workload& w, int devices, int max_tp,
                                      const Fixed& fixed, const ProblemSource& problems) {
  std::vector<Layout> out;
  const auto& m = w.model;
  const bool moe = m.moe.experts > 0;
  for (int tp : divisors(devices)) {
    if (tp > max_tp) continue;
    for (int cp : divisors(devices / tp)) {
      if (cp > 1 && (cp & (cp - 1))) continue;  // powers of two: the zig-zag split
      for (int ep : divisors(devices / tp / cp)) {
        if (ep > 1 && !moe) continue;
        for (int pp : divisors(devices / tp / cp / ep)) {
          const int dp = devices / tp / cp / ep / pp;
          if (pp > m.n_layer) continue;
          Layout base;
          base.dp = dp, base.tp = tp, base.pp = pp, base.cp = cp, base.ep = ep;
          if (w.global_batch % (int64_t(dp) * ep)) continue;
          const int64_t per_rank = w.global_batch / (int64_t(dp) * ep);
          for (int mb : micro_batches(per_rank)) {
            const int64_t micro = per_rank / mb;
            std::vector<std::pair<std::string, int>> schedules = {{"1f1b", 1}};
            if (pp > 1) {
              schedules.push_back({"gpipe", 1});
              schedules.push_back({"zbh1", 1});
              for (int v : interleave_depths(m.n_layer, pp, fixed))
                if (micro % pp == 0) schedules.push_back({"interleaved", v});
            }
            for (const auto& [sched, v] : schedules)
              for (int zero = 0; zero <= (dp * ep * cp > 1 && w.data_plugin.empty() ? 3 : 0);
                   ++zero)
                for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp)
                  for (const char* rc : {"none", "selective", "full"}) {
                    Layout l = base;
                    l.micro_batch = mb, l.schedule = sched, l.chunks = v, l.zero = zero, l.sp = sp,
                    l.recompute = rc;
                    if (!fixed.allows(l) || !planner_limits(w, l).empty() ||
                        !problems(w, l).empty())
                      continue;
                    out.push_back(l);
                  }
          }
        }
      }
    }
  }
  return out;
}

SearchResult search(const Cluster& c, const Workload& w, int devices, const Fixed& fixed,
                    const CostSource& costs, const PipeSource& pipes,
                    const ProblemSource& problems) {
  SearchResult r;
  const int max_tp = c.shared_cores > 0 ? devices : std::min(devices, c.per_node);
  for (const Layout& l : candidate_layouts(w, devices, max_tp, fixed, problems)) {
    Estimate e = estimate(c, w, l, costs, pipes);
    for (const auto& n : e.notes)
      if (std::find(r.notes.begin(), r.notes.end(), n) == r.notes.end()) r.notes.push_back(n);
    r.ranked.push_back(std::move(e));
    ++r.considered;
  }
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const Estimate& a, const Estimate& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return a.step_ms < b.step_ms;
    return a.memory.total() < b.memory.total();
  });
  return r;
}

// "X% slower, mostly exposed communication (311 ms against 94 ms)": where `other` loses to `best`.
std::string versus(const Estimate& best, const Estimate& other) {
  struct Part {
    const char* name;
    double best, other;
  };
  const Part parts[] = {{"compute", best.forward_ms + best.backward_ms + best.recompute_ms,
                         other.forward_ms + other.backward_ms + other.recompute_ms},
                        {"exposed communication", best.exposed_comm_ms, other.exposed_comm_ms},
                        {"pipeline bubble", best.bubble_ms, other.bubble_ms},
                        {"optimizer", best.optimizer_ms, other.optimizer_ms}};
  const Part* worst = &parts[0];
  for (const Part& p : parts)
    if (p.other - p.best > worst->other - worst->best) worst = &p;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  const double slower = other.step_ms / best.step_ms - 1;
  if (slower < 0) {  // ranked lower by the slow end of its band (calibration.hpp)
    os << -100 * slower << "% faster as predicted, ranked lower as extrapolated";
    if (!other.extrapolated.empty()) os << " (" << other.extrapolated << ")";
  } else {
    os << 100 * slower << "% slower, mostly " << worst->name << " (" << worst->other
       << " ms against " << worst->best << " ms)";
  }
  if (!other.fits) os << ", and it does not fit: " << other.why_not;
  return os.str();
}

std::string reason(const SearchResult& r) {
  if (r.ranked.empty()) return "";
  const Estimate& best = r.ranked.front();
  if (!best.fits) return "no layout fits: the smallest needs " + best.why_not.substr(6);
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  const double compute = best.forward_ms + best.backward_ms + best.recompute_ms;
  os << best.layout.name() << ": compute " << 100 * compute / best.step_ms
     << "% of the step, exposed communication " << 100 * best.exposed_comm_ms / best.step_ms
     << "%, bubble " << 100 * best.bubble_ms / best.step_ms << "%";
  // The fastest layout of another shape (different dp/tp/pp/cp/ep), and what costs it more.
  for (const Estimate& e : r.ranked) {
    const Layout &a = best.layout, &b = e.layout;
    if (!e.fits || (a.tp == b.tp && a.pp == b.pp && a.cp == b.cp && a.ep == b.ep && a.dp == b.dp))
      continue;
    os << "; the best other shape, " << b.name() << ", is " << versus(best, e);
    break;
  }
  return os.str();
}

}  // namespace loom::plan
