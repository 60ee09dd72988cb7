#include "data/batches.hpp"

#include "core/errors.hpp"
#include "model/philox.hpp"

namespace loom::data {

Batches::Batches(std::vector<uint16_t> train, std::vector<uint16_t> val, int64_t seq_len,
                 uint64_t seed)
    : train_(std::move(train)), val_(std::move(val)), T_(seq_len), seed_(seed) {
  if (static_cast<int64_t>(train_.size()) < T_ + 2)
    throw RuntimeError("the training split has " + std::to_string(train_.size()) +
                       " tokens, fewer than one sequence of " + std::to_string(T_ + 1));
}

int64_t Batches::train_offset(int64_t step, int64_t sample) const {
  // Counter = (step, sample): the same sample of the same step always starts at the same place.
  auto r = philox4x32({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                       static_cast<uint32_t>(sample), static_cast<uint32_t>(sample >> 32)},
                      {static_cast<uint32_t>(seed_) ^ 0x5eedda7au, static_cast<uint32_t>(seed_ >> 32)});
  uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  return static_cast<int64_t>(x % static_cast<uint64_t>(train_.size() - T_ - 1));
}

void Batches::train_batch(int64_t step, int64_t first, int64_t count, int32_t* tokens,
                          int32_t* targets) const {
  for (int64_t s = 0; s < count; ++s) {
    const uint16_t* src = train_.data() + train_offset(step, first + s);
    for (int64_t t = 0; t < T_; ++t) {
      tokens[s * T_ + t] = src[t];
      targets[s * T_ + t] = src[t + 1];
    }
  }
}

int64_t Batches::val_windows() const {
  return val_.size() > static_cast<size_t>(T_) ? (static_cast<int64_t>(val_.size()) - 1) / T_ : 0;
}

void Batches::val_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const {
  for (int64_t s = 0; s < count; ++s) {
    const uint16_t* src = val_.data() + ((first + s) % val_windows()) * T_;
    for (int64_t t = 0; t < T_; ++t) {
      tokens[s * T_ + t] = src[t];
      targets[s * T_ + t] = src[t + 1];
    }
  }
}

}  // namespace loom::data
