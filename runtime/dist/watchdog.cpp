#include "dist/watchdog.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "dist/network.hpp"

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
                   "loom: error: rank %d on %s: %s has not completed in %.0f s ([parallel] timeout_s + 5 s): a peer "
                   "is unreachable (a cut link), stopped or dead, and the comm backend did not notice; exiting\n",
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

// Forward<&loom_comm_v2::f, "f">::call has f's signature and runs f under a Ticket. A call
// given a work handle returns at once; its wait() is what blocks, and is watched.
template <auto Field>
struct Forward;
template <typename R, typename... A, R (*loom_comm_v2::*Field)(void*, A...)>
struct Forward<Field> {
  template <const char* Name>
  static R call(void* self, A... a) {
    WatchedComm& w = of(self);
    Ticket t(Name);
    return (w.inner->*Field)(w.inner_self, a...);
  }
};

constexpr char kInit[] = "the comm backend's start-up", kSplit[] = "a communicator split",
               kAllReduce[] = "an all_reduce", kReduceScatter[] = "a reduce_scatter", kAllGather[] = "an all_gather",
               kBroadcast[] = "a broadcast", kAllToAll[] = "an all_to_all", kSend[] = "a send", kRecv[] = "a recv",
               kBarrier[] = "a barrier", kWait[] = "a wait on an issued operation";

void free_comm(void* self, loom_comm* c) { of(self).inner->free_comm(of(self).inner_self, c); }
int32_t rank_of(void* self, const loom_comm* c) { return of(self).inner->rank(of(self).inner_self, c); }
int32_t size_of(void* self, const loom_comm* c) { return of(self).inner->size(of(self).inner_self, c); }

}  // namespace

void watch_comm(WatchedComm& w, const loom_comm_v2* inner, void* inner_self, int rank, int64_t limit_ms) {
  w.inner = inner;
  w.inner_self = inner_self;
  w.table = *inner;  // the descriptor and anything past the functions stay the plugin's
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
  w.table.wait = &Forward<&loom_comm_v2::wait>::call<kWait>;
  static std::once_flag once;
  std::call_once(once, [&] {
    g_rank = rank;
    g_limit_ms = limit_ms;
    std::thread(watch).detach();
  });
}

}  // namespace loom::dist
