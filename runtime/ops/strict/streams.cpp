#include "ops/strict/streams.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "core/errors.hpp"
#include "ops/strict/faults.hpp"
#include "ops/strict/memory.hpp"

namespace loom::strict {

namespace {

// clock[T] = the last op of stream T known to have finished before the clock's owner goes on.
using Clock = std::array<uint64_t, kStreams>;

void join(Clock& into, const Clock& other) {
  for (int s = 0; s < kStreams; ++s) into[s] = std::max(into[s], other[s]);
}

struct Task {
  uint64_t seq = 0;
  const char* op = "";
  std::function<void()> work;
};

// One access of a queued op, kept until every other stream is ordered after it.
struct Record {
  const char *lo = nullptr, *hi = nullptr;
  int stream = 0;
  uint64_t seq = 0;
  bool write = false;
  const char* op = "";
};

struct Release {
  int stream = 0;
  uint64_t seq = 0;
  std::function<void()> fn;
};

struct Device {
  std::mutex mu;
  std::condition_variable cv;
  std::array<std::deque<Task>, kStreams> queue;
  Clock issued{}, done{};
  std::array<Clock, kStreams> ordered_after{};  // per stream: what it has waited for
  Clock host{};                                 // what the host has seen finish
  std::vector<Clock> events;
  std::vector<Record> records;
  std::vector<Release> releases;
  std::string failure;  // the first op that threw; every later call reports it
  std::atomic<int> threads{0};
};

Device& device();

thread_local int t_stream = 0;

void worker(int s) {
  Device& d = device();
  int applied = -1;
  for (;;) {
    Task task;
    bool device_failed = false;  // after a failed op, later ones are skipped (a GPU's sticky error)
    {
      std::unique_lock<std::mutex> lock(d.mu);
      d.cv.wait(lock, [&] { return !d.queue[s].empty(); });
      task = std::move(d.queue[s].front());
      d.queue[s].pop_front();
      device_failed = !d.failure.empty();
    }
    const int want = d.threads.load();
    if (want > 0 && want != applied) omp_set_num_threads(applied = want);
    set_running_op(task.op);
    std::string failed;
    try {
      if (!device_failed) task.work();
    } catch (const std::exception& e) {
      failed = std::string("op '") + task.op + "' on the " + stream_name(s) +
               " stream failed: " + e.what();
    }
    set_running_op(nullptr);
    std::lock_guard<std::mutex> lock(d.mu);
    if (!failed.empty() && d.failure.empty()) d.failure = failed;
    d.done[s] = task.seq;
    d.cv.notify_all();
  }
}

Device& device() {
  static Device* d = [] {
    auto* made = new Device;  // never destroyed: workers and tensors outlive static destruction
    for (int s = 0; s < kStreams; ++s) std::thread(worker, s).detach();
    std::atexit([] {
      try {
        synchronize();  // no worker may still run a kernel while the process unloads its libraries
      } catch (...) {
      }
    });
    return made;
  }();
  return *d;
}

void throw_if_failed(Device& d) {
  if (!d.failure.empty()) throw RuntimeError("strict device: " + d.failure);
}

// What stream s is ordered after once it starts its next op: its own waits and the host's.
Clock effective(Device& d, int s) {
  Clock c = d.ordered_after[s];
  join(c, d.host);
  return c;
}

std::string where(const char* p) {
  const std::string what = describe_device_address(p);
  return what.empty() ? "host memory" : what;
}

void check_hazards(Device& d, int s, const char* op, const Access& a, const Clock& after) {
  const char* lo = static_cast<const char*>(a.p);
  const char* hi = lo + a.bytes;
  for (const Record& r : d.records) {
    if (r.stream == s || hi <= r.lo || r.hi <= lo || !(r.write || a.write)) continue;
    if (after[r.stream] >= r.seq) continue;
    throw RuntimeError(
        std::string("strict device: op '") + op + "' on the " + stream_name(s) + " stream " +
        (a.write ? "writes " : "reads ") + where(lo) + ", which op '" + r.op + "' on the " +
        stream_name(r.stream) + " stream " + (r.write ? "writes" : "reads") +
        ", without waiting on that op's event (record_event after it, wait_event before this); "
        "called from " +
        calling_code());
  }
}

// Drops the records every other stream is now ordered after, and lifts the protections the
// host has now seen finish.
void settle(Device& d) {
  std::array<Clock, kStreams> eff;
  for (int s = 0; s < kStreams; ++s) eff[s] = effective(d, s);
  auto stale = [&](const Record& r) {
    for (int s = 0; s < kStreams; ++s)
      if (s != r.stream && eff[s][r.stream] < r.seq) return false;
    return true;
  };
  d.records.erase(std::remove_if(d.records.begin(), d.records.end(), stale), d.records.end());
  std::vector<Release> keep;
  for (Release& r : d.releases) {
    if (d.host[r.stream] >= r.seq)
      r.fn();
    else
      keep.push_back(std::move(r));
  }
  d.releases.swap(keep);
}

std::atomic<int64_t> g_host_waits{0};

void wait_for(Device& d, std::unique_lock<std::mutex>& lock, const Clock& target) {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  d.cv.wait(lock, [&] {
    for (int s = 0; s < kStreams; ++s)
      if (d.done[s] < target[s]) return false;
    return true;
  });
  join(d.host, target);
  settle(d);
  throw_if_failed(d);
}

uint64_t push(Device& d, int s, const char* op, std::function<void()> work) {
  const uint64_t seq = ++d.issued[s];
  d.ordered_after[s][s] = seq;
  d.queue[s].push_back(Task{seq, op, std::move(work)});
  d.cv.notify_all();
  return seq;
}

Clock snapshot(Device& d, int s) {
  Clock c = d.ordered_after[s];
  c[s] = d.issued[s];
  return c;
}

}  // namespace

const char* stream_name(int stream) { return stream == 0 ? "compute" : "comm"; }

void set_stream(int stream) {
  if (stream < 0 || stream >= kStreams)
    throw RuntimeError("strict device: no stream " + std::to_string(stream) +
                       " (LOOM_STREAM_COMPUTE or _COMM)");
  t_stream = stream;
}

int current_stream() { return t_stream; }

void enqueue(const char* op, const std::vector<Access>& accesses, std::function<void()> work) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  throw_if_failed(d);
  const int s = t_stream;
  const Clock after = effective(d, s);
  std::vector<Access> tracked;
  for (const Access& a : accesses)
    if (a.bytes && is_device(a.p)) {
      check_hazards(d, s, op, a, after);
      tracked.push_back(a);
    }
  d.ordered_after[s] = after;
  const uint64_t seq = push(d, s, op, std::move(work));
  for (const Access& a : tracked) {
    const char* lo = static_cast<const char*>(a.p);
    d.records.push_back(Record{lo, lo + a.bytes, s, seq, a.write, op});
  }
  if (d.records.size() > 4096) settle(d);
}

