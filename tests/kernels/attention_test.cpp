// The CUDA attention kernels (ops/cuda/kernels/attention.cuh) run on the CPU through the
// kernel harness, against the CPU's attention: forward (out, lse), backward (dq, dk, dv) and
// the merge, over shapes that leave partial query and key tiles, grouped-query ratios, strided
// rows, every channels-per-lane instantiation, and positioned blocks (context parallelism).
#include "ops/cuda/kernels/attention.cuh"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "twins.hpp"

namespace {

using loom::kernel_tests::distance;
using loom::kernel_tests::randn;

struct Case {
  int64_t B, Tq, Tk, H, Hkv, D;
  std::vector<int64_t> qpos, kpos;  // empty: 0, 1, 2, ...
};

struct Tensors {
  int64_t ldq, ldkv;
  std::vector<float> q, k, v, dout;
};

Tensors inputs(const Case& c, uint64_t seed) {
  Tensors t;
  t.ldq = c.H * c.D + 5,
  t.ldkv = c.Hkv * c.D + 3;  // strided rows: columns beyond the heads are not touched
  t.q = randn(c.B * c.Tq * t.ldq, seed);
  t.k = randn(c.B * c.Tk * t.ldkv, seed + 1);
  t.v = randn(c.B * c.Tk * t.ldkv, seed + 2);
  t.dout = randn(c.B * c.Tq * c.H * c.D, seed + 3);
  return t;
}

const int64_t* pos(const std::vector<int64_t>& p) { return p.empty() ? nullptr : p.data(); }

void check_case(const Case& c, uint64_t seed) {
  const Tensors t = inputs(c, seed);
  const int64_t rows = c.B * c.Tq * c.H * c.D;
  std::vector<float> out(rows, 7.f), lse(c.B * c.H * c.Tq, 7.f), out_cpu = out, lse_cpu = lse;
  loom::kh::HostGo go;
  loom::cuda::attention::block_fwd(go, out.data(), lse.data(), t.q.data(), t.k.data(), t.v.data(),
                                   t.ldq, t.ldkv, c.B, c.Tq, c.Tk, c.H, c.Hkv, c.D, pos(c.qpos),
                                   pos(c.kpos));
  loom::cpu::attention_block_fwd(out_cpu.data(), lse_cpu.data(), t.q.data(), t.k.data(), t.v.data(),
                                 t.ldq, t.ldkv, c.B, c.Tq, c.Tk, c.H, c.Hkv, c.D, pos(c.qpos),
                                 pos(c.kpos));
  CHECK(distance(out, out_cpu) < 1e-5);
  CHECK(distance(lse, lse_cpu) < 1e-5);

  // Gradients start as garbage: the kernels write every element of their heads (dk, dv 0 where
  // no query sees the key) and nothing else.
  std::vector<float> dq = randn(t.q.size(), seed + 4), dk = randn(t.k.size(), seed + 5),
                     dv = randn(t.v.size(), seed + 6);
  std::vector<float> dq_cpu = dq, dk_cpu = dk, dv_cpu = dv;
  loom::cuda::attention::block_bwd(go, dq.data(), dk.data(), dv.data(), t.dout.data(), t.q.data(),
                                   t.k.data(), t.v.data(), out_cpu.data(), lse_cpu.data(), t.ldq,
                                   t.ldkv, c.B, c.Tq, c.Tk, c.H, c.Hkv, c.D, pos(c.qpos),
                                   pos(c.kpos));
  loom::cpu::attention_block_bwd(dq_cpu.data(), dk_cpu.data(), dv_cpu.data(), t.dout.data(),
                                 t.q.data(), t.k.data(), t.v.data(), out_cpu.data(), lse_cpu.data(),
                                 t.ldq, t.ldkv, c.B, c.Tq, c.Tk, c.H, c.Hkv, c.D, pos(c.qpos),
                                 pos(c.kpos));
  CHECK(distance(dq, dq_cpu) < 1e-5);
  CHECK(distance(dk, dk_cpu) < 1e-5);
  CHECK(distance(dv, dv_cpu) < 1e-5);
}

std::vector<int64_t> range(int64_t from, int64_t n, int64_t step = 1) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = from + i * step;
  return p;
}

}  // namespace

TEST_CASE(
    "CUDA attention on the CPU: causal GQA, 2 channels per lane, partial tiles of queries and "
    "keys") {
  check_case({2, 37, 37, 4, 2, 24, {}, {}},
             11);  // 3 query tiles (the last of 5), 2 key tiles (the last of 5)
  check_case({1, 50, 50, 3, 1, 64, {}, {}}, 12);  // ratio 3, D a multiple of 32
}

TEST_CASE("CUDA attention on the CPU: 4 and 8 channels per lane, multi-head and GQA") {
  check_case({1, 33, 33, 2, 2, 72, {}, {}}, 21);
  check_case({2, 19, 19, 4, 1, 136, {}, {}}, 22);
}

TEST_CASE(
    "CUDA attention on the CPU: positioned blocks, queries after the keys, between them, and "
    "seeing none") {
  check_case({2, 20, 33, 2, 1, 40, range(40, 20), range(0, 33)}, 31);     // every key visible
  check_case({1, 18, 35, 4, 2, 32, range(10, 18, 2), range(0, 35)}, 32);  // causal inside the block
  check_case({1, 17, 21, 2, 2, 16, range(0, 17), range(30, 21)},
             33);  // no query sees a key: out 0, lse -inf, dk dv 0
}

namespace {

void check_merge(int64_t B, int64_t T, int64_t H, int64_t D) {
  CAPTURE(D);
  std::vector<float> out = randn(B * T * H * D, 41), part = randn(B * T * H * D, 42);
  std::vector<float> lse = randn(B * H * T, 43), part_lse = randn(B * H * T, 44);
  lse[3] = -INFINITY, part_lse[5] = -INFINITY;
  std::vector<float> out_cpu = out, lse_cpu = lse;
  loom::kh::HostGo go;
  loom::cuda::attention::merge(go, out.data(), lse.data(), part.data(), part_lse.data(), B, T, H,
                               D);
  loom::cpu::attention_merge(out_cpu.data(), lse_cpu.data(), part.data(), part_lse.data(), B, T, H,
                             D);
  CHECK(distance(out, out_cpu) < 1e-6);
  CHECK(distance(lse, lse_cpu) < 1e-6);
}

}  // namespace

TEST_CASE("CUDA attention merge on the CPU: two blocks folded, an empty part and an empty whole") {
  check_merge(2, 13, 3, 20);  // 78 rows: 10 blocks of 8 warps, the last partial
  check_merge(1, 40, 2, 70);  // rows longer than a warp
}

TEST_CASE("CUDA attention on the CPU: a head dimension past 256 is refused") {
  std::vector<float> x(1);
  loom::kh::HostGo go;
  CHECK_THROWS_WITH(
      loom::cuda::attention::block_fwd(go, x.data(), x.data(), x.data(), x.data(), x.data(), 300,
                                       300, 1, 1, 1, 1, 1, 300, nullptr, nullptr),
      "CUDA attention: head dimension 300 > 256");
}
