#include "data/batches.hpp"

#include <vector>

#include "core/errors.hpp"
#include "model/philox.hpp"

namespace loom::data {

Sampling sampling_from(const std::string& name) {
  if (name == "random") return Sampling::Random;
  if (name == "epoch") return Sampling::Epoch;
  throw ConfigError("[data] sampling = \"" + name + "\": expected \"random\" or \"epoch\"");
}

Batches::Batches(TokenSplit train, TokenSplit val, int64_t seq_len, uint64_t seed, Sampling sampling,
                 int64_t global_batch)
    : train_(std::move(train)), val_(std::move(val)), T_(seq_len), seed_(seed), sampling_(sampling),
      global_batch_(global_batch) {
  if (train_.size() < T_ + 2)
    throw RuntimeError("the training split has " + std::to_string(train_.size()) +
                       " tokens, fewer than one sequence of " + std::to_string(T_ + 1));
}

namespace {

uint64_t philox64(uint64_t a, uint64_t b, uint64_t key) {
  auto r = philox4x32({static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
                       static_cast<uint32_t>(b >> 32)},
                      {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

}  // namespace

// Four rounds of L, R = R, L xor f(R) over half-width words; a permutation of [0, 4^k) for any
// round function, restricted to [0, n) by applying it again until the value falls inside.
int64_t permute(int64_t i, int64_t n, uint64_t seed, uint64_t round_key) {
  int half = 1;
  while ((int64_t{1} << (2 * half)) < n) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = static_cast<uint64_t>(i);
  do {
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = philox64(r, round_key * 4 + round, seed ^ 0xfe15e1u) & mask;
      const uint64_t next = l ^ f;
      l = r, r = next;
    }
    x = (l << half) | r;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

int64_t Batches::epoch_of(int64_t step) const {
  if (sampling_ == Sampling::Random) return 0;
  return (step - 1) * global_batch_ / train_windows();
}

int64_t Batches::train_offset(int64_t step, int64_t sample) const {
  if (sampling_ == Sampling::Epoch) {
    // Global sample g of the run, in epoch g / W at position g % W of that epoch's order.
    const int64_t W = train_windows(), g = (step - 1) * global_batch_ + sample;
    return permute(g % W, W, seed_, static_cast<uint64_t>(g / W)) * T_;
  }
  // Counter = (step, sample): the same sample of the same step always starts at the same place.
  const uint64_t x = philox64(static_cast<uint64_t>(step), static_cast<uint64_t>(sample), seed_ ^ 0x5eedda7au);
  return static_cast<int64_t>(x % static_cast<uint64_t>(train_.size() - T_ - 1));
}

void Batches::window(const TokenSplit& split, int64_t start, int64_t s, int32_t* tokens, int32_t* targets) const {
  std::vector<int32_t> w(T_ + 1);
  split.read(start, T_ + 1, w.data());
  for (int64_t t = 0; t < T_; ++t) {
    tokens[s * T_ + t] = w[t];
    targets[s * T_ + t] = w[t + 1];
  }
}

void Batches::train_batch(int64_t step, int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const {
  for (int64_t s = 0; s < count; ++s) window(train_, train_offset(step, first + s), s, tokens, targets);
}

int64_t Batches::val_windows() const { return val_.size() > T_ ? (val_.size() - 1) / T_ : 0; }

void Batches::val_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const {
  for (int64_t s = 0; s < count; ++s) window(val_, ((first + s) % val_windows()) * T_, s, tokens, targets);
}

}  // namespace loom::data
