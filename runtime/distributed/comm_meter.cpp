#include "distributed/comm_meter.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace loom::dist {

namespace {

using Interval = std::pair<MeterClock::time_point, MeterClock::time_point>;

struct Group {
  int64_t calls = 0, bytes = 0;
  std::vector<Interval> in_flight;  // issue to completion
  std::vector<Interval> blocked;    // the training thread inside a call or a wait
};

struct Pending {
  std::string group;
  MeterClock::time_point issued;
};

struct Meter {
  std::mutex m;
  std::map<const loom_comm*, std::string> names;
  std::map<std::string, Group> groups;
  std::map<loom_work*, Pending> pending;  // issued, not yet waited on
  std::thread::id training;
  MeterClock::time_point window = MeterClock::now();  // the last take_traffic
};

Meter& meter() {
  static Meter* m = new Meter();  // operations may still finish while the process exits
  return *m;
}

double ms(MeterClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The time the intervals cover after `from`, each instant once: an operation issued before the
// window (the last step's gathers, waited for in this one) counts from the window's start.
double union_ms(std::vector<Interval> v, MeterClock::time_point from) {
  for (Interval& i : v) i.first = std::max(i.first, from);
  std::sort(v.begin(), v.end());
  double total = 0;
  for (size_t i = 0; i < v.size();) {
    Interval run = v[i++];
    while (i < v.size() && v[i].first <= run.second)
      run.second = std::max(run.second, v[i++].second);
    if (run.second > run.first) total += ms(run.second - run.first);
  }
  return total;
}

// The caller holds the lock.
std::string group_of(Meter& m, const loom_comm* comm) {
  auto it = m.names.find(comm);
  return it == m.names.end() ? "other" : it->second;
}

}  // namespace

void meter_name(const loom_comm* comm, const std::string& name) {
  std::lock_guard<std::mutex> lock(meter().m);
  meter().names[comm] = name;
}

void meter_training_thread() {
  std::lock_guard<std::mutex> lock(meter().m);
  meter().training = std::this_thread::get_id();
}

void meter_issue(const loom_comm* comm, int64_t bytes, loom_work* work, MeterClock::time_point t0,
                 MeterClock::time_point t1) {
  Meter& m = meter();
  std::lock_guard<std::mutex> lock(m.m);
  const bool blocking_training = std::this_thread::get_id() == m.training;
  const std::string name = group_of(m, comm);
  Group& g = m.groups[name];
  ++g.calls;
  g.bytes += bytes;
  if (blocking_training) g.blocked.push_back({t0, t1});  // issuing blocks too, however briefly
  if (work)
    m.pending[work] = {name, t0};
  else
    g.in_flight.push_back({t0, t1});
}

void meter_wait(loom_work* work, MeterClock::time_point t0, MeterClock::time_point t1) {
  Meter& m = meter();
  std::lock_guard<std::mutex> lock(m.m);
  const bool blocking_training = std::this_thread::get_id() == m.training;
  auto it = m.pending.find(work);
  if (it == m.pending.end()) return;
  Group& g = m.groups[it->second.group];
  g.in_flight.push_back({it->second.issued, t1});
  if (blocking_training) g.blocked.push_back({t0, t1});
  m.pending.erase(it);
}

std::vector<GroupTraffic> take_traffic() {
  Meter& m = meter();
  std::lock_guard<std::mutex> lock(m.m);
  std::vector<GroupTraffic> out;
  for (auto& [name, g] : m.groups) {
    if (g.calls == 0 && g.in_flight.empty()) continue;
    out.push_back(
        {name, g.calls, g.bytes, union_ms(g.in_flight, m.window), union_ms(g.blocked, m.window)});
    if (std::getenv("LOOM_DEBUG_METER")) {
      double sum = 0;
      for (const Interval& i : g.blocked) sum += ms(i.second - i.first);
      std::fprintf(
          stderr,
          "[meter] %s: %lld calls, blocked %.2f ms summed, %.2f ms as a union, window %.2f ms\n",
          name.c_str(), (long long)g.calls, sum, out.back().exposed_ms,
          ms(MeterClock::now() - m.window));
    }
    g = Group();
  }
  m.window = MeterClock::now();
  return out;
}

}  // namespace loom::dist
