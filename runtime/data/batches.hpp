// Which tokens each sample of each step sees. A training sample is a window of T+1 tokens whose
// start is a pure function of (seed, step, global sample index), so every parallel layout — any
// number of ranks, any micro-batch split — trains on the same global batch.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::data {

class Batches {
 public:
  Batches(std::vector<uint16_t> train, std::vector<uint16_t> val, int64_t seq_len, uint64_t seed);

  // Tokens and next-token targets for global samples [first, first + count) of `step`, written
  // row-major into [count, T] buffers.
  void train_batch(int64_t step, int64_t first, int64_t count, int32_t* tokens,
                   int32_t* targets) const;
  // The start offset in the training stream of one sample (what `train_batch` reads).
  int64_t train_offset(int64_t step, int64_t sample) const;

  // Validation windows are consecutive and fixed: window w starts at w * T.
  int64_t val_windows() const;
  void val_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const;

  int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
  int64_t seq_len() const { return T_; }

 private:
  std::vector<uint16_t> train_, val_;
  int64_t T_;
  uint64_t seed_;
};

}  // namespace loom::data
