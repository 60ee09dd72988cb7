// What every communicator moved and how long training waited on it, whichever slot issued it.
// Every operation the runtime or a plugin issues passes through the watched comm table
// (watchdog.cpp), which reports it here: the data slot's gradient buckets, tp's and sp's
// all-reduces and gathers, ep's all-to-alls, cp's ring, pp's sends and receives alike. A step's
// figures per group:
//   bytes     the buffers' sizes S as nccl-tests counts them (all-gather: the gathered size);
//   comm ms   the union of the intervals during which an operation of the group was in flight
//             (issue to return, or to the wait that completed it);
//   exposed   the time the training thread spent blocked in the group's calls and waits: what
//             no compute hid.
#pragma once

#include <loom/plugin.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::dist {

struct GroupTraffic {
  std::string name;  // the communicator's: "tp", "dp", "data", "pp", ...
  int64_t calls = 0;
  int64_t bytes = 0;
  double comm_ms = 0;
  double exposed_ms = 0;
};

// Names a communicator's traffic (Communicator::split); an unnamed one counts as "other".
void meter_name(const loom_comm* comm, const std::string& name);
// The thread whose blocked time is exposed: the one that runs training (CommWorld's).
void meter_training_thread();

using MeterClock = std::chrono::steady_clock;
// From the watched table: an operation on `comm` of `bytes` ran from t0 to t1; `work` is its
// handle when it was issued asynchronously (then it completes at its wait).
void meter_issue(const loom_comm* comm, int64_t bytes, loom_work* work, MeterClock::time_point t0,
                 MeterClock::time_point t1);
void meter_wait(loom_work* work, MeterClock::time_point t0, MeterClock::time_point t1);

// Each named group's traffic since the previous call, in name order; the counters restart.
std::vector<GroupTraffic> take_traffic();

}  // namespace loom::dist
