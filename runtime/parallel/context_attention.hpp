// The context slot as the model sees it: which positions of each sequence this rank holds, and
// attention across the cp group (the plugin's ring or all-gather).
#pragma once

#include <loom/plugin.h>

#include <cstdint>
#include <vector>

#include "loader/registry.hpp"

namespace loom {

// Positions [global, global + length) of a sequence, at local rows [local, local + length).
struct PositionRun {
  int64_t local, global, length;
};

// What the plugin measured since the last call.
struct ContextStats {
  double compute_ms = 0, exposed_comm_ms = 0;
  int64_t bytes_sent = 0;
};

class ContextAttention {
 public:
  // Starts the context plugin on the cp group and checks its split of seq_len.
  ContextAttention(const loom_context_context& ctx, plugins::Instance& plugin, int64_t seq_len);
  int size() const { return size_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t local_len() const { return seq_len_ / size_; }
  const std::vector<PositionRun>& runs() const { return runs_; }
  // The global position of local row t of a sequence.
  int64_t position(int64_t t) const { return position_[t]; }
  // This rank's rows of B full sequences [B, seq_len] -> [B, local_len].
  void take(const int32_t* full, int32_t* local, int64_t B) const;
  void forward(const loom_attention_args& a) const;
  void backward(const loom_attention_args& a) const;
  ContextStats stats() const;
  // Every cp rank's `n` values, rank-major (MoE routing: what capacity and the load-balancing
  // statistics of a sequence need from the ranks holding its other positions).
  std::vector<double> all_gather(const std::vector<double>& mine) const;

 private:
  loom_context_context ctx_;
  const loom_context_v2* t_;
  void* self_;
  int size_ = 1;
  int64_t seq_len_;
  std::vector<PositionRun> runs_;
  std::vector<int64_t> position_;
};

}  // namespace loom
