// Which tokens each sample of each step sees. A training sample's window is a pure function of
// (seed, step, global sample index), so every parallel layout (any number of ranks, any
// micro-batch split) trains on the same global batch, and a resumed run continues the order.
#pragma once

#include <cstdint>
#include <string>

#include "data/shards.hpp"

namespace loom::data {

// random: each sample starts anywhere in the stream (windows may repeat and overlap, as llm.c's
// random loader). epoch: the stream is cut into windows of T + 1 tokens, T apart, and each
// epoch visits every window once in a seeded order.
enum class Sampling { Random, Epoch };
Sampling sampling_from(const std::string& name);  // throws ConfigError naming [data] sampling

class Batches {
 public:
  Batches(TokenSplit train, TokenSplit val, int64_t seq_len, uint64_t seed, Sampling sampling = Sampling::Random,
          int64_t global_batch = 1);

  // Tokens and next-token targets for global samples [first, first + count) of `step`, written
  // row-major into [count, T] buffers.
  void train_batch(int64_t step, int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const;
  // The start offset in the training stream of one sample (what `train_batch` reads).
  int64_t train_offset(int64_t step, int64_t sample) const;
  // epoch sampling: the epoch a step's first sample belongs to (0 for random sampling).
  int64_t epoch_of(int64_t step) const;

  // Validation windows are consecutive and fixed: window w starts at w * T.
  int64_t val_windows() const;
  void val_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const;

  int64_t train_tokens() const { return train_.size(); }
  int64_t train_windows() const { return (train_.size() - 1) / T_; }
  int64_t seq_len() const { return T_; }
  const TokenSplit& train() const { return train_; }

 private:
  void window(const TokenSplit& split, int64_t start, int64_t s, int32_t* tokens, int32_t* targets) const;
  TokenSplit train_, val_;
  int64_t T_;
  uint64_t seed_;
  Sampling sampling_;
  int64_t global_batch_;
};

// A seeded permutation of [0, n): a Feistel network over the next power of four, walked until
// it lands inside [0, n). Holds nothing per element, so any n costs the same memory.
int64_t permute(int64_t i, int64_t n, uint64_t seed, uint64_t round_key);

}  // namespace loom::data
