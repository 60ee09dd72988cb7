// The kernel harness itself: barriers, shared memory per block and the warp intrinsics behave as
// on a GPU, and what would be a bug on one (a race on shared memory, a barrier some threads never
// reach, a mask naming a returned lane, an index outside a shared array) is reported.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ops/cuda/device.cuh"
#include "ops/cuda/host/host_go.hpp"
#include "support/process.hpp"

using loom::cuda::Shape;
using loom::cuda::SharedPtr;

namespace {

// out[block] = sum of in over the block's 64 elements, by a shared-memory tree.
__global__ void tree_sum_k(float* out, const float* in, int n) {
  LOOM_SHARED(float, part, 64);
  const int i = blockIdx.x * 64 + threadIdx.x;
  part[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  for (int w = 32; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// Each lane's view of the warp intrinsics, eight values per lane.
__global__ void intrinsics_k(int* out) {
  const int lane = threadIdx.x % 32;
  int* o = out + threadIdx.x * 8;
  o[0] = __shfl_xor_sync(0xffffffffu, lane * 10, 3);
  o[1] = __shfl_down_sync(0xffffffffu, lane * 10, 5);
  o[2] = __shfl_up_sync(0xffffffffu, lane * 10, 2);
  o[3] = __shfl_sync(0xffffffffu, lane * 10, 7);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[5] = __any_sync(0xffffffffu, lane == 31);
  o[6] = __all_sync(0xffffffffu, lane < 31);
  o[7] = __shfl_xor_sync(0xffffffffu, lane, 1, 8);  // width 8: within groups of eight
}

// Every thread writes part[0]: a write-write race.
__global__ void racy_write_k(float* out) {
  LOOM_SHARED(float, part, 4);
  part[0] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = part[0];
}

// Thread 1 reads what thread 0 wrote, with the barrier missing.
__global__ void missing_barrier_k(float* out) {
  LOOM_SHARED(float, part, 64);
  part[threadIdx.x] = 1.f;
  out[threadIdx.x] = part[(threadIdx.x + 33) % 64];
}

// Lane 0 waits at __syncthreads, the other lanes at a shuffle that needs lane 0.
__global__ void barrier_against_shuffle_k(float* out) {
  if (threadIdx.x == 0)
    __syncthreads();
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

// Lanes 16.. return, then the rest shuffle with a full mask.
__global__ void returned_lane_k(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

__global__ void shared_overflow_k(float* out) {
  LOOM_SHARED(float, part, 8);
  part[threadIdx.x] = 1.f;  // 16 threads, 8 elements
  out[threadIdx.x] = 0.f;
}

// Within a warp, a __syncwarp orders lanes: lane l reads what lane l ^ 1 wrote.
__global__ void warp_ordered_k(float* out) {
  LOOM_SHARED(float, part, 32);
  part[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncwarp();
  out[threadIdx.x] = part[threadIdx.x ^ 1];
}

// The tree sum with the barrier inside the loop missing: thread t reads part[t + w] while thread
// t + w may not have written its own sum into it yet.
__global__ void tree_without_barrier_k(float* out) {
  LOOM_SHARED(float, part, 64);
  part[threadIdx.x] = 1.f;
  __syncthreads();
  for (unsigned w = 32; w > 0; w /= 2)
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
  __syncthreads();
  out[threadIdx.x] = part[0];
}

// A shuffle exchanges values, not memory: lane l reads what lane l ^ 1 wrote after a shuffle only.
__global__ void shuffle_is_no_fence_k(float* out) {
  LOOM_SHARED(float, part, 32);
  part[threadIdx.x] = static_cast<float>(threadIdx.x);
  const float v = __shfl_xor_sync(0xffffffffu, 1.f, 1);
  out[threadIdx.x] = part[threadIdx.x ^ 1] + v;
}

// Two parts carved from a dynamic array, the second running past its end.
__global__ void carve_past_end_k(float* out) {
  LOOM_DYNAMIC_SHARED(float, smem);
  loom::cuda::SharedPtr<float> a = loom::cuda::carve(smem, 0, 8, "a"),
                               b = loom::cuda::carve(smem, 8, 16, "b");
  a[threadIdx.x] = 1.f;
  out[threadIdx.x] = a[threadIdx.x] + (threadIdx.x < 8 ? static_cast<float>(b[threadIdx.x]) : 0.f);
}

// What one block of `threads` running `kernel` reports ("" when nothing).
std::string error_of_launch(void (*kernel)(float*), unsigned threads) {
  std::vector<float> out(threads);
  loom::kh::HostGo go;
  return loom::test::error_of([&] {
    go("kernel", kernel, Shape{dim3(1), dim3(threads)}, out.data());
  });
}

}  // namespace

TEST_CASE(
    "kernel harness: barriers and shared memory per block sum three blocks, the last partial") {
  std::vector<float> in(150), out(3, -1.f);
  for (int i = 0; i < 150; ++i) in[i] = static_cast<float>(i);
  loom::kh::HostGo go;
  go(LOOM_KERNEL(tree_sum_k), Shape{dim3(3), dim3(64)}, out.data(),
     static_cast<const float*>(in.data()), 150);
  CHECK(out[0] == 2016.f);  // 0 + ... + 63
  CHECK(out[1] == 6112.f);  // 64 + ... + 127
  CHECK(out[2] == 3047.f);  // 128 + ... + 149
}

TEST_CASE("kernel harness: shuffles, votes and widths give each lane what a GPU gives it") {
  std::vector<int> out(64 * 8, -1);
  loom::kh::HostGo go;
  go(LOOM_KERNEL(intrinsics_k), Shape{dim3(1), dim3(64)}, out.data());
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, *o = &out[t * 8];
    CAPTURE(t);
    CHECK(o[0] == (lane ^ 3) * 10);
    CHECK(o[1] == (lane + 5 < 32 ? lane + 5 : lane) * 10);
    CHECK(o[2] == (lane >= 2 ? lane - 2 : lane) * 10);
    CHECK(o[3] == 70);
    CHECK(static_cast<unsigned>(o[4]) == 0x49249249u);  // lanes 0, 3, 6, ..., 30
    CHECK(o[5] == 1);
    CHECK(o[6] == 0);
    CHECK(o[7] == (lane ^ 1));
  }
}

TEST_CASE("kernel harness: lanes ordered by __syncwarp are not a race") {
  CHECK(error_of_launch(warp_ordered_k, 32) == "");
}

TEST_CASE("kernel harness: two threads writing one shared address between barriers is reported") {
  const std::string e = error_of_launch(racy_write_k, 8);
  CHECK(e.find("race on shared memory: kernel block (0,0,0) thread 1") != std::string::npos);
  CHECK(e.find("writes part[0], which thread 0 wrote with no barrier between them") !=
        std::string::npos);
}

TEST_CASE("kernel harness: a read of another warp's write with no barrier between is reported") {
  const std::string e = error_of_launch(missing_barrier_k, 64);
  CHECK(e.find("race on shared memory") != std::string::npos);
  CHECK(e.find("reads part[") != std::string::npos);
}

TEST_CASE(
    "kernel harness: a barrier against a warp intrinsic is a deadlock naming who waits where") {
  const std::string e = error_of_launch(barrier_against_shuffle_k, 32);
  CHECK(e.find("deadlock, no barrier can complete: thread 0 at __syncthreads; thread 1 at a warp "
               "intrinsic") != std::string::npos);
}

TEST_CASE("kernel harness: a warp intrinsic whose mask names a returned lane is reported") {
  const std::string e = error_of_launch(returned_lane_k, 32);
  CHECK(e.find("mask names lane 16, which has returned") != std::string::npos);
}

TEST_CASE("kernel harness: an index outside a shared array is reported and not performed") {
  const std::string e = error_of_launch(shared_overflow_k, 16);
  CHECK(e.find("thread 8 (8,0,0) writes part[8], outside its 8 elements of shared memory") !=
        std::string::npos);
}

TEST_CASE("kernel harness: a tree reduction without its barrier is a race, read before written") {
  const std::string e = error_of_launch(tree_without_barrier_k, 64);
  CHECK(e.find("race on shared memory") != std::string::npos);
  CHECK(e.find("writes part[") != std::string::npos);
}

TEST_CASE("kernel harness: a shuffle does not order shared memory between lanes, __syncwarp does") {
  const std::string e = error_of_launch(shuffle_is_no_fence_k, 32);
  CHECK(
      e.find("thread 0 (0,0,0) reads part[1], which thread 1 wrote with no barrier between them") !=
      std::string::npos);
}

TEST_CASE("kernel harness: a part carved past the end of dynamic shared memory is named") {
  std::vector<float> out(8);
  loom::kh::HostGo go;
  const std::string e = loom::test::error_of([&] {
    go(LOOM_KERNEL(carve_past_end_k), Shape{dim3(1), dim3(8), 20 * sizeof(float)}, out.data());
  });
  CHECK(e.find("a part of 16 elements at 8 of smem, which has 20 elements there") !=
        std::string::npos);
}

TEST_CASE(
    "kernel harness: a launch a GPU refuses is refused: grid y past 65535, 2048 threads, 200 KiB "
    "of shared memory") {
  std::vector<float> out(1);
  loom::kh::HostGo go;
  auto launch = [&](Shape s) {
    return loom::test::error_of([&] {
      go("tree_sum_k", tree_sum_k, s, out.data(), static_cast<const float*>(out.data()), 0);
    });
  };
  CHECK(launch(Shape{dim3(1, 70000), dim3(64)})
            .find("a GPU refuses this launch: a grid of 1x70000x1 blocks") != std::string::npos);
  CHECK(launch(Shape{dim3(1), dim3(2048)}).find("a block of 2048x1x1 threads") !=
        std::string::npos);
  CHECK(launch(Shape{dim3(1), dim3(64), 200 << 10}).find("204800 bytes of dynamic shared memory") !=
        std::string::npos);
}
