// ddp: data parallelism with bucketed, overlapped gradient all-reduce.
//
// Parameters are grouped, in reverse declaration order (the order backward produces them), into
// buckets of about bucket_mb megabytes: contiguous ranges of the flat gradient buffer. During the
// last micro-batch's backward each bucket is all-reduced (averaged over dp) the moment its last
// gradient is final, on the comm plugin's queue, while backward carries on with earlier layers.
// finish_grads waits for whatever is still in flight; that wait is the exposed communication.
// Under expert parallelism experts' gradients go in buckets of their own, reduced over
// expert_dp (the dp ranks holding the same experts) and scaled to the data group's mean.
// reduce_dtype = "bf16" rounds each bucket to bf16 before the all-reduce and widens the result
// back into the fp32 gradients: half the bytes on a wire that carries bf16, at bf16's precision.
// reduce_dtype = "fp8" sends a quarter of fp32's bytes. No all-reduce can sum in 8 bits, so a
// bucket is reduced in two moves of E4M3 blocks, each block prefixed with the fp32 scale that
// maps its largest magnitude to 448 (a per-block scale, so no rank waits to agree on one):
//   1. all-to-all: the bucket cut into n equal blocks, block j to rank j;
//   2. rank j sums the n blocks it received in fp32, divides by n and all-gathers its block,
//      encoded again with its own scale; every rank decodes every block, its own included, so
//      the replicas stay identical.
// 2 (n-1)/n bytes per gradient plus the scales. Phase 1 runs during the backward; phase 2, which
// needs phase 1 done, in finish_grads. E4M3 rather than E5M2: the scale takes care of the range,
// and the third mantissa bit halves the rounding error. Both wires are encoded and decoded by the
// op table's codec kernels in buffers on the gradients' device, where the gradients are.
// bucket_mb = 0 sizes the buckets from the link itself: at setup ddp times small and large
// all-reduces over dp and fits t(S) = alpha + S / beta; a bucket of 9 alpha beta bytes spends at
// most a tenth of its all-reduce on latency, and anything smaller only adds latency (the
// reasoning behind PyTorch DDP's fixed 25 MiB, made per link). Off by default: an element's
// summation order in a ring depends on where the bucket boundaries fall, so a measured size
// would let the last bits of a dp > 2 run vary from one launch to the next.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <loom/formats.hpp>
#include <loom/sdk.hpp>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Bucket {
  int64_t begin = 0, end = 0;  // elements of the flat gradient buffer
  int params = 0, pending = 0;
  bool expert = false;  // LOOM_PARAM_EXPERT gradients, reduced over expert_dp
  loom_work* work = nullptr;
  // The wire, on the gradients' device, kept from step to step: the bucket in bf16 while
  // reduce_dtype = "bf16"; for "fp8" n blocks of (scale, codes) each way.
  loom::sdk::DeviceArray<uint8_t> staged, sent, received;
};

using loom::formats::block_bytes;
using loom::sdk::f32;

