// The kernel harness's scheduler: a launch's blocks in turn, each block's threads as ucontext
// fibers settled in lock-step phases (see harness.hpp for the rules it enforces).
#include "ops/cuda/host/harness.hpp"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_KH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_KH_ASAN 1
#endif
#endif
#ifdef LOOM_KH_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace loom::kh {

namespace {

constexpr size_t kStackBytes = 256 << 10, kPage = 4096;
constexpr int kWarpSize = 32;
constexpr size_t kMaxReports = 8;

enum class Wait { running, block, warp, done };

struct Fiber {
  ucontext_t ctx;
  void* stack = nullptr;
  Coords c;
  int tid = 0;
  Wait wait = Wait::running;
  WarpOp op = WarpOp::sync;
  unsigned mask = 0;
  uint64_t bits = 0, result = 0;
  int arg = 0, width = kWarpSize;
};

struct Access {
  int tid = -1;
  uint64_t block_epoch = 0, warp_epoch = 0;
};
struct Track {
  Access write;
  std::vector<Access> reads;  // since the block's last barrier
};

struct Launch {
  const char* name;
  const std::function<void()>* body;
  dim3 grid, block;
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  Fiber* current = nullptr;
  uint64_t block_epoch = 0;
  std::vector<uint64_t> warp_epoch;
  std::unordered_map<const void*, std::vector<unsigned char>> statics;
  std::vector<unsigned char> dynamic;
  std::unordered_map<uintptr_t, Track> tracks;
  std::vector<std::string> reports;
  bool block_failed = false;
#ifdef LOOM_KH_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
};

thread_local Launch* active = nullptr;

// Fiber stacks, reused by every launch on this thread: mapped lazily, a guard page below each.
void* stack_at(size_t i) {
  thread_local std::vector<void*> pool;
  while (pool.size() <= i) {
    void* p = mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("kernel harness: cannot map a fiber stack");
    mprotect(p, kPage, PROT_NONE);
    pool.push_back(static_cast<char*>(p) + kPage);
  }
  return pool[i];
}

void report(Launch& L, const std::string& what) {
  if (L.reports.size() < kMaxReports) L.reports.push_back(what);
}

std::string where(const Launch& L, const Fiber& f) {
  const dim3 &b = f.c.block, &t = f.c.thread;
  return std::string(L.name) + " block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
         std::to_string(b.z) + ") thread " + std::to_string(f.tid) + " (" + std::to_string(t.x) +
         "," + std::to_string(t.y) + "," + std::to_string(t.z) + ")";
}

// The context switches, told to AddressSanitizer when it watches the stacks.
void to_fiber(Launch& L, Fiber& f) {
  L.current = &f;
#ifdef LOOM_KH_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
  swapcontext(&L.scheduler, &f.ctx);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  swapcontext(&L.scheduler, &f.ctx);
#endif
}

void to_scheduler(Launch& L, Fiber& f, bool last) {
#ifdef LOOM_KH_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(last ? nullptr : &fake, L.sched_bottom, L.sched_size);
  swapcontext(&f.ctx, &L.scheduler);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)last;
  swapcontext(&f.ctx, &L.scheduler);
#endif
}

void fiber_main() {
  Launch& L = *active;
#ifdef LOOM_KH_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &L.sched_bottom, &L.sched_size);
#endif
  (*L.body)();
  Fiber& f = *L.current;
  f.wait = Wait::done;
  to_scheduler(L, f, true);
}

void block_until(Wait w) {
  Launch& L = *active;
  Fiber& f = *L.current;
  f.wait = w;
  to_scheduler(L, f, false);
}

int src_lane(const Fiber& f, int lane) {
  const int w = f.width, base = lane & ~(w - 1), in = lane - base;
  switch (f.op) {
    case WarpOp::shfl_idx:
      return base + (f.arg % w + w) % w;
    case WarpOp::shfl_xor:
      return base + ((in ^ f.arg) & (w - 1));
    case WarpOp::shfl_down:
      return in + f.arg < w ? lane + f.arg : lane;
    case WarpOp::shfl_up:
      return in >= f.arg ? lane - f.arg : lane;
    default:
      return lane;
  }
}

