// The CUDA op table: the device check, the two streams and their events, and the loom_ops_v2 that
// points at the kernels of this folder. Pointers passed to it are device memory, which the host
// does not touch (host_reachable = 0): the strict device's contract, kept on a GPU.
#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/memory.hpp"
#include "ops/kernel_entries.hpp"

namespace loom::cuda {

void fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ") in " + what + " at " + file + ":" +
                           std::to_string(line));
}

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why)
      *why = e != cudaSuccess ? std::string("no CUDA driver or device: ") + cudaGetErrorString(e)
                              : "no CUDA device visible";
    cudaGetLastError();  // clear the sticky error of a failed probe
    return false;
  }
  return true;
}

void select_device() {
  int n = 0;
  LOOM_CUDA_CHECK(cudaGetDeviceCount(&n));
  const char* local = std::getenv("LOCAL_RANK");
  LOOM_CUDA_CHECK(cudaSetDevice((local ? std::atoi(local) : 0) % n));
}

namespace {

thread_local int t_stream = LOOM_STREAM_COMPUTE;

// Events by number: a ring reused in order. An event is waited for soon after it is recorded
// (an operation's copies, a collective's completion); one older than the ring is refused rather
// than silently standing for a later point.
constexpr int64_t kEvents = 4096;
struct Events {
  std::mutex m;
  std::array<cudaEvent_t, kEvents> ring{};
  int64_t next = 0;

  cudaEvent_t of(int64_t id, const char* who) {
    std::lock_guard<std::mutex> lock(m);
    if (id < 0 || id >= next || id < next - kEvents)
      throw RuntimeError(std::string("cuda device: ") + who + " on event " + std::to_string(id) +
                         (id >= next || id < 0 ? ", which was never recorded"
                                               : ", recorded more than 4096 events ago"));
    return ring[static_cast<size_t>(id % kEvents)];
  }
};
Events& events() {
  static Events* e = new Events;
  return *e;
}

int64_t record_event() {
  Events& ev = events();
  std::lock_guard<std::mutex> lock(ev.m);
  cudaEvent_t& e = ev.ring[static_cast<size_t>(ev.next % kEvents)];
  if (!e) LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventRecord(e, stream()));
  return ev.next++;
}

void wait_event(int64_t id) {
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream(), events().of(id, "wait_event"), 0));
}

void sync_event(int64_t id) {
  count_host_wait();
  LOOM_CUDA_CHECK(cudaEventSynchronize(events().of(id, "sync_event")));
}

void synchronize() {
  count_host_wait();
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
}

// Either side may be host memory; a pageable host destination makes the driver finish the copy
// before returning, a pinned one is read after the caller's sync_event, as the contract says.
void copy(void* dst, const void* src, int64_t n) {
  if (n > 0)
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n), cudaMemcpyDefault, stream()));
}

void zero(void* dst, int64_t n) {
  if (n > 0) LOOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n), stream()));
}

void* pinned_alloc_entry(int64_t n) {
  void* p = nullptr;
  LOOM_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(n > 0 ? n : 1), cudaHostAllocDefault));
  return p;
}

void pinned_free_entry(void* p) { cudaFreeHost(p); }

void set_stream_entry(int32_t which) { set_current_stream(which); }

}  // namespace

cudaStream_t stream_of(int which) {
  static std::array<cudaStream_t, 2> streams = [] {
    std::array<cudaStream_t, 2> made{};
    for (cudaStream_t& s : made)
      LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return made;
  }();
  return streams[static_cast<size_t>(which == LOOM_STREAM_COMM ? 1 : 0)];
}

void set_current_stream(int which) {
  if (which != LOOM_STREAM_COMPUTE && which != LOOM_STREAM_COMM)
    throw RuntimeError("cuda device: no stream " + std::to_string(which) +
                       " (LOOM_STREAM_COMPUTE or _COMM)");
  t_stream = which;
}

cudaStream_t stream() { return stream_of(t_stream); }

void* native_stream(int32_t which) { return stream_of(which); }

const loom_ops_v2* ops() {
  std::string why;
  if (!available(&why)) throw std::runtime_error("the CUDA op table needs a GPU: " + why);
  static const loom_ops_v2 table = [] {
    loom_ops_v2 t{};
    t.v = LOOM_OPS_V2_VERSION;
    t.device = {LOOM_DEVICE_CUDA, 0};
    LOOM_OPS_KERNEL_ENTRIES(t, loom::cuda);
    LOOM_OPS_CONTRACT_ENTRIES(t, loom::cuda);
    return t;
  }();
  return &table;
}

}  // namespace loom::cuda
