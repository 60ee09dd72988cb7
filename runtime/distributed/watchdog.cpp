#include "distributed/watchdog.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "distributed/comm_meter.hpp"
#include "distributed/network.hpp"
#include "tensor/tensor.hpp"

namespace loom::dist {

namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  const char* what;
  Clock::time_point since;
};

std::mutex g_mutex;
std::map<uint64_t, Running> g_running;  // operations in flight, by ticket
uint64_t g_next = 0;
int g_rank = 0;
int64_t g_limit_ms = 0;

// Wakes four times a second; a stopped process (SIGSTOP) finds the limit passed on SIGCONT.
[[noreturn]] void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::lock_guard<std::mutex> lock(g_mutex);
    const auto now = Clock::now();
    for (const auto& [ticket, op] : g_running) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - op.since).count();
      if (ms < g_limit_ms) continue;
      std::fprintf(stderr,
                   "loom: error: rank %d on %s: %s has not completed in %.0f s ([parallel] "
                   "timeout_s + 5 s): a peer "
                   "is unreachable (a cut link), stopped or dead, and the comm backend did not "
                   "notice; exiting\n",
                   g_rank, host_name().c_str(), op.what, ms / 1000.0);
      std::fflush(stderr);
      _exit(1);
    }
  }
}

// Registers an operation for as long as it lives.
class Ticket {
 public:
  explicit Ticket(const char* what) {
    std::lock_guard<std::mutex> lock(g_mutex);
    id_ = ++g_next;
    g_running[id_] = {what, Clock::now()};
  }
  ~Ticket() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_running.erase(id_);
  }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;

 private:
  uint64_t id_;
};

WatchedComm& of(void* self) { return *static_cast<WatchedComm*>(self); }

int64_t bytes_of(const loom_tensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n * static_cast<int64_t>(dtype_size(static_cast<loom_dtype>(t->dtype)));
}

// Which argument after self is the buffer whose size S an operation counts (all_gather: its
// output, the gathered size); -1: none (barrier); -2: not metered (init, split). Every metered
// operation takes its communicator first and its work handle second to last.
template <auto Field>
constexpr int kSizedArg = -2;
template <>
constexpr int kSizedArg<&loom_comm_v2::all_reduce> = 1;
template <>
constexpr int kSizedArg<&loom_comm_v2::reduce_scatter> = 1;
template <>
constexpr int kSizedArg<&loom_comm_v2::all_gather> = 2;
template <>
constexpr int kSizedArg<&loom_comm_v2::broadcast> = 1;
template <>
constexpr int kSizedArg<&loom_comm_v2::all_to_all> = 1;
template <>
constexpr int kSizedArg<&loom_comm_v2::send> = 1;
template <>
constexpr int kSizedArg<&loom_comm_v2::recv> = 1;
template <>
constexpr int kSizedArg<&loom_comm_v2::barrier> = -1;

// Tells the comm meter what an operation that ran from t0 moved.
template <auto Field, typename... A>
void meter(loom_status s, MeterClock::time_point t0, A... a) {
  constexpr int sized = kSizedArg<Field>;
  if constexpr (sized >= -1) {
    const auto args = std::forward_as_tuple(a...);
    int64_t bytes = 0;
    if constexpr (sized >= 0) bytes = bytes_of(std::get<sized>(args));
    loom_work* work = nullptr;
    if constexpr (sizeof...(A) >= 3) {
      loom_work** handle = std::get<sizeof...(A) - 2>(args);
      if (s == LOOM_OK && handle) work = *handle;
    }
    meter_issue(std::get<0>(args), bytes, work, t0, MeterClock::now());
  }
}

// Forward<&loom_comm_v2::f, "f">::call has f's signature and runs f under a Ticket, then tells
// the comm meter. A call given a work handle returns at once; its wait() is what blocks, and is
// watched.
template <auto Field>
struct Forward;
template <typename... A, loom_status (*loom_comm_v2::*Field)(void*, A...)>
struct Forward<Field> {
  template <const char* Name>
  static loom_status call(void* self, A... a) {
    WatchedComm& w = of(self);
    Ticket t(Name);
    const auto t0 = MeterClock::now();
    const loom_status s = (w.inner->*Field)(w.inner_self, a...);
    meter<Field>(s, t0, a...);
    return s;
  }
};

loom_status wait_for(void* self, loom_work* work, loom_error* err) {
  WatchedComm& w = of(self);
  Ticket t("a wait on an issued operation");
  const auto t0 = MeterClock::now();
  const loom_status s = w.inner->wait(w.inner_self, work, err);
  meter_wait(work, t0, MeterClock::now());
  return s;
}

constexpr char kInit[] = "the comm backend's start-up", kSplit[] = "a communicator split",
               kAllReduce[] = "an all_reduce", kReduceScatter[] = "a reduce_scatter",
               kAllGather[] = "an all_gather", kBroadcast[] = "a broadcast",
               kAllToAll[] = "an all_to_all", kSend[] = "a send", kRecv[] = "a recv",
               kBarrier[] = "a barrier", kGroupStart[] = "a group's start",
               kGroupEnd[] = "a group's end";

void free_comm(void* self, loom_comm* c) { of(self).inner->free_comm(of(self).inner_self, c); }
int32_t rank_of(void* self, const loom_comm* c) {
  return of(self).inner->rank(of(self).inner_self, c);
}
int32_t size_of(void* self, const loom_comm* c) {
  return of(self).inner->size(of(self).inner_self, c);
}

}  // namespace

void watch_comm(WatchedComm& w, const loom_comm_v2* inner, void* inner_self, int rank,
                int64_t limit_ms) {
  w.inner = inner;
  w.inner_self = inner_self;
  w.table =
      *inner;  // a whole table (full_comm_table): the descriptor and capabilities stay the plugin's
  w.table.init = &Forward<&loom_comm_v2::init>::call<kInit>;
  w.table.split = &Forward<&loom_comm_v2::split>::call<kSplit>;
  w.table.free_comm = &free_comm;
  w.table.rank = &rank_of;
  w.table.size = &size_of;
  w.table.all_reduce = &Forward<&loom_comm_v2::all_reduce>::call<kAllReduce>;
  w.table.reduce_scatter = &Forward<&loom_comm_v2::reduce_scatter>::call<kReduceScatter>;
  w.table.all_gather = &Forward<&loom_comm_v2::all_gather>::call<kAllGather>;
  w.table.broadcast = &Forward<&loom_comm_v2::broadcast>::call<kBroadcast>;
  w.table.all_to_all = &Forward<&loom_comm_v2::all_to_all>::call<kAllToAll>;
  w.table.send = inner->send ? &Forward<&loom_comm_v2::send>::call<kSend> : nullptr;
  w.table.recv = inner->recv ? &Forward<&loom_comm_v2::recv>::call<kRecv> : nullptr;
  w.table.barrier = &Forward<&loom_comm_v2::barrier>::call<kBarrier>;
  w.table.wait = &wait_for;
  w.table.group_start =
      inner->group_start ? &Forward<&loom_comm_v2::group_start>::call<kGroupStart> : nullptr;
  w.table.group_end =
      inner->group_end ? &Forward<&loom_comm_v2::group_end>::call<kGroupEnd> : nullptr;
  static std::once_flag once;
  std::call_once(once, [&] {
    g_rank = rank;
    g_limit_ms = limit_ms;
    std::thread(watch).detach();
  });
}

}  // namespace loom::dist
