// The kernel harness: CUDA kernel bodies compiled a second time by the host compiler and run on
// the CPU, so their indexing, bounds and barriers are tested where no GPU is.
//
// A launch runs its blocks one after another. Each block's threads are fibers on one OS thread,
// scheduled in lock-step phases: every runnable thread runs until it reaches a synchronisation
// point (__syncthreads, a warp intrinsic) or returns; then the phase settles:
//   - a warp intrinsic completes when every lane named in its mask has reached one (the lanes'
//     values are exchanged then, so a shuffle reads what its partner held at that point);
//   - __syncthreads completes when every thread of the block that has not returned reached it.
// Nothing settling is a deadlock (threads waiting on a barrier others never reach), reported
// with who waits where. A mask naming a lane that has returned is reported too (undefined on a
// GPU). Shared memory is per block; each access is checked against the others since the last
// barrier that orders them: two threads touching one address, at least one writing, with no
// __syncthreads between them (and, within a warp, no warp intrinsic) is a race, reported with
// the kernel, the block, both threads and the array's index. Out-of-bounds shared indices are
// reported and not performed.
//
// Reports are collected while the launch runs and thrown as one std::runtime_error after it.
// Global memory is plain host memory; atomics are plain read-modify-writes (blocks run one at a
// time), so a sanitizer build catches out-of-bounds global accesses.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};

namespace loom::kh {

// What a running thread sees as threadIdx, blockIdx, blockDim and gridDim.
struct Coords {
  dim3 thread, block, block_dim, grid_dim;
};
const Coords& coords();

// Runs `body` as every thread of every block of the grid; throws what the launch reported.
// `dynamic_shared` bytes back `LOOM_DYNAMIC_SHARED`. Names launched are logged to the file
// LOOM_KERNEL_LOG names, one per line (the coverage test reads it).
void run(const char* name, dim3 grid, dim3 block, size_t dynamic_shared,
         const std::function<void()>& body);

// The synchronisation points.
void sync_block();
enum class WarpOp { shfl_idx, shfl_xor, shfl_down, shfl_up, ballot, sync };
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t bits, int arg, int width);

// Shared memory: a tracked pointer. Each element access goes through note(), which checks it
// against the block's accesses since the last barrier.
bool note(const void* at, const char* name, int64_t index, int64_t size, bool write);
void* static_shared(const void* site, size_t bytes);
void report_carve(const char* from, int64_t offset, int64_t n, int64_t left);
void* dynamic_shared(size_t* bytes);

template <class T>
class SharedRef {
 public:
  SharedRef(T* p, const char* name, int64_t i, int64_t n) : p_(p), name_(name), i_(i), n_(n) {}
  operator T() const { return note(p_, name_, i_, n_, false) ? *p_ : T{}; }
  SharedRef& operator=(T v) {
    if (note(p_, name_, i_, n_, true)) *p_ = v;
    return *this;
  }
  SharedRef& operator=(const SharedRef& o) { return *this = static_cast<T>(o); }
  SharedRef& operator+=(T v) { return *this = static_cast<T>(*this) + v; }
  SharedRef& operator-=(T v) { return *this = static_cast<T>(*this) - v; }
  SharedRef& operator*=(T v) { return *this = static_cast<T>(*this) * v; }

 private:
  T* p_;
  const char* name_;
  int64_t i_, n_;
};

template <class T>
class SharedPtr {
 public:
  SharedPtr(T* base, int64_t n, const char* name) : base_(base), p_(base), n_(n), name_(name) {}
  SharedRef<T> operator[](int64_t i) const { return {p_ + i, name_, (p_ - base_) + i, n_}; }
  SharedPtr operator+(int64_t i) const {
    SharedPtr s = *this;
    s.p_ += i;
    return s;
  }
  // n elements from offset as an array of their own, named, checked against its own bounds.
  SharedPtr carve(int64_t offset, int64_t n, const char* name) const {
    const int64_t left = n_ - (p_ - base_);
    if (offset < 0 || offset + n > left) report_carve(name_, offset, n, left);
    return {p_ + offset, n, name};
  }

 private:
  T* base_;
  T* p_;
  int64_t n_;
  const char* name_;
};

template <class T>
SharedPtr<T> shared_array(const void* site, int64_t n, const char* name) {
  return {static_cast<T*>(static_shared(site, n * sizeof(T))), n, name};
}
template <class T>
SharedPtr<T> dynamic_array(const char* name) {
  size_t bytes = 0;
  T* p = static_cast<T*>(dynamic_shared(&bytes));
  return {p, static_cast<int64_t>(bytes / sizeof(T)), name};
}

template <class T>
uint64_t bits_of(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace loom::kh

// ---- what a kernel body names, for the host compiler ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define threadIdx (::loom::kh::coords().thread)
#define blockIdx (::loom::kh::coords().block)
#define blockDim (::loom::kh::coords().block_dim)
#define gridDim (::loom::kh::coords().grid_dim)
#define LOOM_SHARED(T, name, n)      \
  static const char name##_site = 0; \
  auto name = ::loom::kh::shared_array<T>(&name##_site, (n), #name)
#define LOOM_DYNAMIC_SHARED(T, name) auto name = ::loom::kh::dynamic_array<T>(#name)

namespace loom::cuda {
template <class T>
using SharedPtr = ::loom::kh::SharedPtr<T>;
template <class T>
SharedPtr<T> carve(SharedPtr<T> from, int64_t offset, int64_t n, const char* name) {
  return from.carve(offset, n, name);
}
}  // namespace loom::cuda

inline void __syncthreads() { ::loom::kh::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::loom::kh::warp_exchange(::loom::kh::WarpOp::sync, mask, 0, 0, 32);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  using namespace ::loom::kh;
  return from_bits<T>(warp_exchange(WarpOp::shfl_idx, mask, bits_of(v), src, width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  using namespace ::loom::kh;
  return from_bits<T>(warp_exchange(WarpOp::shfl_xor, mask, bits_of(v), lane_mask, width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::loom::kh;
  return from_bits<T>(
      warp_exchange(WarpOp::shfl_down, mask, bits_of(v), static_cast<int>(delta), width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  using namespace ::loom::kh;
  return from_bits<T>(
      warp_exchange(WarpOp::shfl_up, mask, bits_of(v), static_cast<int>(delta), width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(
      ::loom::kh::warp_exchange(::loom::kh::WarpOp::ballot, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) { return (__ballot_sync(mask, pred) & mask) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return (__ballot_sync(mask, pred) & mask) == mask;
}

template <class T>
T atomicAdd(T* p, T v) {  // blocks run one at a time: a plain read-modify-write
  const T old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old > v ? old : v;
  return old;
}

inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline unsigned __float_as_uint(float v) {
  return ::loom::kh::from_bits<unsigned>(::loom::kh::bits_of(v));
}
inline float __uint_as_float(unsigned v) {
  return ::loom::kh::from_bits<float>(::loom::kh::bits_of(v));
}
inline float __int_as_float(int v) { return ::loom::kh::from_bits<float>(::loom::kh::bits_of(v)); }
using std::isfinite;
using std::isinf;
using std::isnan;