// One warp's lanes that wait on a warp intrinsic: a group (same mask) completes when all its
// lanes wait on the same op. Returns whether any group completed.
bool settle_warp(Launch& L, int w) {
  const int first = w * kWarpSize, n = static_cast<int>(L.fibers.size());
  bool settled = false;
  for (int l = first; l < n && l < first + kWarpSize; ++l) {
    Fiber& f = L.fibers[l];
    if (f.wait != Wait::warp) continue;
    const int lane = l - first;
    if (!(f.mask >> lane & 1u)) {
      report(L, where(L, f) + ": a warp intrinsic whose mask omits the calling lane");
      L.block_failed = true;
      return false;
    }
    bool ready = true;
    for (int k = 0; k < kWarpSize && ready; ++k) {
      if (!(f.mask >> k & 1u)) continue;
      if (first + k >= n || L.fibers[first + k].wait == Wait::done) {
        report(L,
               where(L, f) + ": a warp intrinsic's mask names lane " + std::to_string(k) +
                   (first + k >= n ? ", which the block does not have" : ", which has returned"));
        L.block_failed = true;
        return false;
      }
      const Fiber& o = L.fibers[first + k];
      ready = o.wait == Wait::warp && o.mask == f.mask && o.op == f.op;
    }
    if (!ready) continue;
    uint64_t ballot = 0;
    for (int k = 0; k < kWarpSize; ++k)
      if (f.mask >> k & 1u) ballot |= uint64_t(L.fibers[first + k].bits != 0) << k;
    for (int k = 0; k < kWarpSize; ++k) {
      if (!(f.mask >> k & 1u)) continue;
      Fiber& g = L.fibers[first + k];
      const int src = src_lane(g, k);
      if (g.op == WarpOp::ballot)
        g.result = ballot;
      else if (g.op != WarpOp::sync && !(f.mask >> src & 1u)) {
        report(L, where(L, g) + ": a shuffle reads lane " + std::to_string(src) +
                      ", outside the mask");
        L.block_failed = true;
      } else
        g.result = L.fibers[first + src].bits;
      g.wait = Wait::running;
    }
    // Only __syncwarp orders memory between lanes (a shuffle exchanges values, not memory), and
    // only a whole warp's is counted: a partial group would order some lanes and not others.
    if (f.op == WarpOp::sync && f.mask == 0xffffffffu) ++L.warp_epoch[w];
    settled = true;
  }
  return settled;
}

bool settle_block(Launch& L) {
  for (const Fiber& f : L.fibers)
    if (f.wait != Wait::block && f.wait != Wait::done) return false;
  for (Fiber& f : L.fibers)
    if (f.wait == Wait::block) f.wait = Wait::running;
  ++L.block_epoch;
  return true;
}

void report_deadlock(Launch& L) {
  std::string who;
  for (const Fiber& f : L.fibers) {
    if (f.wait == Wait::done) continue;
    if (!who.empty()) who += "; ";
    if (who.size() > 400) {
      who += "...";
      break;
    }
    who += "thread " + std::to_string(f.tid) +
           (f.wait == Wait::block ? " at __syncthreads" : " at a warp intrinsic");
  }
  report(L, where(L, L.fibers[0]) + ": deadlock, no barrier can complete: " + who);
}

// Thread i of block b, ready to start. Its own function: getcontext returns twice, and no local
// of the caller's loop may live across it.
[[gnu::noinline]] void start_fiber(Launch& L, int i, dim3 b) {
  Fiber& f = L.fibers[i];
  f = Fiber{};
  f.tid = i;
  f.c = {dim3(i % L.block.x, (i / L.block.x) % L.block.y, i / (L.block.x * L.block.y)), b, L.block,
         L.grid};
  f.stack = stack_at(i);
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
}

void run_block(Launch& L, dim3 b) {
  const int n = static_cast<int>(L.fibers.size());
  for (int i = 0; i < n; ++i) start_fiber(L, i, b);
  L.tracks.clear();
  L.block_epoch = 0;
  L.warp_epoch.assign((n + kWarpSize - 1) / kWarpSize, 0);
  for (auto& s : L.statics)
    std::fill(s.second.begin(), s.second.end(), 0xff);  // unset reads as NaN
  std::fill(L.dynamic.begin(), L.dynamic.end(), 0xff);
  L.block_failed = false;
  for (;;) {
    for (Fiber& f : L.fibers)
      if (f.wait == Wait::running && !L.block_failed) to_fiber(L, f);
    if (L.block_failed) return;
    bool all_done = true;
    for (const Fiber& f : L.fibers) all_done = all_done && f.wait == Wait::done;
    if (all_done) return;
    bool settled = false;
    for (size_t w = 0; w < L.warp_epoch.size(); ++w)
      settled = settle_warp(L, static_cast<int>(w)) || settled;
    if (L.block_failed) return;
    if (settled || settle_block(L)) continue;
    report_deadlock(L);
    return;
  }
}

}  // namespace

const Coords& coords() { return active->current->c; }

