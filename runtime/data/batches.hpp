// Which tokens each sample of each step sees. A training sample's window is a pure function of
// (seed, step, global sample index), so every parallel layout (any number of ranks, any
// micro-batch split) trains on the same global batch, and a resumed run continues the order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/blend.hpp"
#include "data/shards.hpp"

namespace loom::data {

// random: each sample starts anywhere in the stream (windows may repeat and overlap, as llm.c's
// random loader). epoch: the stream is cut into windows of T + 1 tokens, T apart, and each
// epoch visits every window once in a seeded order.
enum class Sampling { Random, Epoch };
Sampling sampling_from(const std::string& name);  // throws ConfigError naming [data] sampling

// One prepared directory of a blend ([data] blend, weights).
struct Source {
  std::string name;  // for the metrics: the directory's last component
  double weight = 1;
  TokenSplit train, val;
};

// One source: a window is drawn from (step, sample) as above. Several: global sample
// g = (step - 1) x global_batch + sample goes to a source by the blend's weights (blend.hpp) as
// that source's k-th sample, and k draws the window within it (random: Philox at (k, source);
// epoch: window permute(k mod W) of the source's epoch k / W). Validation window w is routed the
// same way over the sources' validation splits.
class Batches {
 public:
  Batches(TokenSplit train, TokenSplit val, int64_t seq_len, uint64_t seed,
          Sampling sampling = Sampling::Random, int64_t global_batch = 1);
  Batches(std::vector<Source> sources, int64_t seq_len, uint64_t seed, Sampling sampling,
          int64_t global_batch);

  // Tokens and next-token targets for global samples [first, first + count) of `step`, written
  // row-major into [count, T] buffers.
  void train_batch(int64_t step, int64_t first, int64_t count, int32_t* tokens,
                   int32_t* targets) const;
  // Where one sample's window starts (what `train_batch` reads): (source, offset in its training
  // stream), the source 0 without a blend.
  std::pair<int, int64_t> train_window(int64_t step, int64_t sample) const;
  int64_t train_offset(int64_t step, int64_t sample) const {
    return train_window(step, sample).second;
  }
  int sources() const { return static_cast<int>(src_.size()); }
  const std::string& source_name(int source) const { return src_[source].name; }
  // A blend's tokens drawn from each source in steps [1, step], by name; empty for one source.
  std::vector<std::pair<std::string, int64_t>> tokens_by_source(int64_t step) const;
  // epoch sampling: the epoch a step's first sample belongs to (0 for random sampling).
  int64_t epoch_of(int64_t step) const;

  // Validation windows are consecutive and fixed: window w starts at w * T.
  int64_t val_windows() const;
  void val_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const;

  int64_t train_tokens() const;  // of every source
  int64_t train_windows() const { return windows(0); }
  int64_t seq_len() const { return T_; }

 private:
  void window(const TokenSplit& split, int64_t start, int64_t s, int32_t* tokens,
              int32_t* targets) const;
  int64_t windows(int source) const { return (src_[source].train.size() - 1) / T_; }
  int64_t val_windows(int source) const;
  // (source, offset) of a global sample g: a blend's route, then the source's own draw.
  std::pair<int, int64_t> blend_window(int64_t g) const;
  std::vector<Source> src_;
  Blend blend_;
  int64_t T_;
  uint64_t seed_;
  Sampling sampling_;
  int64_t global_batch_;
};

// A seeded permutation of [0, n): a Feistel network over the next power of four, walked until
// it lands inside [0, n). Holds nothing per element, so any n costs the same memory.
int64_t permute(int64_t i, int64_t n, uint64_t seed, uint64_t round_key);

}  // namespace loom::data
