#include "ops/strict/memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/errors.hpp"

namespace loom::strict {

namespace {

// One memfd mapped twice: `view` is what the host holds (device: never accessible; pinned:
// accessible unless a copy is writing it), `kernel` is where the stream workers read and write.
struct Region {
  char* view = nullptr;
  char* kernel = nullptr;
  size_t bytes = 0;
  bool pinned = false;
  size_t used = 0;  // device regions: bytes handed out from the front (a bump allocator)
};

constexpr size_t kRegionBytes = size_t{256} << 20;

// Small requests round up to a power of two, large ones to whole 2 MiB pages (as the CUDA pool).
size_t size_class(size_t bytes) {
  if (bytes > (64u << 20)) return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  size_t c = 256;
  while (c < bytes) c *= 2;
  return c;
}

size_t page_round(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

Region map_region(size_t bytes, bool pinned) {
  const int fd = memfd_create(pinned ? "loom-strict-pinned" : "loom-strict-device", MFD_CLOEXEC);
  if (fd < 0)
    throw RuntimeError(std::string("strict device: memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    throw RuntimeError("strict device: cannot reserve " + std::to_string(bytes) +
                       " bytes: " + std::strerror(errno));
  }
  void* view = mmap(nullptr, bytes, pinned ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_SHARED, fd, 0);
  void* kernel = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  close(fd);  // the mappings keep the memory
  if (view == MAP_FAILED || kernel == MAP_FAILED)
    throw RuntimeError(std::string("strict device: mmap: ") + std::strerror(errno));
  Region r;
  r.view = static_cast<char*>(view);
  r.kernel = static_cast<char*>(kernel);
  r.bytes = bytes;
  r.pinned = pinned;
  return r;
}

struct Memory {
  std::mutex m;
  std::map<char*, Region> regions;  // by view address
  std::map<size_t, std::vector<char*>> free_device, free_pinned;
  std::map<char*, size_t> live_device, live_pinned;  // block -> its size class
  struct Users {
    int writers = 0, readers = 0;
  };
  std::map<char*, Users> pinned_in_flight;  // block -> the copies that still use it
  MemoryStats stats;
  size_t cap = 0;

  // The region whose view holds p, or nullptr.
  Region* region_of(const void* p) {
    const char* c = static_cast<const char*>(p);
    auto it = regions.upper_bound(const_cast<char*>(c));
    if (it == regions.begin()) return nullptr;
    --it;
    return c < it->second.view + it->second.bytes ? &it->second : nullptr;
  }

  char* carve(size_t c) {
    for (auto& [view, r] : regions)
      if (!r.pinned && r.bytes - r.used >= c) {
        char* p = view + r.used;
        r.used += c;
        return p;
      }
    Region r = map_region(c > kRegionBytes ? c : kRegionBytes, false);
    stats.reserved += r.bytes;
    r.used = c;
    regions[r.view] = r;
    return r.view;
  }
};

Memory& memory() {
  static Memory* m = new Memory;  // never destroyed: tensors may outlive static destruction order
  return *m;
}

bool find_in(std::map<char*, size_t>& live, const void* p, char** base, size_t* bytes) {
  char* c = static_cast<char*>(const_cast<void*>(p));
  auto it = live.upper_bound(c);
  if (it == live.begin()) return false;
  --it;
  if (c >= it->first + it->second) return false;
  *base = it->first;
  *bytes = it->second;
  return true;
}

std::string mib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return b;
}

}  // namespace

void set_memory_cap(size_t bytes) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  mem.cap = bytes;
}

void* device_alloc(size_t bytes) {
  Memory& mem = memory();
  const size_t c = size_class(bytes ? bytes : 1);
  std::lock_guard<std::mutex> lock(mem.m);
  if (mem.cap && mem.stats.in_use + c > mem.cap)
    throw RuntimeError("strict device: out of device memory: asked " + mib(bytes) + " (" +
                       std::to_string(bytes) + " bytes), " + mib(mem.cap - mem.stats.in_use) +
                       " left of the " + mib(mem.cap) + " cap ([run] device_memory_mib), " +
                       mib(mem.stats.in_use) + " in use");
  auto& list = mem.free_device[c];
  char* p = nullptr;
  if (!list.empty()) {
    p = list.back();
    list.pop_back();
  } else {
    p = mem.carve(c);
  }
  mem.live_device[p] = c;
  mem.stats.in_use += c;
  if (mem.stats.in_use > mem.stats.peak) mem.stats.peak = mem.stats.in_use;
  mem.stats.peak_since_mark = std::max(mem.stats.peak_since_mark, mem.stats.in_use);
  return p;
}