void sync_block() { block_until(Wait::block); }

uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t bits, int arg, int width) {
  Fiber& f = *active->current;
  f.op = op, f.mask = mask, f.bits = bits, f.arg = arg, f.width = width;
  block_until(Wait::warp);
  return f.result;
}

bool note(const void* at, const char* name, int64_t index, int64_t size, bool write) {
  Launch& L = *active;
  const Fiber& f = *L.current;
  auto what = [&] {
    return std::string(write ? " writes " : " reads ") + name + "[" + std::to_string(index) + "]";
  };
  if (index < 0 || index >= size) {
    report(L, where(L, f) + what() + ", outside its " + std::to_string(size) +
                  " elements of shared memory");
    return false;
  }
  Track& t = L.tracks[reinterpret_cast<uintptr_t>(at)];
  const int warp = f.tid / kWarpSize;
  auto unordered = [&](const Access& a) {
    if (a.tid < 0 || a.tid == f.tid || a.block_epoch != L.block_epoch) return false;
    return a.tid / kWarpSize != warp || a.warp_epoch == L.warp_epoch[warp];
  };
  const Access* other = unordered(t.write) ? &t.write : nullptr;
  for (size_t i = 0; write && !other && i < t.reads.size(); ++i)
    if (unordered(t.reads[i])) other = &t.reads[i];
  if (other)
    report(L, "race on shared memory: " + where(L, f) + what() + ", which thread " +
                  std::to_string(other->tid) + (other == &t.write ? " wrote" : " read") +
                  " with no barrier between them");
  const Access now{f.tid, L.block_epoch, L.warp_epoch[warp]};
  if (write) {
    t.write = now;
  } else {
    if (!t.reads.empty() && t.reads.front().block_epoch != L.block_epoch) t.reads.clear();
    if (t.reads.empty() || t.reads.back().tid != f.tid) t.reads.push_back(now);
  }
  return true;
}

void report_carve(const char* from, int64_t offset, int64_t n, int64_t left) {
  Launch& L = *active;
  report(L, where(L, *L.current) + ": a part of " + std::to_string(n) + " elements at " +
                std::to_string(offset) + " of " + from + ", which has " + std::to_string(left) +
                " elements there");
}

void* static_shared(const void* site, size_t bytes) {
  auto& s = active->statics[site];
  if (s.size() < bytes) s.assign(bytes, 0xff);
  return s.data();
}

void* dynamic_shared(size_t* bytes) {
  *bytes = active->dynamic.size();
  return active->dynamic.data();
}

namespace {

// What a GPU refuses at launch: the grid and block limits of sm_80 and sm_90, and dynamic
// shared memory past sm_80's opt-in maximum (163 KiB; sm_90 allows 227).
void check_launch(const char* name, dim3 grid, dim3 block, size_t dynamic_shared) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  auto dims = [](dim3 d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  std::string bad;
  if (threads == 0 || threads > 1024 || block.z > 64)
    bad = "a block of " + dims(block) + " threads (1 to 1024, z at most 64)";
  else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
           grid.z > 65535)
    bad = "a grid of " + dims(grid) + " blocks (x up to 2^31 - 1, y and z up to 65535)";
  else if (dynamic_shared > 166912)
    bad = std::to_string(dynamic_shared) + " bytes of dynamic shared memory (sm_80 allows 166912)";
  if (!bad.empty())
    throw std::runtime_error(std::string(name) + ": a GPU refuses this launch: " + bad);
  if (active) throw std::runtime_error(std::string(name) + ": launched from inside a kernel");
}

}  // namespace

void run(const char* name, dim3 grid, dim3 block, size_t dynamic_shared,
         const std::function<void()>& body) {
  check_launch(name, grid, block, dynamic_shared);
  auto L = std::make_unique<Launch>();
  L->name = name, L->body = &body, L->grid = grid, L->block = block;
  L->fibers.resize(uint64_t(block.x) * block.y * block.z);
  L->dynamic.assign(dynamic_shared, 0xff);
  struct Active {  // reset however the launch ends
    explicit Active(Launch* l) { active = l; }
    ~Active() { active = nullptr; }
  } guard(L.get());
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) run_block(*L, dim3(x, y, z));
  if (const char* log = std::getenv("LOOM_KERNEL_LOG"))
    std::ofstream(log, std::ios::app) << name << "\n";
  if (L->reports.empty()) return;
  std::string all;
  for (const std::string& r : L->reports) all += (all.empty() ? "" : "\n") + r;
  throw std::runtime_error(all);
}

}  // namespace loom::kh
