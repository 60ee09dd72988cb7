// Run as one rank of a job (`loom launch -n N -- collectives_worker [COMM]`, or under mpirun
// with COMM = mpi): checks every collective of the comm plugin (default gloo) for fp32 and bf16 at
// sizes 0, 1, odd and not divisible by the world size, sync and async. Prints one line per failure
// and exits 1 if there was any.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "loader/selection.hpp"

using namespace loom;

namespace {

int failures = 0;
int me = 0, n = 1;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("rank %d: FAILED %s\n", me, what.c_str());
  }
}

// Values small enough that bf16 holds them and their sums exactly.
struct Buf {
  loom_dtype dt;
  std::vector<float> f;
  std::vector<uint16_t> h;
  Buf(loom_dtype d, int64_t count) : dt(d), f(count), h(count) {}
  void set(int64_t i, float v) {
    f[i] = v;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    h[i] = static_cast<uint16_t>(u >> 16);  // exact: values are small integers and halves
  }
  float get(int64_t i) const {
    if (dt == LOOM_F32) return f[i];
    uint32_t u = static_cast<uint32_t>(h[i]) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
  loom_tensor t() {
    loom_tensor x{};
    x.data = dt == LOOM_F32 ? static_cast<void*>(f.data()) : static_cast<void*>(h.data());
    x.dtype = dt;
    x.ndim = 1;
    x.shape[0] = static_cast<int64_t>(f.size());
    x.strides[0] = 1;
    return x;
  }
};

struct Ops {
  const loom_comm_v2* t;
  void* self;
  loom_comm* c;
  // Runs op sync or async (issue then wait) and checks the status.
  void run(const std::string& what, bool async,
           const std::function<loom_status(loom_work**, loom_error*)>& op) {
    loom_error e;
    loom_work* w = nullptr;
    loom_status s = op(async ? &w : nullptr, &e);
    if (s == LOOM_OK && async) s = t->wait(self, w, &e);
    expect(s == LOOM_OK, what + ": " + e.message);
  }
};

void check_all(Ops& ops, loom_dtype dt, int64_t count, bool async) {
  const std::string tag = std::string(dt == LOOM_F32 ? "f32" : "bf16") + " count " +
                          std::to_string(count) + (async ? " async" : " sync");
  for (int op : {LOOM_REDUCE_SUM, LOOM_REDUCE_AVG, LOOM_REDUCE_MAX, LOOM_REDUCE_MIN}) {
    Buf b(dt, count);
    for (int64_t i = 0; i < count; ++i) b.set(i, float(i % 8 + me + 1));
    loom_tensor t = b.t();
    ops.run("all_reduce " + tag, async, [&](loom_work** w, loom_error* e) {
      return ops.t->all_reduce(ops.self, ops.c, &t, op, w, e);
    });
    for (int64_t i = 0; i < count; ++i) {
      double base = i % 8, want = op == LOOM_REDUCE_SUM   ? n * base + n * (n + 1) / 2.0
                                  : op == LOOM_REDUCE_AVG ? base + (n + 1) / 2.0
                                  : op == LOOM_REDUCE_MAX ? base + n
                                                          : base + 1;
      if (b.get(i) != want) {
        expect(false,
               "all_reduce op " + std::to_string(op) + " " + tag + " at " + std::to_string(i));
        break;
      }
    }
  }
  {  // reduce_scatter: in holds n blocks of `count`; rank r keeps block r summed over ranks.
    Buf in(dt, count * n), out(dt, count);
    for (int64_t j = 0; j < count * n; ++j) in.set(j, float(j % 8 + me));
    loom_tensor ti = in.t(), to = out.t();
    ops.run("reduce_scatter " + tag, async, [&](loom_work** w, loom_error* e) {
      return ops.t->reduce_scatter(ops.self, ops.c, &ti, &to, LOOM_REDUCE_SUM, w, e);
    });
    for (int64_t k = 0; k < count; ++k)
      if (out.get(k) != n * float((me * count + k) % 8) + n * (n - 1) / 2.0f) {
        expect(false, "reduce_scatter " + tag + " at " + std::to_string(k));
        break;
      }
  }
  {  // all_gather: block r of the output is rank r's input.
    Buf in(dt, count), out(dt, count * n);
    for (int64_t k = 0; k < count; ++k) in.set(k, float(me * 8 + k % 8));
    loom_tensor ti = in.t(), to = out.t();
    ops.run("all_gather " + tag, async, [&](loom_work** w, loom_error* e) {
      return ops.t->all_gather(ops.self, ops.c, &ti, &to, w, e);
    });
    for (int r = 0; r < n; ++r)
      for (int64_t k = 0; k < count; ++k)
        if (out.get(r * count + k) != float(r * 8 + k % 8)) {
          expect(false, "all_gather " + tag);
          r = n;
          break;
        }
  }
  {  // broadcast from the last rank.
    Buf b(dt, count);
    for (int64_t k = 0; k < count; ++k) b.set(k, float(me * 8 + k % 8));
    loom_tensor t = b.t();
    ops.run("broadcast " + tag, async, [&](loom_work** w, loom_error* e) {
      return ops.t->broadcast(ops.self, ops.c, &t, n - 1, w, e);
    });
    for (int64_t k = 0; k < count; ++k)
      if (b.get(k) != float((n - 1) * 8 + k % 8)) {
        expect(false, "broadcast " + tag);
        break;
      }
  }
  {  // all_to_all, equal blocks: rank r sends value 8r + p + k%2 to rank p.
    Buf in(dt, count * n), out(dt, count * n);
    for (int p = 0; p < n; ++p)
      for (int64_t k = 0; k < count; ++k) in.set(p * count + k, float(me * 8 + p + k % 2));
    loom_tensor ti = in.t(), to = out.t();
    ops.run("all_to_all " + tag, async, [&](loom_work** w, loom_error* e) {
      return ops.t->all_to_all(ops.self, ops.c, &ti, &to, nullptr, nullptr, w, e);
    });
    for (int p = 0; p < n; ++p)
      for (int64_t k = 0; k < count; ++k)
        if (out.get(p * count + k) != float(p * 8 + me + k % 2)) {
          expect(false, "all_to_all " + tag);
          p = n;
          break;
        }
  }
  {  // all_to_all v: rank r sends (count + r) elements to every rank.
    std::vector<int64_t> sc(n, count + me), rc(n);
    int64_t total_in = (count + me) * n, total_out = 0;
    for (int p = 0; p < n; ++p) total_out += (rc[p] = count + p);
    Buf in(dt, total_in), out(dt, total_out);
    for (int p = 0; p < n; ++p)
      for (int64_t k = 0; k < count + me; ++k) in.set(p * (count + me) + k, float(me * 8 + p));
    loom_tensor ti = in.t(), to = out.t();
    ops.run("all_to_all_v " + tag, async, [&](loom_work** w, loom_error* e) {
      return ops.t->all_to_all(ops.self, ops.c, &ti, &to, sc.data(), rc.data(), w, e);
    });
    int64_t off = 0;
    for (int p = 0; p < n; ++p)
      for (int64_t k = 0; k < count + p; ++k, ++off)
        if (out.get(off) != float(p * 8 + me)) {
          expect(false, "all_to_all_v " + tag);
          p = n;
          break;
        }
  }
  {  // send to the next rank, receive from the previous one, both issued before either waits.
    Buf s(dt, count), r(dt, count);
    for (int64_t k = 0; k < count; ++k) s.set(k, float(me * 8 + k % 8));
    loom_tensor ts = s.t(), tr = r.t();
    loom_error e;
    loom_work *ws = nullptr, *wr = nullptr;
    bool ok = ops.t->recv(ops.self, ops.c, &tr, (me + n - 1) % n, 7, &wr, &e) == LOOM_OK &&
              ops.t->send(ops.self, ops.c, &ts, (me + 1) % n, 7, &ws, &e) == LOOM_OK &&
              ops.t->wait(ops.self, ws, &e) == LOOM_OK && ops.t->wait(ops.self, wr, &e) == LOOM_OK;
    expect(ok, "send/recv " + tag + ": " + e.message);
    int from = (me + n - 1) % n;
    for (int64_t k = 0; k < count && ok; ++k)
      if (r.get(k) != float(from * 8 + k % 8)) {
        expect(false, "send/recv values " + tag);
        break;
      }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto env = dist::rank_from_environment();
    if (!env) {
      std::printf("run me under `loom launch -n N --`\n");
      return 2;
    }
    me = env->rank, n = env->world;
    const std::string comm = argc > 1 ? argv[1] : "gloo";
    const char* check_every =
        std::getenv("GLOO_CHECK_EVERY");  // [plugins.gloo] check_every, for the off-by-one runs
    config::Config cfg = config::Config::parse(
        "[plugins]\ncomm = \"" + comm + "\"\n" +
            (check_every ? "[plugins.gloo]\ncheck_every = " + std::string(check_every) + "\n" : ""),
        "worker.toml");
    plugins::Registry reg(plugins::Registry::default_dirs());
    plugins::Selection sel = plugins::resolve(cfg, reg);
    loom_options opts = plugins::options_for(cfg, comm);
    dist::MeshShape mesh;
    mesh.dp = n;
    dist::CommWorld world(*env, mesh, sel.slot("comm")->found, &opts, 20000);
    Ops ops{world.table(), world.self(), world.world().raw()};
    if (argc > 2 && std::string(argv[2]) == "mismatch") {
      // Rank 0 reduces more elements than the others: the comm plugin must fail with a message,
      // not abort.
      Buf b(LOOM_F32, me == 0 ? 4096 : 1024);
      loom_tensor t = b.t();
      ops.run("all_reduce of a different size on each rank", false,
              [&](loom_work** w, loom_error* e) {
                return ops.t->all_reduce(ops.self, ops.c, &t, LOOM_REDUCE_SUM, w, e);
              });
      return failures == 0 ? 0 : 1;
    }
    if (argc > 2 && std::string(argv[2]) == "off_by_one") {
      // 100 agreeing all-reduces, then rank 0 reduces one element more on every call: past the
      // first 64, gloo compares signatures every 64th call, so #128 must fail on both ranks.
      const std::string op = argc > 3 ? argv[3] : "all_reduce";
      for (int i = 0; i < 200 && failures == 0; ++i) {
        const int64_t count = me == 0 && i >= 100 ? 1025 : 1024;
        Buf in(LOOM_F32, count * (op == "all_reduce" ? 1 : n)), out(LOOM_F32, count);
        loom_tensor ti = in.t(), to = out.t();
        ops.run(op, false, [&](loom_work** w, loom_error* e) {
          if (op == "reduce_scatter")
            return ops.t->reduce_scatter(ops.self, ops.c, &ti, &to, LOOM_REDUCE_SUM, w, e);
          if (op == "broadcast") return ops.t->broadcast(ops.self, ops.c, &to, 0, w, e);
          return ops.t->all_reduce(ops.self, ops.c, &ti, LOOM_REDUCE_SUM, w, e);
        });
      }
      return failures == 0 ? 0 : 1;
    }
    for (loom_dtype dt : {LOOM_F32, LOOM_BF16})
      for (int64_t count : {0, 1, 7, 13, 1001})
        for (bool async : {false, true}) check_all(ops, dt, count, async);
    world.world().barrier();
    if (failures == 0)
      std::printf("rank %d: all collectives correct on %d ranks (%s)\n", me, n, comm.c_str());
  } catch (const std::exception& e) {
    std::printf("rank %d: error: %s\n", me, e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
