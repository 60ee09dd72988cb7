#include "parallel/context_attention.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "loader/host.hpp"
#include "tensor/tensor.hpp"

namespace loom {

using plugins::check;

namespace {

// The runs must tile local rows 0..local_len - 1, each at positions inside the sequence and
// ascending (the block attention kernel needs ascending positions).
void check_runs(const std::vector<PositionRun>& runs, int64_t seq_len, int64_t local_len,
                const char* plugin) {
  int64_t rows = 0, last = -1;
  for (const PositionRun& r : runs) {
    if (r.length <= 0 || r.global <= last || r.global + r.length > seq_len)
      throw RuntimeError(
          std::string("context plugin '") + plugin + "' split a " + std::to_string(seq_len) +
          "-token sequence into runs that are empty, overlapping, out of order or past its end");
    rows += r.length, last = r.global + r.length - 1;
  }
  if (rows != local_len)
    throw RuntimeError(std::string("context plugin '") + plugin + "' gave this rank " +
                       std::to_string(rows) + " positions of a " + std::to_string(seq_len) +
                       "-token sequence, not seq_len / cp = " + std::to_string(local_len));
}

}  // namespace

ContextAttention::ContextAttention(const loom_context_context& ctx, plugins::Instance& plugin,
                                   int64_t seq_len)
    : ctx_(ctx), t_(plugin.table<loom_context_v2>()), self_(plugin.self()), seq_len_(seq_len) {
  size_ = ctx.comm->size(ctx.comm_self, ctx.cp);
  const int rank = ctx.comm->rank(ctx.comm_self, ctx.cp);
  loom_error e;
  check(t_->setup(self_, &ctx, &e), e, "context plugin setup");
  if (seq_len % size_ != 0)
    throw RuntimeError(
        "seq_len not a multiple of cp got past layout_problem (train/layout_rules.cpp)");
  std::vector<loom_position_run> runs(64);
  int32_t n = 0;
  loom_status s =
      t_->split(self_, seq_len, rank, runs.data(), static_cast<int32_t>(runs.size()), &n, &e);
  if (s == LOOM_BAD_CONFIG) throw ConfigError(e.message);
  check(s, e, "context plugin split");
  int64_t local = 0;
  for (int32_t i = 0; i < n; ++i) {
    runs_.push_back({local, runs[i].begin, runs[i].length});
    local += runs[i].length;
  }
  check_runs(runs_, seq_len, local_len(), plugin.desc()->name);
  for (const PositionRun& r : runs_)
    for (int64_t t = 0; t < r.length; ++t) position_.push_back(r.global + t);
}

void ContextAttention::take(const int32_t* full, int32_t* local, int64_t B) const {
  const int64_t L = local_len();
  for (int64_t b = 0; b < B; ++b)
    for (const PositionRun& r : runs_)
      std::copy_n(full + b * seq_len_ + r.global, r.length, local + b * L + r.local);
}

void ContextAttention::forward(const loom_attention_args& a) const {
  loom_error e;
  check(t_->attention_fwd(self_, &a, &e), e, "context-parallel attention");
}

void ContextAttention::backward(const loom_attention_args& a) const {
  loom_error e;
  check(t_->attention_bwd(self_, &a, &e), e, "context-parallel attention backward");
}

ContextStats ContextAttention::stats() const {
  ContextStats s;
  loom_error e;
  check(t_->stats(self_, &s.compute_ms, &s.exposed_comm_ms, &s.bytes_sent, &e), e,
        "context plugin stats");
  return s;
}

std::vector<double> ContextAttention::all_gather(const std::vector<double>& mine) const {
  std::vector<double> all(mine.size() * size_);
  loom_tensor in =
      flat_view(const_cast<double*>(mine.data()), LOOM_F64, static_cast<int64_t>(mine.size()));
  loom_tensor out = flat_view(all.data(), LOOM_F64, static_cast<int64_t>(all.size()));
  loom_error e;
  check(ctx_.comm->all_gather(ctx_.comm_self, ctx_.cp, &in, &out, nullptr, &e), e,
        "cp all-gather of routing");
  return all;
}

}  // namespace loom