class Ddp : public loom::sdk::ReplicatedDataPlugin {
 public:
  // Every gradient is all-reduced once per step, in buckets during the last micro-batch's
  // backward: 2(n-1)/n x bytes on the wire (REFERENCE.md). Expert gradients go over expert_dp.
  // The options change the plan as they change the run: bf16 wires send 2 bytes per gradient
  // (otherwise the workload's width), and overlap = false reduces every bucket after the
  // backward, exposed.
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options& o) {
    using loom::sdk::collective;
    const std::string dtype = o.str("reduce_dtype");
    const int64_t width = dtype == "bf16" ? 2 : dtype == "fp8" ? 1 : q.grad_bytes;
    const bool overlap = o.boolean("overlap");
    const loom_cost_phase phase = overlap ? LOOM_COST_BACKWARD : LOOM_COST_STEP;
    const double hidden = overlap ? 1.0 : 0.0;
    std::vector<loom_cost_collective> c;
    const int64_t dense = q.params - q.expert_params;
    c.push_back(collective(LOOM_COST_ALL_REDUCE, phase, dense * width, 1, hidden,
                           "gradient all-reduce (buckets)"));
    if (q.expert_params > 0 && q.expert_dp > 1)
      c.push_back(collective(LOOM_COST_ALL_REDUCE, phase, q.expert_params * width, 1, hidden,
                             "expert gradient all-reduce", q.expert_dp));
    return c;
  }
  static constexpr loom_option_spec kOptions[] = {
      {"bucket_mb", LOOM_OPT_FLOAT, "25.0",
       "gradient bucket size in MiB; 0 = sized from the measured link"},
      {"overlap", LOOM_OPT_BOOL, "true", "reduce buckets during backward (false: all after it)"},
      {"reduce_dtype", LOOM_OPT_STRING, "\"fp32\"",
       "gradient all-reduce dtype: fp32, bf16 or fp8 (E4M3, a scale per block)"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom::sdk::About about{
      .name = "ddp",
      .version = "1.0.0",
      .summary = "data parallel: bucketed gradient all-reduce overlapped with backward",
      .options = kOptions,
      .cost = &cost,
      .capabilities = LOOM_DATA_EXPERTS | LOOM_DATA_PIPELINE};

  explicit Ddp(const loom::sdk::Context& ctx)
      : host_(ctx.host),
        bucket_bytes_(static_cast<int64_t>(ctx.options.f64("bucket_mb") * 1048576.0)),
        overlap_(ctx.options.boolean("overlap")) {
    if (bucket_bytes_ < 0)
      throw loom::sdk::ConfigError(
          "bucket_mb must be positive, or 0 to size buckets from the measured link");
    const std::string dtype = ctx.options.str("reduce_dtype");
    if (dtype != "fp32" && dtype != "bf16" && dtype != "fp8")
      throw loom::sdk::ConfigError("reduce_dtype must be \"fp32\", \"bf16\" or \"fp8\", got \"" +
                                   dtype + "\"");
    bf16_ = dtype == "bf16";
    fp8_ = dtype == "fp8";
  }

  void setup(const loom_data_context& ctx) override {
    ctx_ = ctx;
    if (fp8_)
      sum_ =
          loom::sdk::DeviceArray<float>(host_.raw(), ctx.ops, 0, "an fp8 bucket's reduced block");
    expert_dp_ = ctx.expert_dp;
    if (expert_dp_)  // an expert gradient: sum over expert_dp / size(dp) = average x this
      expert_scale_ = static_cast<float>(ctx.comm->size(ctx.comm_self, expert_dp_)) /
                      static_cast<float>(ctx.comm->size(ctx.comm_self, ctx.dp));
    if (bucket_bytes_ == 0) bucket_bytes_ = measured_bucket_bytes();
    bucket_of_.assign(ctx.n_params, -1);
    buckets_.clear();
    // Walk parameters from last to first; params are contiguous in the flat buffer, so each
    // bucket is one range [begin, end).
    for (int64_t p = ctx.n_params - 1; p >= 0; --p) {
      const loom_param_info& info = ctx.params[p];
      const bool expert = expert_dp_ && ctx.param_flags && (ctx.param_flags[p] & LOOM_PARAM_EXPERT);
      if (buckets_.empty() || (buckets_.back().end - buckets_.back().begin) * 4 >= bucket_bytes_ ||
          buckets_.back().expert != expert) {
        Bucket b;
        b.end = info.offset + info.numel;
        b.begin = info.offset;
        b.expert = expert;
        buckets_.push_back(std::move(b));
      }
      Bucket& b = buckets_.back();
      b.begin = std::min(b.begin, info.offset);
      b.end = std::max(b.end, info.offset + info.numel);
      ++b.params;
      bucket_of_[p] = static_cast<int>(buckets_.size()) - 1;
    }
    for (auto& b : buckets_) b.pending = b.params;
    host_.info(std::to_string(buckets_.size()) + " gradient buckets of up to " +
               std::to_string(bucket_bytes_ / 1048576.0).substr(0, 4) + " MiB over " +
               std::to_string(ctx.comm->size(ctx.comm_self, ctx.dp)) + " dp ranks");
  }

  void grad_ready(int64_t param) override {
    Bucket& b = buckets_.at(bucket_of_.at(param));
    if (--b.pending == 0 && overlap_) issue(b);
  }

  void finish_grads(double& comm_ms, double& exposed_ms) override {
    auto t0 = Clock::now();
    for (auto& b : buckets_)
      if (!b.work) issue(b);  // buckets whose gradients never reported ready, or overlap off
    // Wait for every bucket even after a failure, so no handle outlives the step.
    std::string failure;
    for (auto& b : buckets_) {
      loom::sdk::ErrorBox err(host_.raw());
      loom_work* w = b.work;
      b.work = nullptr;
      b.pending = b.params;
      if (ctx_.comm->wait(ctx_.comm_self, w, err.get()) != LOOM_OK) {
        if (failure.empty()) failure = host_.raw()->error_message(err.get());
        continue;
      }
      if (fp8_ && failure.empty()) {
        try {
          gather_fp8(b);
        } catch (const std::exception& e) {
          failure = e.what();
        }
        continue;
      }
      if (bf16_)
        loom::sdk::from_bf16(ctx_.ops, ctx_.grads + b.begin, b.staged.as<uint16_t>(),
                             b.end - b.begin);
      if (b.expert)
        ctx_.ops->scale(f32(ctx_.grads + b.begin), expert_scale_,
                        b.end - b.begin);  // the grads may be device memory
    }
    auto t1 = Clock::now();
    exposed_ms = ms_between(t0, t1);
    comm_ms = ms_between(first_issue_, t1);
    issued_any_ = false;
    last_sent_ = sent_, sent_ = 0;
    if (!failure.empty()) throw loom::sdk::Error(LOOM_FATAL, "gradient all-reduce: " + failure);
  }

  // Model state stays in the runtime's buffers; what ddp adds is the bf16 staging and the wire.
  void accounting(int64_t out[5]) override {
    std::fill(out, out + 5, 0);
    for (const auto& b : buckets_) out[3] += b.staged.bytes() + b.sent.bytes() + b.received.bytes();
    out[3] += sum_.bytes();
    out[4] = last_sent_;
  }

  // A step abandoned half-way (a peer died) still has reductions writing into the gradients:
  // wait for them before the buffers go away.
  ~Ddp() override {
    for (auto& b : buckets_)
      if (b.work) {
        loom::sdk::ErrorBox err(host_.raw());
        ctx_.comm->wait(ctx_.comm_self, b.work, err.get());
      }
  }

 private:
  // The median time of `repeats` blocking all-reduces of n floats over dp, in seconds.
  double time_all_reduce(int64_t n, int repeats) {
    std::vector<float> buf(n, 1.f);
    std::vector<double> t;
    for (int i = 0; i < repeats; ++i) {
      loom_tensor x = loom::sdk::flat_tensor(buf.data(), LOOM_F32, n);
      auto t0 = Clock::now();
      all_reduce_now(x, LOOM_REDUCE_SUM);
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::nth_element(t.begin(), t.begin() + repeats / 2, t.end());
    return t[repeats / 2];
  }
  void all_reduce_now(loom_tensor& x, int32_t op) {
    loom::sdk::ErrorBox err(host_.raw());
    loom_work* w = nullptr;
    if (ctx_.comm->all_reduce(ctx_.comm_self, ctx_.dp, &x, op, &w, err.get()) != LOOM_OK ||
        ctx_.comm->wait(ctx_.comm_self, w, err.get()) != LOOM_OK)
      err.raise("measuring the dp link");
  }
  // 9 alpha beta, from a 1 KiB and a 1 MiB all-reduce (the median of 5 each, after a warm-up),
  // between 64 KiB and 256 MiB, and the same on every rank: the largest any rank measured.
  int64_t measured_bucket_bytes() {
    constexpr int64_t kSmall = 256, kLarge = 262144;  // floats
    time_all_reduce(kLarge, 1);
    const double small = time_all_reduce(kSmall, 5), large = time_all_reduce(kLarge, 5);
    const double seconds_per_byte = std::max(large - small, 1e-9) / double(4 * (kLarge - kSmall));
    const double alpha = std::max(small - 4 * kSmall * seconds_per_byte, 1e-7);
    double bytes = std::clamp(9 * alpha / seconds_per_byte, 65536.0, 268435456.0);
    bytes = std::floor(bytes / 4096) * 4096;
    loom_tensor x = loom::sdk::flat_tensor(&bytes, LOOM_F64, 1);
    all_reduce_now(x, LOOM_REDUCE_MAX);
    host_.info("ddp measured the dp link: " + std::to_string(int(alpha * 1e6)) + " us latency, " +
               std::to_string(int(1e-6 / seconds_per_byte)) + " MB/s an all-reduce; buckets of " +
               std::to_string(int64_t(bytes) / 1024) + " KiB keep latency under a tenth of each");
    return static_cast<int64_t>(bytes);
  }

  // fp8 phase 1: every rank's block j, scaled, to rank j (see the top of the file).
  void issue_fp8(Bucket& b, loom_comm* group, int64_t n) {
    const int64_t count = b.end - b.begin, width = (count + n - 1) / n, stride = block_bytes(width);
    if (b.sent.size() == 0)
      b.sent = bytes(n * stride, "an fp8 gradient wire"),
      b.received = bytes(n * stride, "an fp8 gradient wire");
    ctx_.ops->encode_blocks(b.sent.data(), ctx_.grads + b.begin, count, width, n);
    loom_tensor in = loom::sdk::flat_tensor(b.sent.data(), LOOM_U8, n * stride);
    loom_tensor out = loom::sdk::flat_tensor(b.received.data(), LOOM_U8, n * stride);
    sent_ += 2 * (n - 1) * stride;  // this phase and the gather
    loom::sdk::ErrorBox err(host_.raw());
    if (ctx_.comm->all_to_all(ctx_.comm_self, group, &in, &out, nullptr, nullptr, &b.work,
                              err.get()) != LOOM_OK)
      err.raise("issuing a gradient all-to-all (fp8)");
  }
  // fp8 phase 2, once phase 1 completed: the mean of this rank's block, encoded and gathered, and
  // every gathered block decoded into the gradients.
  void gather_fp8(Bucket& b) {
    loom_comm* group = b.expert ? expert_dp_ : ctx_.dp;
    const int64_t n = ctx_.comm->size(ctx_.comm_self, group),
                  r = ctx_.comm->rank(ctx_.comm_self, group);
    const int64_t count = b.end - b.begin, width = (count + n - 1) / n, stride = block_bytes(width);
    ctx_.ops->zero(sum_.at_least(width), 4 * width);
    ctx_.ops->decode_blocks(sum_.data(), b.received.data(), width, width, n,
                            LOOM_BLOCKS_SUM | LOOM_BLOCKS_ADD);
    const float mean = (b.expert ? expert_scale_ : 1.f) / static_cast<float>(n);
    ctx_.ops->scale(f32(sum_.data()), mean, width);
    const int64_t mine = std::max<int64_t>(0, std::min(width, count - r * width));
    ctx_.ops->encode_blocks(b.sent.data(), sum_.data(), mine, width, 1);
    loom_tensor in = loom::sdk::flat_tensor(b.sent.data(), LOOM_U8, stride);
    loom_tensor out = loom::sdk::flat_tensor(b.received.data(), LOOM_U8, n * stride);
    loom::sdk::ErrorBox err(host_.raw());
    if (ctx_.comm->all_gather(ctx_.comm_self, group, &in, &out, nullptr, err.get()) != LOOM_OK)
      err.raise("gradient all-gather (fp8)");
    ctx_.ops->decode_blocks(ctx_.grads + b.begin, b.received.data(), count, width, n, 0);
  }

  loom::sdk::DeviceArray<uint8_t> bytes(int64_t n, const char* what) const {
    return loom::sdk::DeviceArray<uint8_t>(host_.raw(), ctx_.ops, n, what);
  }

  void issue(Bucket& b) {
    if (!issued_any_) first_issue_ = Clock::now(), issued_any_ = true;
    loom_comm* group = b.expert ? expert_dp_ : ctx_.dp;
    const int64_t n = ctx_.comm->size(ctx_.comm_self, group);
    if (fp8_) return issue_fp8(b, group, n);
    loom_tensor t = loom::sdk::flat_tensor(ctx_.grads + b.begin, LOOM_F32, b.end - b.begin);
    if (bf16_) {
      if (b.staged.size() == 0) b.staged = bytes(2 * (b.end - b.begin), "a bf16 gradient wire");
      loom::sdk::to_bf16(ctx_.ops, b.staged.as<uint16_t>(), ctx_.grads + b.begin, b.end - b.begin);
      t = loom::sdk::flat_tensor(b.staged.data(), LOOM_BF16, b.end - b.begin);
    }
    sent_ += 2 * (n - 1) * (b.end - b.begin) * (bf16_ ? 2 : 4) /
             n;  // a ring sends 2 (n-1)/n of the buffer
    loom::sdk::ErrorBox err(host_.raw());
    if (ctx_.comm->all_reduce(ctx_.comm_self, group, &t, LOOM_REDUCE_AVG | LOOM_COMM_PERSISTENT,
                              &b.work, err.get()) != LOOM_OK)
      err.raise("issuing a gradient all-reduce");
  }

  loom::sdk::Host host_;
  int64_t bucket_bytes_;
  bool overlap_, bf16_ = false, fp8_ = false;
  loom::sdk::DeviceArray<float>
      sum_;  // fp8 phase 2: this rank's reduced block, the widest bucket's
  loom_data_context ctx_{};
  loom_comm* expert_dp_ = nullptr;
  float expert_scale_ = 1.f;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  Clock::time_point first_issue_;
  bool issued_any_ = false;
  int64_t sent_ = 0, last_sent_ = 0;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::data_plugin<Ddp>())
