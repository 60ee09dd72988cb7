#include "distributed/comm_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/errors.hpp"
#include "loader/host.hpp"
#include "tensor/tensor.hpp"

namespace loom::dist {

void check_op(const std::string& op) {
  static const char* known[] = {"all_reduce", "all_gather", "reduce_scatter",
                                "broadcast",  "all_to_all", "sendrecv"};
  for (const char* k : known)
    if (op == k) return;
  throw UsageError("unknown --op '" + op +
                   "' (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, sendrecv)");
}

std::string nccl_variables() {
  std::vector<std::string> set;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "NCCL_", 5) == 0) set.push_back(*e);
  std::sort(set.begin(), set.end());
  std::string out;
  for (const std::string& v : set) out += (out.empty() ? "" : " ") + v;
  return out.empty() ? "none set (NCCL's defaults)" : out;
}

double busbw_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return double(n - 1) / n;
  return 1.0;  // broadcast, sendrecv
}

// Digits, then at most one of K, M, G; anything else ("1T", "8x", "1.5M") is refused rather
// than read up to its first non-digit.
int64_t parse_bytes(const std::string& s) {
  const std::string examples = "cannot read byte count '" + s + "' (examples: 8, 64K, 256M, 1G)";
  if (s.empty()) throw UsageError("empty byte count");
  const char unit = s.back();
  const int64_t mult = unit == 'K' ? 1024 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1ll << 30 : 1;
  const std::string digits =
      std::isdigit(static_cast<unsigned char>(unit)) ? s : s.substr(0, s.size() - 1);
  if (digits.empty() || digits.size() > 12 ||
      !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
      (mult == 1 && !std::isdigit(static_cast<unsigned char>(unit))))
    throw UsageError(examples);
  return std::stoll(digits) * mult;
}

