// zero1, zero2, zero3: ZeRO data parallelism (Rajbhandari et al. 2020), one library.
//
// The model arrives as units, one per layer, each a contiguous range of the flat buffers. Every
// unit is padded to a multiple of the dp size N and split into N equal pieces; rank r owns piece
// r of every unit (as FSDP shards each wrapped module), so a unit's gradients reduce-scatter
// straight into its owners and its parameters all-gather straight back. Rank r's shard is the
// concatenation of its pieces: about Psi / N elements.
//
// Under expert parallelism the data group is dp x ep, and a unit of experts is split
// over expert_dp instead (the dp ranks that hold those experts), its reduced gradients scaled
// from expert_dp's mean to the data group's.
//
//   stage 1: AdamW moments and the update are sharded. Gradients accumulate in a full buffer; in
//            the last micro-batch's backward each unit is reduce-scattered as soon as it is final.
//            After the update every unit is all-gathered into the full parameter buffer; with
//            gather_overlap (the default) the gathers are issued at once and each is waited for
//            only when the next forward acquires its unit, so they run behind the layers before.
//   stage 2: gradients are sharded too. Each unit's gradients accumulate in a bucket from a small
//            pool during one micro-batch's backward and are reduce-scattered into the shard as
//            soon as the unit is done, so no full-size gradient buffer exists.
//   stage 3: parameters are sharded too. A unit is all-gathered into a buffer before its forward
//            and again before its backward and released after; acquiring unit u prefetches the
//            next prefetch_depth ones in the same direction, so their gathers run behind u's
//            compute.
//
// reduce_dtype = "bf16" sends the gradients' reduce-scatters in bf16 (half the bytes) and widens
// each reduced piece back into the fp32 shard: master weights, moments and the update stay fp32.
// gather_dtype = "bf16" (stage 3) gathers bf16 copies of the master pieces and widens them into
// the unit's buffer: every rank computes with the same bf16-rounded weights, half the bytes cross.
// "fp8" on either (loom/formats.hpp's E4M3 blocks, a scale each): a reduce-scatter in fp8 is an
// all-to-all of every rank's blocks and a sum in fp32 on arrival; a gather sends one block per
// rank. How each dtype crosses is zero_wire.hpp's codec; this file decides only what is sharded.
//
// Shards, buckets, gathered copies and wire buffers live on the op table's device (the host heap
// on the CPU), and only the table's kernels and copies touch them (LOOM_DATA_DEVICE): the same
// code runs on the CPU, the strict device and a GPU.
#include <algorithm>
#include <chrono>
#include <deque>
#include <loom/sdk.hpp>
#include <map>
#include <string>
#include <vector>

#include "zero_cost.hpp"
#include "zero_parts.hpp"
#include "zero_wire.hpp"