int64_t record_event() {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  d.events.push_back(snapshot(d, t_stream));
  return static_cast<int64_t>(d.events.size()) - 1;
}

void wait_event(int64_t event) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  if (event < 0 || event >= static_cast<int64_t>(d.events.size()))
    throw RuntimeError("strict device: wait_event on an event that was never recorded (" +
                       std::to_string(event) + ")");
  const int s = t_stream;
  const Clock target = d.events[event];
  join(d.ordered_after[s], target);
  push(d, s, "wait_event", [&d, target] {
    std::unique_lock<std::mutex> wait_lock(d.mu);
    d.cv.wait(wait_lock, [&] {
      for (int t = 0; t < kStreams; ++t)
        if (d.done[t] < target[t]) return false;
      return true;
    });
  });
}

void sync_event(int64_t event) {
  Device& d = device();
  std::unique_lock<std::mutex> lock(d.mu);
  if (event < 0 || event >= static_cast<int64_t>(d.events.size()))
    throw RuntimeError("strict device: sync_event on an event that was never recorded (" +
                       std::to_string(event) + ")");
  const Clock target = d.events[event];  // a copy: the vector may grow while this waits
  wait_for(d, lock, target);
}

void sync_current_stream() {
  Device& d = device();
  std::unique_lock<std::mutex> lock(d.mu);
  wait_for(d, lock, snapshot(d, t_stream));
}

void synchronize() {
  Device& d = device();
  std::unique_lock<std::mutex> lock(d.mu);
  Clock all{};
  for (int s = 0; s < kStreams; ++s) join(all, snapshot(d, s));
  wait_for(d, lock, all);
}

void on_host_sees_current(std::function<void()> release) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  d.releases.push_back(Release{t_stream, d.issued[t_stream], std::move(release)});
}

int64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

void set_worker_threads(int threads) { device().threads = threads; }

}  // namespace loom::strict