namespace {

loom_tensor view(void* data, loom_dtype dt, int64_t n) { return flat_view(data, dt, n); }

float bf16_value(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Buffers {
  loom_dtype dt;
  size_t es;
  std::vector<char> in, out;
  void fill(int rank, int64_t n) {  // every element = rank + 1: exact in bf16 for small worlds
    for (int64_t i = 0; i < n; ++i) put(in.data(), i, float(rank + 1));
  }
  void put(char* base, int64_t i, float v) {
    if (dt == LOOM_F32) {
      std::memcpy(base + i * 4, &v, 4);
    } else {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(base + i * 2, &h, 2);
    }
  }
  float get(const char* base, int64_t i) const {
    if (dt == LOOM_F32) {
      float v;
      std::memcpy(&v, base + i * 4, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, base + i * 2, 2);
    return bf16_value(h);
  }
};

// One size's buffer: `total` elements, of which `count` are one rank's block for
// gather/scatter-like ops (`size` bytes is the whole buffer: count x n elements).
struct Shape {
  int64_t total, count;
};

Shape shape_of(const std::string& op, int64_t size, size_t es, int n) {
  bool per_rank_split = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
  int64_t total = std::max<int64_t>(size / static_cast<int64_t>(es), per_rank_split ? n : 1);
  if (per_rank_split) total = total / n * n;
  int64_t count = per_rank_split && op != "all_to_all" ? total / n : total;
  return {total, count};
}

// One rank's side of the bench: runs, checks and times `o.op` at each size.
class Bench {
 public:
  Bench(CommWorld& world, const CommBenchOptions& o)
      : world_(world),
        o_(o),
        t_(world.table()),
        self_(world.self()),
        c_(world.world().raw()),
        n_(world.world().size()),
        me_(world.world().rank()),
        dt_(o.dtype == "bfloat16" ? LOOM_BF16 : LOOM_F32),
        es_(dt_ == LOOM_F32 ? 4 : 2) {}

  void print_header() const {
    std::printf("# loom bench comm: %s, %d ranks, %s, warmup %d, iters %d\n", o_.op.c_str(), n_,
                o_.dtype.c_str(), o_.warmup, o_.iters);
    // nccl-tests prints an out-of-place and an in-place group per row. Loom's comm ABI has one
    // variant per op (all_reduce and broadcast in place, the others from an input buffer into an
    // output buffer): the other group says n/a rather than a figure measured some other way.
    std::printf("# %46s %-36s %s\n", "", "out-of-place", "in-place");
    std::printf("# %12s %12s %8s %6s %5s %10s %8s %8s %7s %10s %8s %8s %7s\n", "size", "count",
                "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "time(us)",
                "algbw", "busbw", "#wrong");
    std::printf("# %12s %12s %8s %6s %5s %10s %8s %8s %7s %10s %8s %8s %7s\n", "(B)", "(elements)",
                "", "", "", "", "(GB/s)", "(GB/s)", "", "", "(GB/s)", "(GB/s)", "");
  }

  bool in_place() const { return o_.op == "all_reduce" || o_.op == "broadcast"; }

  // One row of the table (rank 0 prints it); returns the size's busbw.
  double measure(int64_t size) {
    const Shape s = shape_of(o_.op, size, es_, n_);
    Buffers b{dt_, es_, std::vector<char>(s.total * es_), std::vector<char>(s.total * es_)};
    // Correctness once per size, on fresh inputs.
    b.fill(me_, s.total);
    run_once(b, s);
    const int64_t wrong = count_wrong(b, s);
    for (int w = 0; w < o_.warmup; ++w) run_once(b, s);
    world_.world().barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o_.iters; ++it) run_once(b, s);
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        o_.iters;
    double stats[2] = {us, static_cast<double>(wrong)};
    world_.world().all_reduce(view(stats, LOOM_F64, 1), LOOM_REDUCE_MAX);
    world_.world().all_reduce(view(stats + 1, LOOM_F64, 1), LOOM_REDUCE_SUM);
    double bytes = static_cast<double>(s.total) * es_;
    double algbw = bytes / (stats[0] * 1e-6) / 1e9, busbw = algbw * busbw_factor(o_.op, n_);
    if (me_ == 0) print_row(bytes, s, stats[0], algbw, busbw, stats[1]);
    return busbw;
  }

  int rank() const { return me_; }

 private:
  // The bench reuses one buffer per size, as training reuses its gradient buckets.
  void run_once(Buffers& b, const Shape& sh) {
    loom_error e;
    loom_status s = LOOM_OK;
    loom_tensor in = view(b.in.data(), dt_, o_.op == "all_gather" ? sh.count : sh.total);
    loom_tensor out = view(b.out.data(), dt_, o_.op == "reduce_scatter" ? sh.count : sh.total);
    if (o_.op == "all_reduce")
      s = t_->all_reduce(self_, c_, &in, LOOM_REDUCE_SUM | LOOM_COMM_PERSISTENT, nullptr, &e);
    else if (o_.op == "all_gather")
      s = t_->all_gather(self_, c_, &in, &out, nullptr, &e);
    else if (o_.op == "reduce_scatter")
      s = t_->reduce_scatter(self_, c_, &in, &out, LOOM_REDUCE_SUM, nullptr, &e);
    else if (o_.op == "broadcast")
      s = t_->broadcast(self_, c_, &in, 0, nullptr, &e);
    else if (o_.op == "all_to_all")
      s = t_->all_to_all(self_, c_, &in, &out, nullptr, nullptr, nullptr, &e);
    else {  // sendrecv: each rank sends to the next and receives from the previous
      loom_work *ws = nullptr, *wr = nullptr;
      s = t_->recv(self_, c_, &out, (me_ + n_ - 1) % n_, 1, &wr, &e);
      if (s == LOOM_OK) s = t_->send(self_, c_, &in, (me_ + 1) % n_, 1, &ws, &e);
      if (s == LOOM_OK) s = t_->wait(self_, ws, &e);
      if (s == LOOM_OK) s = t_->wait(self_, wr, &e);
    }
    if (s != LOOM_OK) throw RuntimeError(o_.op + " failed: " + e.message);
  }

  // Elements of the result that differ from what `fill` on every rank must give.
  int64_t count_wrong(const Buffers& b, const Shape& s) const {
    const int n = n_, me = me_;
    const int64_t total = s.total, count = s.count;
    int64_t wrong = 0;
    auto expect = [&](const char* base, int64_t i, float want) { wrong += b.get(base, i) != want; };
    if (o_.op == "all_reduce")
      for (int64_t i = 0; i < total; ++i) expect(b.in.data(), i, n * (n + 1) / 2.0f);
    else if (o_.op == "reduce_scatter")
      for (int64_t i = 0; i < count; ++i) expect(b.out.data(), i, n * (n + 1) / 2.0f);
    else if (o_.op == "all_gather")
      for (int64_t i = 0; i < total; ++i) expect(b.out.data(), i, float(i / count + 1));
    else if (o_.op == "broadcast")
      for (int64_t i = 0; i < total; ++i) expect(b.in.data(), i, 1.f);
    else if (o_.op == "all_to_all")
      for (int64_t i = 0; i < total; ++i) expect(b.out.data(), i, float(i / (total / n) + 1));
    else
      for (int64_t i = 0; i < total; ++i) expect(b.out.data(), i, float((me + n - 1) % n + 1));
    return wrong;
  }

  void print_row(double bytes, const Shape& s, double us, double algbw, double busbw,
                 double wrong) const {
    const char* redop = o_.op == "all_reduce" || o_.op == "reduce_scatter" ? "sum" : "none";
    const char* root = o_.op == "broadcast" ? "0" : "-1";
    char measured[64];
    std::snprintf(measured, sizeof measured, "%10.1f %8.3f %8.3f %7.0f", us, algbw, busbw, wrong);
    const char* none = "       n/a      n/a      n/a     n/a";
    std::printf("  %12.0f %12lld %8s %6s %5s %s %s\n", bytes,
                (long long)(o_.op == "all_gather" || o_.op == "reduce_scatter" ? s.count : s.total),
                o_.dtype.c_str(), redop, root, in_place() ? none : measured,
                in_place() ? measured : none);
    std::fflush(stdout);
  }

  CommWorld& world_;
  const CommBenchOptions& o_;
  const loom_comm_v2* t_;
  void* self_;
  loom_comm* c_;
  const int n_, me_;
  const loom_dtype dt_;
  const size_t es_;
};

}  // namespace

std::optional<CommBenchRow> parse_comm_bench_row(const std::string& line) {
  std::string text = line;
  if (text.rfind("[rank ", 0) == 0) text = text.substr(text.find(']') + 1);
  std::istringstream words(text);
  std::string size, count, type, redop, root;
  if (!(words >> size >> count >> type >> redop >> root) || size.empty() || size[0] == '#')
    return std::nullopt;
  std::string group[8];
  for (std::string& g : group)
    if (!(words >> g)) return std::nullopt;
  const int at = group[0] == "n/a" ? 4 : 0;  // the measured group
  try {
    return CommBenchRow{std::stod(size), std::stod(group[at]), std::stod(group[at + 1]),
                        std::stod(group[at + 2]), std::stod(group[at + 3])};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double run_comm_bench(CommWorld& world, const CommBenchOptions& o) {
  Bench bench(world, o);
  if (bench.rank() == 0) bench.print_header();
  double bus_sum = 0;
  int rows = 0;
  for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= 2) {
    bus_sum += bench.measure(size);
    ++rows;
  }
  if (bench.rank() == 0)
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? bus_sum / rows : 0.0);
  return rows ? bus_sum / rows : 0.0;
}

}  // namespace loom::dist
