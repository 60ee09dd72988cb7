#include "data/batches.hpp"

#include <algorithm>
#include <vector>

#include "core/errors.hpp"
#include "model/philox.hpp"

namespace loom::data {

Sampling sampling_from(const std::string& name) {
  if (name == "random") return Sampling::Random;
  if (name == "epoch") return Sampling::Epoch;
  throw ConfigError("[data] sampling = \"" + name + "\": expected \"random\" or \"epoch\"");
}

namespace {

std::vector<Source> one_source(TokenSplit train, TokenSplit val) {
  std::vector<Source> s(1);
  s[0].train = std::move(train), s[0].val = std::move(val);
  return s;
}

std::vector<double> weights_of(const std::vector<Source>& sources) {
  std::vector<double> w;
  for (const Source& s : sources) w.push_back(s.weight);
  return w;
}

}  // namespace

Batches::Batches(TokenSplit train, TokenSplit val, int64_t seq_len, uint64_t seed,
                 Sampling sampling, int64_t global_batch)
    : Batches(one_source(std::move(train), std::move(val)), seq_len, seed, sampling, global_batch) {
}

Batches::Batches(std::vector<Source> sources, int64_t seq_len, uint64_t seed, Sampling sampling,
                 int64_t global_batch)
    : src_(std::move(sources)),
      blend_(weights_of(src_)),
      T_(seq_len),
      seed_(seed),
      sampling_(sampling),
      global_batch_(global_batch) {
  for (const Source& s : src_)
    if (s.train.size() < T_ + 2)
      throw RuntimeError("the training split" +
                         (src_.size() > 1 ? " of blend source '" + s.name + "'" : std::string()) +
                         " has " + std::to_string(s.train.size()) +
                         " tokens, fewer than one sequence of " + std::to_string(T_ + 1));
}

int64_t Batches::train_tokens() const {
  int64_t n = 0;
  for (const Source& s : src_) n += s.train.size();
  return n;
}

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
  if (src_.size() > 1) {  // the epoch of the first sample's source
    const auto [s, k] = blend_.route((step - 1) * global_batch_);
    return k / windows(s);
  }
  return (step - 1) * global_batch_ / train_windows();
}

std::pair<int, int64_t> Batches::blend_window(int64_t g) const {
  const auto [s, k] = blend_.route(g);
  if (sampling_ == Sampling::Epoch) {
    const int64_t W = windows(s);
    return {s,
            permute(k % W, W, seed_ ^ static_cast<uint64_t>(s), static_cast<uint64_t>(k / W)) * T_};
  }
  const uint64_t x =
      philox64(static_cast<uint64_t>(k), static_cast<uint64_t>(s), seed_ ^ 0xb1e4dda7au);
  return {s, static_cast<int64_t>(x % static_cast<uint64_t>(src_[s].train.size() - T_ - 1))};
}

std::vector<std::pair<std::string, int64_t>> Batches::tokens_by_source(int64_t step) const {
  std::vector<std::pair<std::string, int64_t>> out;
  if (src_.size() > 1)
    for (int s = 0; s < static_cast<int>(src_.size()); ++s)
      out.emplace_back(src_[s].name, blend_.count(s, step * global_batch_) * T_);
  return out;
}

std::pair<int, int64_t> Batches::train_window(int64_t step, int64_t sample) const {
  if (src_.size() > 1) return blend_window((step - 1) * global_batch_ + sample);
  if (sampling_ == Sampling::Epoch) {
    // Global sample g of the run, in epoch g / W at position g % W of that epoch's order.
    const int64_t W = train_windows(), g = (step - 1) * global_batch_ + sample;
    return {0, permute(g % W, W, seed_, static_cast<uint64_t>(g / W)) * T_};
  }
  // Counter = (step, sample): the same sample of the same step always starts at the same place.
  const uint64_t x =
      philox64(static_cast<uint64_t>(step), static_cast<uint64_t>(sample), seed_ ^ 0x5eedda7au);
  return {0, static_cast<int64_t>(x % static_cast<uint64_t>(src_[0].train.size() - T_ - 1))};
}

void Batches::window(const TokenSplit& split, int64_t start, int64_t s, int32_t* tokens,
                     int32_t* targets) const {
  std::vector<int32_t> w(T_ + 1);
  split.read(start, T_ + 1, w.data());
  for (int64_t t = 0; t < T_; ++t) {
    tokens[s * T_ + t] = w[t];
    targets[s * T_ + t] = w[t + 1];
  }
}

void Batches::train_batch(int64_t step, int64_t first, int64_t count, int32_t* tokens,
                          int32_t* targets) const {
  for (int64_t s = 0; s < count; ++s) {
    const auto [source, offset] = train_window(step, first + s);
    window(src_[source].train, offset, s, tokens, targets);
  }
}

int64_t Batches::val_windows(int source) const {
  const TokenSplit& v = src_[source].val;
  return v.size() > T_ ? (v.size() - 1) / T_ : 0;
}

// With a blend, the fewest any weighted source has: every source must have one.
int64_t Batches::val_windows() const {
  int64_t n = -1;
  for (int s = 0; s < static_cast<int>(src_.size()); ++s)
    if (src_.size() == 1 || src_[s].weight > 0)
      n = n < 0 ? val_windows(s) : std::min(n, val_windows(s));
  return std::max<int64_t>(n, 0);
}

void Batches::val_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* targets) const {
  for (int64_t i = 0; i < count; ++i) {
    if (src_.size() == 1) {
      window(src_[0].val, ((first + i) % val_windows(0)) * T_, i, tokens, targets);
      continue;
    }
    const auto [s, k] = blend_.route(first + i);
    window(src_[s].val, (k % val_windows(s)) * T_, i, tokens, targets);
  }
}

}  // namespace loom::data