namespace {

using loom::sdk::Error;
using Clock = std::chrono::steady_clock;
using Floats = loom::sdk::DeviceArray<float>;
using loom::sdk::f32;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

using namespace loom_zero;

class Zero : public loom::sdk::ShardedDataPlugin {
 public:
  static constexpr loom_option_spec kOptions[] = {
      {"buckets", LOOM_OPT_INT, "2", "gradient reduce-scatters in flight at once"},
      {"prefetch", LOOM_OPT_BOOL, "true", "stage 3: gather the next units while this one computes"},
      {"prefetch_depth", LOOM_OPT_INT, "1",
       "stage 3: how many units ahead prefetch gathers (each holds a gathered copy)"},
      {"reduce_dtype", LOOM_OPT_STRING, "\"fp32\"",
       "gradient reduce-scatter dtype: fp32, bf16 or fp8 (E4M3 blocks)"},
      {"gather_overlap", LOOM_OPT_BOOL, "true",
       "stages 1-2: all-gather the updated parameters behind the next forward (false: at the end "
       "of the step)"},
      {"gather_dtype", LOOM_OPT_STRING, "\"fp32\"",
       "stage 3: parameter all-gather dtype, fp32, bf16 or fp8 (forward and backward then use the "
       "rounded weights)"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom_option_rule kRules[] = {
      {"buckets", 1, 1e9, nullptr, 0},
      {"prefetch_depth", 1, 64, nullptr, 0},
      {"reduce_dtype", 1, 0, "fp32|bf16|fp8", 0},
      {"gather_dtype", 1, 0, "fp32|bf16|fp8", 0},
      {nullptr, 0, 0, nullptr, 0},
  };

  Zero(const loom::sdk::Context& ctx, int stage)
      : host_(ctx.host),
        stage_(stage),
        max_in_flight_(static_cast<int>(ctx.options.i64("buckets"))),
        prefetch_(ctx.options.boolean("prefetch")),
        prefetch_depth_(static_cast<int>(ctx.options.i64("prefetch_depth"))),
        gather_overlap_(ctx.options.boolean("gather_overlap")),
        reduce_(wire_of(ctx.options.str("reduce_dtype")), ctx_, ctx.host.raw()),
        gather_(wire_of(ctx.options.str("gather_dtype")), ctx_, ctx.host.raw()),
        update_gather_(Wire::F32, ctx_, ctx.host.raw()) {
    if (gather_.wire() != Wire::F32 && stage != 3)
      throw loom::sdk::ConfigError(
          "[plugins.zero" + std::to_string(stage) + "] gather_dtype = \"" +
          ctx.options.str("gather_dtype") +
          "\" is for zero3: stages 1-2 keep every parameter whole in fp32 on every rank, and "
          "their gathers write into those copies");
  }

  ~Zero() override {
    for (auto& r : in_flight_) wait_quietly(r.work);
    for (auto& [u, g] : gathers_) wait_quietly(g.work);
    for (loom_work* w : updates_) wait_quietly(w);
  }

  int stage() override { return stage_; }

  void setup(const loom_data_context& ctx) override {
    if (!ctx.units) throw Error(LOOM_INTERNAL, "zero needs the model's units in its setup context");
    ctx_ = ctx;
    const int64_t U = ctx.n_units;
    loom_comm* expert_dp = ctx.expert_dp;
    const Group data{ctx.dp, ctx.comm->size(ctx.comm_self, ctx.dp),
                     ctx.comm->rank(ctx.comm_self, ctx.dp), 1.f};
    group_.assign(U, data);
    if (expert_dp) {
      const int n = ctx.comm->size(ctx.comm_self, expert_dp);
      const Group experts{expert_dp, n, ctx.comm->rank(ctx.comm_self, expert_dp),
                          static_cast<float>(n) / data.n};
      for (int64_t p = 0; p < ctx.n_params; ++p)
        if (ctx.param_flags[p] & LOOM_PARAM_EXPERT) group_[unit_of(ctx.params[p].offset)] = experts;
    }
    piece_.resize(U);
    shard_at_.resize(U);
    int64_t padded = 0, shard = 0, biggest = 0;
    for (int64_t u = 0; u < U; ++u) {
      const int n = group_[u].n;
      piece_[u] = (ctx.units[u].numel + n - 1) / n;
      shard_at_[u] = shard;
      padded += piece_[u] * n;
      shard += piece_[u];
      biggest = std::max(biggest, piece_[u] * n);
      piece_max_ = std::max(piece_max_, piece_[u]);
    }
    padded_total_ = padded, shard_total_ = shard, unit_max_ = biggest;
    // Where each parameter's elements fall in this rank's pieces.
    for (int64_t p = 0; p < ctx.n_params; ++p) {
      const loom_param_info& info = ctx.params[p];
      const int64_t u = unit_of(info.offset);
      const int64_t lo = ctx.units[u].offset + group_[u].rank * piece_[u], hi = lo + piece_[u];
      const int64_t a = std::max(lo, info.offset), b = std::min(hi, info.offset + info.numel);
      if (a < b)
        segments_.push_back(
            {shard_at_[u] + (a - lo), b - a, ctx.param_flags[p], p, a - info.offset});
    }
    place_state();
    if (stage_ < 3) updates_.assign(U, nullptr);
    host_.info("ZeRO-" + std::to_string(stage_) + ": " + std::to_string(U) + " units over " +
               std::to_string(data.n) + " dp ranks; this rank's shard is " +
               std::to_string(shard_total_) + " of " + std::to_string(padded_total_) + " elements");
  }

  // ---- parameters ----

  float* acquire_params(int64_t u, bool backward, bool prefetch) override {
    if (stage_ < 3) {
      if (updates_[u]) wait(updates_[u], "all-gather of a layer's updated parameters");
      return full_[u].data();
    }
    Gather& g = gather(u);
    complete(u, g);
    ++g.users;
    // The next units in this direction: their gathers run behind this unit's compute.
    if (prefetch_ && prefetch)
      for (int k = 1; k <= prefetch_depth_; ++k) {
        const int64_t next = backward ? u - k : u + k;
        if (next < 0 || next >= ctx_.n_units) break;
        gather(next);
      }
    return g.buf.data();
  }

  void release_params(int64_t u) override {
    if (stage_ < 3) return;
    auto it = gathers_.find(u);
    if (it == gathers_.end() || it->second.users == 0)
      throw Error(LOOM_INTERNAL, "released a unit not acquired");
    if (--it->second.users == 0 && !it->second.work) {
      free_bufs_.push_back(std::move(it->second.buf));
      gathers_.erase(it);
    }
  }

  // ---- gradients ----

  float* grad_buffer(int64_t u) override {
    if (finished_) {  // the first backward of a new step: the last step's gradients are spent
      for (const Floats& unit : full_grads_) ctx_.ops->zero(unit.data(), unit.bytes());
      if (stage_ > 1) ctx_.ops->zero(shard_grads_.data(), shard_grads_.bytes());
      finished_ = false;
    }
    if (stage_ == 1) return full_grads_[u].data();
    while (static_cast<int>(in_flight_.size()) >= max_in_flight_) complete_oldest();
    const int b = take_bucket();
    ctx_.ops->zero(buckets_[b].data(), 4 * piece_[u] * group_[u].n);
    bucket_of_[u] = b;
    return buckets_[b].data();
  }

  void unit_grads_ready(int64_t u, bool last) override {
    if (stage_ == 1 && !last) return;  // stage 1 reduces once, after accumulating
    while (static_cast<int>(in_flight_.size()) >= max_in_flight_) complete_oldest();
    if (!issued_any_) first_issue_ = Clock::now(), issued_any_ = true;
    Reduction r;
    r.unit = u;
    if (stage_ > 1) r.bucket = bucket_of_.at(u);
    const float* in = stage_ == 1 ? full_grads_[u].data() : buckets_[r.bucket].data();
    if (free_pieces_.empty()) {
      free_pieces_.push_back(floats(piece_max_ + 1, "a reduced gradient piece"));
      note_buffers();
    }
    r.piece = std::move(free_pieces_.back());
    free_pieces_.pop_back();
    in_flight_.push_back(std::move(r));
    Reduction& issued =
        in_flight_.back();  // a deque keeps its elements, and their buffers, in place
    const Group& g = group_[u];
    sent_ += reduce_.reduce_scatter(g.comm, g.n, in, issued.piece.data(), piece_[u], issued.wire,
                                    &issued.work);
    note_buffers();  // with its wire buffers
  }

  void finish_grads(double& comm_ms, double& exposed_ms) override {
    auto t0 = Clock::now();
    while (!in_flight_.empty()) complete_oldest();
    auto t1 = Clock::now();
    exposed_ms = ms_between(t0, t1);
    comm_ms = issued_any_ ? ms_between(first_issue_, t1) : 0;
    issued_any_ = false;
    finished_ = true;
    // Traffic between two reductions: one step's forward and backward, and the update before it.
    last_sent_ = sent_, sent_ = 0;
  }

  // Every segment's sum of squares in one call (one host wait on a device), added in segment order.
  void sum_squares(int which, double out[2]) override {
    // While the update's gathers are in flight this rank's pieces are read from their source
    // copy, so a norm does not make the gathers finish before the next forward.
    const bool in_flight =
        std::any_of(updates_.begin(), updates_.end(), [](loom_work* w) { return w != nullptr; });
    std::vector<loom_cref> x;
    std::vector<int64_t> n;
    std::vector<int> part;
    for (const Segment& s : segments_) {
      if (s.flags & LOOM_PARAM_MIRROR) continue;
      x.push_back(f32(which == 0  ? grad_at(s.shard_at)
                      : in_flight ? update_src_.data() + s.shard_at
                                  : value_at(s.shard_at)));
      n.push_back(s.len);
      part.push_back((s.flags & LOOM_PARAM_TP_SHARDED) ? 1 : 0);
    }
    std::vector<double> sums(x.size(), 0.0);
    if (!x.empty())
      ctx_.ops->sum_squares(static_cast<int64_t>(x.size()), x.data(), n.data(), sums.data());
    out[0] = out[1] = 0;
    for (size_t i = 0; i < sums.size(); ++i) out[part[i]] += sums[i];
  }

  // ---- the update ----

  void step(const loom_adamw& hp) override {
    for (auto& [u, g] : gathers_)
      complete(u, g);  // no gather may still be reading the weights about to change
    await_updates();
    // Every segment in one adamw call (one launch on a GPU); segments are disjoint, so this is
    // each segment's own update.
    std::vector<float*> p, m, v;
    std::vector<const float*> g;
    std::vector<int64_t> n;
    std::vector<float> decay;
    for (const Segment& s : segments_) {
      float* grad = grad_at(s.shard_at);
      if (hp.grad_scale != 1.0)
        ctx_.ops->scale(f32(grad), static_cast<float>(hp.grad_scale), s.len);
      p.push_back(value_at(s.shard_at)), g.push_back(grad), n.push_back(s.len);
      m.push_back(m_.data() + s.shard_at), v.push_back(v_.data() + s.shard_at);
      decay.push_back((s.flags & LOOM_PARAM_DECAY) ? static_cast<float>(hp.weight_decay) : 0.f);
    }
    if (!p.empty())
      ctx_.ops->adamw(static_cast<int64_t>(p.size()), p.data(), g.data(), m.data(), v.data(),
                      n.data(), decay.data(), static_cast<float>(hp.lr),
                      static_cast<float>(hp.beta1), static_cast<float>(hp.beta2),
                      static_cast<float>(hp.eps), hp.step);
    if (stage_ == 3) {  // gathered copies are stale now; the next forward gathers again
      for (auto& [u, g] : gathers_) free_bufs_.push_back(std::move(g.buf));
      gathers_.clear();
    } else if (gather_overlap_) {
      issue_updates();
    } else {
      gather_full();
    }
  }

  // Device pointers on a device: the runtime moves them with the op table's copies.
  std::vector<loom_shard_piece> shard_pieces() override {
    await_updates();
    std::vector<loom_shard_piece> out;
    for (const Segment& s : segments_)
      out.push_back({s.param, s.begin, s.len, value_at(s.shard_at), m_.data() + s.shard_at,
                     v_.data() + s.shard_at, grad_at(s.shard_at)});
    return out;
  }

  void pieces_loaded() override {
    await_updates();
    if (stage_ < 3) gather_full();
  }

  void accounting(int64_t out[5]) override {
    out[0] = 4 * (stage_ < 3 ? padded_total_ : shard_total_);
    out[1] = 4 * (stage_ == 1 ? padded_total_ : shard_total_);
    out[2] = 8 * shard_total_;
    out[3] = buffers_peak_ + scratch_peak_;
    out[4] = last_sent_;
  }

 private:
  // A reduce-scatter in flight: the bucket it reads, the piece it writes, what its wire holds.
  struct Reduction {
    loom_work* work = nullptr;
    int bucket = -1;  // -1: reads the full gradient buffer (stage 1)
    int64_t unit = 0;
    Floats piece;
    WireBufs wire;
  };
  // A unit's gather (stage 3): its buffer, the work in flight, its users, what its wire holds.
  struct Gather {
    Floats buf;
    loom_work* work = nullptr;
    int users = 0;
    WireBufs wire;
  };

  Floats floats(int64_t n, const char* what) const {
    return Floats(host_.raw(), ctx_.ops, n, what);
  }

  // The model state on the op table's device, from the runtime's initial values: each unit's
  // full (padded) parameters for stages 1-2, this rank's pieces for 3; gradients; AdamW's moments.
  void place_state() {
    const loom_ops* ops = ctx_.ops;
    const loom_data_unit* units = ctx_.units;
    if (stage_ < 3) {
      for (int64_t u = 0; u < ctx_.n_units; ++u) {
        full_.push_back(floats(piece_[u] * group_[u].n, "a layer's parameters"));
        ops->copy(full_[u].data(), ctx_.values + units[u].offset, 4 * units[u].numel);
      }
    } else {
      master_ = floats(shard_total_, "this rank's parameter pieces");
      for (int64_t u = 0; u < ctx_.n_units; ++u) {
        const int64_t lo = group_[u].rank * piece_[u],
                      len = std::max<int64_t>(0, std::min(piece_[u], units[u].numel - lo));
        if (len > 0)
          ops->copy(master_.data() + shard_at_[u], ctx_.values + units[u].offset + lo, 4 * len);
      }
    }
    if (stage_ == 1)
      for (int64_t u = 0; u < ctx_.n_units; ++u)
        full_grads_.push_back(floats(piece_[u] * group_[u].n, "a layer's gradients"));
    else
      shard_grads_ = floats(shard_total_, "this rank's gradient pieces");
    m_ = floats(shard_total_, "AdamW's first moments");
    v_ = floats(shard_total_, "AdamW's second moments");
  }

  // Stages 1-2: every rank's pieces of the parameters into everyone's full copy.
  void gather_full() {
    const Floats mine = floats(piece_max_ + 1, "this rank's updated piece");
    for (int64_t u = 0; u < ctx_.n_units; ++u) {
      const Group& g = group_[u];
      float* all = full_[u].data();
      ctx_.ops->copy(mine.data(), all + g.rank * piece_[u], 4 * piece_[u]);
      sent_ += update_gather_.all_gather(g.comm, g.n, mine.data(), all, piece_[u], no_wire_,
                                         nullptr, "all-gather of updated parameters");
    }
    scratch_peak_ = std::max<int64_t>(scratch_peak_, mine.bytes());
  }

  // Stages 1-2 with gather_overlap: every unit's all-gather issued at once, from a copy of this
  // rank's piece that lives until the gather is waited for.
  void issue_updates() {
    if (update_src_.size() == 0)
      update_src_ = floats(shard_total_, "the updated pieces' source copy");
    for (int64_t u = 0; u < ctx_.n_units; ++u) {
      const Group& g = group_[u];
      float* mine = update_src_.data() + shard_at_[u];
      float* all = full_[u].data();
      ctx_.ops->copy(mine, all + g.rank * piece_[u], 4 * piece_[u]);
      sent_ += update_gather_.all_gather(g.comm, g.n, mine, all, piece_[u], no_wire_, &updates_[u],
                                         "issuing the all-gather of updated parameters");
    }
    scratch_peak_ = std::max<int64_t>(scratch_peak_, 4 * shard_total_);
  }
  // Before anything reads the whole parameters but a unit's own acquire.
  void await_updates() {
    for (loom_work*& w : updates_)
      if (w) wait(w, "all-gather of updated parameters");
  }

  // Waits for unit u's gather, if it is still on its way, and widens what crossed narrower.
  void complete(int64_t u, Gather& g) {
    if (!g.work) return;
    wait(g.work, "all-gather of a layer's parameters");
    gather_.gathered(group_[u].n, g.buf.data(), piece_[u], g.wire);
  }

  int64_t unit_of(int64_t offset) const {
    for (int64_t u = 0; u < ctx_.n_units; ++u)
      if (offset >= ctx_.units[u].offset && offset < ctx_.units[u].offset + ctx_.units[u].numel)
        return u;
    throw Error(LOOM_INTERNAL, "a parameter outside every unit");
  }

  float* value_at(int64_t shard_at) const {
    if (stage_ == 3) return master_.data() + shard_at;
    const int64_t u = unit_at(shard_at);
    return full_[u].data() + group_[u].rank * piece_[u] + (shard_at - shard_at_[u]);
  }
  float* grad_at(int64_t shard_at) const {
    if (stage_ != 1) return shard_grads_.data() + shard_at;
    const int64_t u = unit_at(shard_at);
    return full_grads_[u].data() + group_[u].rank * piece_[u] + (shard_at - shard_at_[u]);
  }
  int64_t unit_at(int64_t shard_at) const {
    return static_cast<int64_t>(std::upper_bound(shard_at_.begin(), shard_at_.end(), shard_at) -
                                shard_at_.begin()) -
           1;
  }

  // Unit u's gather, issued if it is not already gathered or on its way.
  Gather& gather(int64_t u) {
    auto it = gathers_.find(u);
    if (it != gathers_.end()) return it->second;
    Gather g;
    if (!free_bufs_.empty()) {
      g.buf = std::move(free_bufs_.back());
      free_bufs_.pop_back();
    } else {
      g.buf = floats(unit_max_, "a gathered layer's parameters");
    }
    const Group& grp =
        group_[u];  // issued before it is recorded: a failed issue leaves no entry behind
    sent_ += gather_.all_gather(grp.comm, grp.n, master_.data() + shard_at_[u], g.buf.data(),
                                piece_[u], g.wire, &g.work, "issuing a parameter all-gather");
    Gather& added =
        gathers_.emplace(u, std::move(g)).first->second;  // the buffers move, their memory stays
    note_buffers();
    return added;
  }

  int take_bucket() {
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!bucket_busy_[b]) return bucket_busy_[b] = true, static_cast<int>(b);
    buckets_.push_back(floats(unit_max_, "a gradient bucket"));
    bucket_busy_.push_back(true);
    note_buffers();
    return static_cast<int>(buckets_.size()) - 1;
  }

  // Waits for the oldest reduce-scatter and adds its piece into the shard's gradients.
  void complete_oldest() {
    Reduction r = std::move(in_flight_.front());
    in_flight_.pop_front();
    wait(r.work, "gradient reduce-scatter");
    const Group& g = group_[r.unit];
    const int64_t piece = piece_[r.unit];
    reduce_.reduced(g.n, r.piece.data(), piece, r.wire);
    if (g.scale != 1.f) ctx_.ops->scale(f32(r.piece.data()), g.scale, piece);
    if (stage_ == 1)
      ctx_.ops->copy(full_grads_[r.unit].data() + g.rank * piece, r.piece.data(), 4 * piece);
    else
      ctx_.ops->accumulate(f32(shard_grads_.data() + shard_at_[r.unit]), f32(r.piece.data()),
                           piece);
    if (r.bucket >= 0) bucket_busy_[r.bucket] = false;
    free_pieces_.push_back(std::move(r.piece));
  }

  // The communication buffers held at once: the pools (which keep what they allocate), and the
  // gathers' and reductions' wire buffers while they are in flight.
  void note_buffers() {
    int64_t live = 0;
    for (const Floats& b : buckets_) live += b.bytes();
    for (const auto& [u, g] : gathers_) live += g.buf.bytes() + g.wire.bytes();
    for (const Floats& b : free_bufs_) live += b.bytes();
    for (const Reduction& r : in_flight_) live += r.piece.bytes() + r.wire.bytes();
    for (const Floats& p : free_pieces_) live += p.bytes();
    buffers_peak_ = std::max(buffers_peak_, live);
  }

  // Completes an issued operation and clears its handle.
  void wait(loom_work*& w, const char* what) {
    loom_work* work = w;
    w = nullptr;
    loom::sdk::ErrorBox err(host_.raw());
    if (ctx_.comm->wait(ctx_.comm_self, work, err.get()) != LOOM_OK) err.raise(what);
  }
  void wait_quietly(loom_work* w) {
    if (!w) return;
    loom::sdk::ErrorBox err(host_.raw());
    ctx_.comm->wait(ctx_.comm_self, w, err.get());
  }

  loom::sdk::Host host_;
  int stage_, max_in_flight_;
  bool prefetch_;
  int prefetch_depth_;
  bool gather_overlap_;
  loom_data_context ctx_{};
  // How gradients cross (reduce_dtype), how stage 3's parameters cross (gather_dtype), and the
  // fp32 gathers of stages 1-2's updated parameters.
  WireCodec reduce_, gather_, update_gather_;
  WireBufs no_wire_;
  // The group a unit is split over: the data group, or expert_dp for a unit of experts, whose
  // reduced gradients are scaled from that group's mean to the data group's.
  struct Group {
    loom_comm* comm;
    int n, rank;
    float scale;
  };
  std::vector<Group> group_;
  std::vector<int64_t> piece_, shard_at_;
  int64_t padded_total_ = 0, shard_total_ = 0, unit_max_ = 0, piece_max_ = 0;
  std::vector<Segment> segments_;
  // Stages 1-2: each unit's whole parameters (and stage 1's gradients) in a block of its own, so a
  // layer's gather lands while kernels still read the others.
  std::vector<Floats> full_, full_grads_;
  Floats master_, shard_grads_, m_, v_;
  std::vector<loom_work*>
      updates_;        // stages 1-2: each unit's all-gather of updated parameters in flight
  Floats update_src_;  // this rank's pieces they read
  std::vector<Floats> buckets_;
  std::vector<bool> bucket_busy_;
  std::map<int64_t, int> bucket_of_;
  std::deque<Reduction> in_flight_;
  std::vector<Floats> free_pieces_;
  std::map<int64_t, Gather> gathers_;
  std::vector<Floats> free_bufs_;
  int64_t buffers_peak_ = 0, scratch_peak_ = 0, sent_ = 0, last_sent_ = 0;
  bool finished_ = true, issued_any_ = false;
  Clock::time_point first_issue_;
};

template <int Stage>
struct ZeroStage : Zero {
  static constexpr const char* kSummary =
      Stage == 1   ? "ZeRO-1: optimizer states sharded over dp"
      : Stage == 2 ? "ZeRO-2: optimizer states and gradients sharded over dp"
                   : "ZeRO-3: optimizer states, gradients and parameters sharded over dp";
  static std::vector<loom_cost_collective> cost(const loom_cost_query& q,
                                                const loom::sdk::Options& o) {
    return loom_zero::zero_cost(Stage, q, o);
  }
  static constexpr loom::sdk::About about{
      .name = Stage == 1   ? "zero1"
              : Stage == 2 ? "zero2"
                           : "zero3",
      .version = "1.0.0",
      .summary = kSummary,
      .options = kOptions,
      .option_rules = kRules,
      .cost = &cost,
      .capabilities = LOOM_DATA_EXPERTS | LOOM_DATA_PIPELINE | LOOM_DATA_DEVICE};
  explicit ZeroStage(const loom::sdk::Context& ctx) : Zero(ctx, Stage) {}
};

}  // namespace

LOOM_PLUGIN(loom::sdk::data_plugin<ZeroStage<1>>(), loom::sdk::data_plugin<ZeroStage<2>>(),
            loom::sdk::data_plugin<ZeroStage<3>>())
