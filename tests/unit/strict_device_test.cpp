// The strict device's contract: its kernels equal the CPU's bit for bit, its memory faults when
// the host touches it, copies and events order the streams, and an op that reads a buffer
// another stream writes, without waiting on that stream's event, is refused by name.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/ops.hpp"
#include "ops/strict/memory.hpp"
#include "ops/strict/streams.hpp"
#include "ops/strict/table.hpp"

namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A device copy of `host`, allocated through the table's own copies.
float* to_device(const loom_ops_v2* o, const std::vector<float>& host) {
  auto* p = static_cast<float*>(loom::strict::device_alloc(host.size() * sizeof(float)));
  o->copy(p, host.data(), static_cast<int64_t>(host.size() * sizeof(float)));
  return p;
}

std::vector<float> to_host(const loom_ops_v2* o, const float* device, size_t n) {
  std::vector<float> v(n);
  o->copy(v.data(), device, static_cast<int64_t>(n * sizeof(float)));  // to pageable memory: waits
  return v;
}

// Runs the hidden test case `name` of this binary in a child process (a fork would inherit a
// device whose stream workers it does not have); returns its exit code and output.
std::pair<int, std::string> in_child(const std::string& name) {
  const std::string cmd =
      "/proc/" + std::to_string(getpid()) + "/exe --no-skip -tc=\"" + name + "\" 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE(
    "strict device: a GEMM, a norm and AdamW through the stream workers equal the CPU kernels bit "
    "for bit") {
  const loom_ops_v2* o = loom::strict::ops();
  const int64_t M = 37, N = 29, K = 45;
  const auto A = random_floats(M * K, 1), B = random_floats(K * N, 2);
  std::vector<float> C(M * N, 0.f);
  loom::cpu::gemm(0, 0, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
  float *dA = to_device(o, A), *dB = to_device(o, B),
        *dC = to_device(o, std::vector<float>(M * N, 0.f));
  o->gemm(0, 0, M, N, K, 1.f, dA, K, dB, N, 0.f, dC, N);
  CHECK(to_host(o, dC, M * N) == C);

  const auto w = random_floats(N, 3);
  std::vector<float> out(M * N), rstd(M);
  loom::cpu::rmsnorm_fwd(out.data(), rstd.data(), C.data(), w.data(), M, N);
  float *dw = to_device(o, w), *dout = to_device(o, out), *drstd = to_device(o, rstd);
  o->rmsnorm_fwd(dout, drstd, dC, dw, M, N);
  CHECK(to_host(o, dout, M * N) == out);
  CHECK(o->sum_squares(dout, M * N) == loom::cpu::sum_squares(out.data(), M * N));

  auto p = random_floats(64, 4), g = random_floats(64, 5), m = std::vector<float>(64, 0.f), v = m;
  float *dp = to_device(o, p), *dg = to_device(o, g), *dm = to_device(o, m), *dv = to_device(o, v);
  loom::cpu::adamw(p.data(), g.data(), m.data(), v.data(), 64, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
  o->adamw(dp, dg, dm, dv, 64, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
  CHECK(to_host(o, dp, 64) == p);
  CHECK(to_host(o, dv, 64) == v);
}

TEST_CASE(
    "strict device: sum_squares_multi equals one sum_squares per tensor, with one host wait for "
    "them all") {
  const loom_ops_v2* o = loom::strict::ops();
  const std::vector<std::vector<float>> xs = {random_floats(5000, 7), random_floats(1, 8),
                                              random_floats(333, 9)};
  std::vector<const float*> on_device;
  std::vector<int64_t> n;
  for (const auto& x : xs)
    on_device.push_back(to_device(o, x)), n.push_back(static_cast<int64_t>(x.size()));
  std::vector<double> sums(xs.size(), -1.0);
  const int64_t before = loom::strict::host_waits();
  o->sum_squares_multi(3, on_device.data(), n.data(), sums.data());
  CHECK(loom::strict::host_waits() - before == 1);
  for (size_t t = 0; t < xs.size(); ++t)
    CHECK(sums[t] == loom::cpu::sum_squares(xs[t].data(), n[t]));
}

// The MoE routing entries through the stream workers: the probabilities and weights stay in
// device memory, the experts chosen and the sequences' sums reach host arrays after one wait,
// and the row moves read their indices from host arrays; everything equals the CPU kernels.
// Only the explicit copies back count as data read out of device memory.
TEST_CASE(
    "strict device: the MoE routing entries equal the CPU kernels bit for bit, handing the host "
    "only experts and sums") {
  const loom_ops_v2* o = loom::strict::ops();
  const int64_t N = 12, E = 5, K = 2, T = 4, B = N / T, C = 7;
  const auto z = random_floats(N * E, 11);
  std::vector<float> p(N * E), lse(N), w(N * K);
  std::vector<int32_t> ex(N * K), ex_s(N * K, -1);
  std::vector<double> seq(B * (E + 1)), seq_s(B * (E + 1), -1.0);
  loom::cpu::router_topk(p.data(), lse.data(), w.data(), ex.data(), seq.data(), z.data(), N, E, K,
                         T);
  auto sentinel = [](int64_t n) { return std::vector<float>(n, -7.f); };  // what no kernel writes
  float *dz = to_device(o, z), *dp = to_device(o, sentinel(N * E)), *dl = to_device(o, sentinel(N));
  float* dw = to_device(o, sentinel(N * K));
  const int64_t waits = loom::strict::host_waits(), read = loom::strict::host_read_bytes();
  o->router_topk(dp, dl, dw, ex_s.data(), seq_s.data(), dz, N, E, K, T);
  CHECK(loom::strict::host_waits() - waits == 1);
  CHECK(loom::strict::host_read_bytes() == read);  // kernel outputs, not copies
  CHECK(ex_s == ex);
  CHECK(seq_s == seq);
  CHECK(to_host(o, dp, N * E) == p);
  CHECK(loom::strict::host_read_bytes() - read == N * E * 4);  // the copy back counts
  CHECK(to_host(o, dw, N * K) == w);

  std::vector<int32_t> slot(N * K), token;
  for (int64_t i = 0; i < N * K; ++i) {  // every fifth choice dropped; the rest in token order
    slot[i] = i % 5 == 3 ? -1 : static_cast<int32_t>(token.size());
    if (slot[i] >= 0) token.push_back(static_cast<int32_t>(i / K));
  }
  const int64_t R = static_cast<int64_t>(token.size());
  const auto h = random_floats(N * C, 12), dy = random_floats(N * C, 13),
             dwk = random_floats(N * K, 14);
  std::vector<float> rows(R * C), y(N * C), drows(R * C), dwc(N * K), dlog(N * E);
  std::vector<double> balance = {0.1, 0.0, -0.2, 0.3, 0.05, 0.0, 0.0, 0.1,
                                 0.2, 0.0, 0.4,  0.0, 0.0,  0.3, 0.1};
  loom::cpu::gather_rows(rows.data(), h.data(), token.data(), R, C);
  loom::cpu::combine_rows(y.data(), rows.data(), w.data(), slot.data(), N, K, C);
  loom::cpu::combine_rows_bwd(drows.data(), dwc.data(), dy.data(), rows.data(), w.data(),
                              slot.data(), N, K, C);
  loom::cpu::router_topk_bwd(dlog.data(), p.data(), lse.data(), w.data(), dwk.data(), ex.data(),
                             balance.data(), 0.02, N, E, K, T);
  float *dh = to_device(o, h), *drw = to_device(o, sentinel(R * C)), *dyd = to_device(o, dy);
  float *dyv = to_device(o, sentinel(N * C)), *ddr = to_device(o, sentinel(R * C));
  float *ddw = to_device(o, sentinel(N * K)), *dwkd = to_device(o, dwk),
        *ddl = to_device(o, sentinel(N * E));
  o->gather_rows(drw, dh, token.data(), R, C);
  o->combine_rows(dyv, drw, dw, slot.data(), N, K, C);
  o->combine_rows_bwd(ddr, ddw, dyd, drw, dw, slot.data(), N, K, C);
  o->router_topk_bwd(ddl, dp, dl, dw, dwkd, ex.data(), balance.data(), 0.02, N, E, K, T);
  CHECK(to_host(o, drw, R * C) == rows);
  CHECK(to_host(o, dyv, N * C) == y);
  CHECK(to_host(o, ddr, R * C) == drows);
  CHECK(to_host(o, ddw, N * K) == dwc);
  CHECK(to_host(o, ddl, N * E) == dlog);
  CHECK(dwc[3] == 0.f);  // a dropped choice's weight gets no gradient
}

TEST_CASE(
    "what config check reads of each device's memory without the device is what its table "
    "declares") {
  CHECK(loom::ops::declared_host_reachable("cpu") == (loom::ops::cpu()->host_reachable == 1));
  CHECK(loom::ops::declared_host_reachable("strict") == (loom::strict::ops()->host_reachable == 1));
  CHECK_FALSE(loom::ops::declared_host_reachable("strict"));
  CHECK_FALSE(
      loom::ops::declared_host_reachable("cuda"));  // the CUDA table itself: tests/cuda (a GPU)
}

TEST_CASE("strict device: a copy to a pinned block lands once the host has waited on its event") {
  const loom_ops_v2* o = loom::strict::ops();
  const auto x = random_floats(1000, 6);
  float* dx = to_device(o, x);
  auto* pinned = static_cast<float*>(o->pinned_alloc(1000 * sizeof(float)));
  o->set_stream(LOOM_STREAM_COMM);
  o->wait_event([&] {
    o->set_stream(LOOM_STREAM_COMPUTE);
    const int64_t e = o->record_event();
    o->set_stream(LOOM_STREAM_COMM);
    return e;
  }());
  o->copy(pinned, dx, 1000 * sizeof(float));
  o->sync_event(o->record_event());
  o->set_stream(LOOM_STREAM_COMPUTE);
  CHECK(std::vector<float>(pinned, pinned + 1000) == x);
  o->pinned_free(pinned);
}

TEST_CASE(
    "strict device: an op reading what another stream writes, without waiting on its event, is "
    "refused by name") {
  const loom_ops_v2* o = loom::strict::ops();
  float* buf = to_device(o, random_floats(256, 7));
  float* other = to_device(o, std::vector<float>(256, 0.f));
  o->synchronize();         // the uploads are done: only the scale below is unordered
  o->scale(buf, 2.f, 256);  // compute stream
  o->set_stream(LOOM_STREAM_COMM);
  std::string message;
  try {
    o->accumulate(other, buf, 256);  // comm stream, no wait_event: a race on a GPU
  } catch (const std::exception& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(has(message, "op 'accumulate' on the comm stream reads"));
  CHECK(has(message,
            "which op 'scale' on the compute stream writes, without waiting on that op's event"));
  // With the event waited on, the same op is ordered and runs.
  o->set_stream(LOOM_STREAM_COMPUTE);
  const int64_t scaled = o->record_event();
  o->set_stream(LOOM_STREAM_COMM);
  o->wait_event(scaled);
  CHECK_NOTHROW(o->accumulate(other, buf, 256));
  o->set_stream(LOOM_STREAM_COMPUTE);
  o->synchronize();
}

// The faults, each in a process of its own (skipped unless a test above asks for it by name).
TEST_CASE("strict child: host reads device memory" * doctest::skip()) {
  const loom_ops_v2* o = loom::strict::ops();
  float* d = to_device(o, std::vector<float>(16, 1.f));
  o->synchronize();
  volatile float x = d[3];
  (void)x;
}

TEST_CASE("strict child: host reads a pinned block before waiting on the copy" * doctest::skip()) {
  const loom_ops_v2* o = loom::strict::ops();
  float* d = to_device(o, std::vector<float>(1 << 20, 1.f));
  auto* pinned = static_cast<float*>(o->pinned_alloc(4 << 20));
  o->gemm(0, 0, 1024, 1024, 1024, 1.f, d, 1024, d, 1024, 0.f, d, 1024);  // keeps the stream busy
  o->copy(pinned, d, 4 << 20);
  volatile float x = pinned[0];
  (void)x;
}

TEST_CASE("strict child: a kernel given host memory" * doctest::skip()) {
  const loom_ops_v2* o = loom::strict::ops();
  std::vector<float> host(16, 1.f);
  o->scale(host.data(), 2.f, 16);
}

TEST_CASE(
    "strict device: the host dereferencing device memory, or a pinned block a copy is writing, "
    "exits 1 naming it") {
  auto [rc, err] = in_child("strict child: host reads device memory");
  INFO(err);
  CHECK(rc == 1);
  CHECK(has(err, "strict device: host code in"));
  CHECK(has(err, "dereferenced device memory (a 256-byte device block at +12)"));

  auto [rc2, err2] = in_child("strict child: host reads a pinned block before waiting on the copy");
  INFO(err2);
  CHECK(rc2 == 1);
  CHECK(has(err2, "touched a pinned buffer while a copy into it was in flight"));

  auto [rc3, err3] = in_child("strict child: a kernel given host memory");
  INFO(err3);
  CHECK(rc3 == 1);
  CHECK(has(err3, "op 'scale' was given host memory for 'x'"));
}