void device_free(void* ptr) {
  if (!ptr) return;
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  auto it = mem.live_device.find(static_cast<char*>(ptr));
  if (it == mem.live_device.end()) return;
  mem.stats.in_use -= it->second;
  mem.free_device[it->second].push_back(it->first);
  mem.live_device.erase(it);
}

MemoryStats memory_stats() {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  return mem.stats;
}

void mark_peak() {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  mem.stats.peak_since_mark = mem.stats.in_use;
}

bool is_device(const void* p) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  const Region* r = mem.region_of(p);
  return r && !r->pinned;
}

void* kernel_view(const void* p) {
  if (!p) return nullptr;
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  const Region* r = mem.region_of(p);
  if (!r) return const_cast<void*>(p);
  return r->kernel + (static_cast<const char*>(p) - r->view);
}

bool find_block(const void* p, char** base, size_t* bytes) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  return find_in(mem.live_device, p, base, bytes);
}

std::string describe_device_address(const void* p) {
  char* base = nullptr;
  size_t bytes = 0;
  if (find_block(p, &base, &bytes))
    return "a " + std::to_string(bytes) + "-byte device block at +" +
           std::to_string(static_cast<const char*>(p) - base);
  return is_device(p) ? "device memory outside any live block (freed?)" : "";
}

void* pinned_alloc(size_t bytes) {
  Memory& mem = memory();
  const size_t c = page_round(size_class(bytes ? bytes : 1));
  std::lock_guard<std::mutex> lock(mem.m);
  auto& list = mem.free_pinned[c];
  char* p = nullptr;
  if (!list.empty()) {
    p = list.back();
    list.pop_back();
  } else {
    Region r = map_region(c, true);
    mem.regions[r.view] = r;
    p = r.view;
  }
  mem.live_pinned[p] = c;
  return p;
}

void pinned_free(void* ptr) {
  if (!ptr) return;
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  auto it = mem.live_pinned.find(static_cast<char*>(ptr));
  if (it == mem.live_pinned.end()) return;
  mem.free_pinned[it->second].push_back(it->first);
  mem.live_pinned.erase(it);
}

bool pinned_in_flight(const void* p) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  return mem.pinned_in_flight.count(static_cast<char*>(const_cast<void*>(p))) > 0;
}

FaultAddress classify_fault_address(const void* p) {
  Memory& mem = memory();
  std::unique_lock<std::mutex> lock(mem.m, std::try_to_lock);
  if (!lock.owns_lock()) return FaultAddress::unknown;
  const Region* r = mem.region_of(p);
  if (r && !r->pinned) return FaultAddress::device;
  char* base = nullptr;
  size_t bytes = 0;
  return find_in(mem.live_pinned, p, &base, &bytes) ? FaultAddress::pinned : FaultAddress::other;
}

bool find_pinned(const void* p, char** base, size_t* bytes) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  return find_in(mem.live_pinned, p, base, bytes);
}

namespace {
// The host's access to a pinned block from the copies using it; mem.m held, so two threads'
// changes cannot interleave their mprotect calls.
void apply_protection(Memory& mem, char* base, size_t bytes) {
  const auto it = mem.pinned_in_flight.find(base);
  const int prot = it == mem.pinned_in_flight.end() ? PROT_READ | PROT_WRITE
                   : it->second.writers > 0         ? PROT_NONE
                                                    : PROT_READ;
  if (mprotect(base, bytes, prot) != 0)
    throw RuntimeError(std::string("strict device: mprotect: ") + std::strerror(errno));
}
}  // namespace

void pin_for_copy(char* base, size_t bytes, bool writes) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  Memory::Users& u = mem.pinned_in_flight[base];
  ++(writes ? u.writers : u.readers);
  apply_protection(mem, base, bytes);
}

void unpin_after_copy(char* base, size_t bytes, bool writes) {
  Memory& mem = memory();
  std::lock_guard<std::mutex> lock(mem.m);
  const auto it = mem.pinned_in_flight.find(base);
  if (it == mem.pinned_in_flight.end()) return;
  --(writes ? it->second.writers : it->second.readers);
  if (it->second.writers <= 0 && it->second.readers <= 0) mem.pinned_in_flight.erase(it);
  apply_protection(mem, base, bytes);
}

}  // namespace loom::strict
