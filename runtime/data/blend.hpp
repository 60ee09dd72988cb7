// Which source each sample of a weighted blend reads (Megatron's blended datasets, as a pure
// function). The sources are split in two halves, recursively; of the first g samples, the left
// half receives round(g x p), p being its share of the weight, so sample g goes left exactly when
// that count grows at g. At every g, each source's count is within one sample per level of the
// tree (log2 of the sources, rounded up) of its weight's share. As a pure function of g it reads
// the same under every layout, continues on resume, and holds nothing per sample.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace loom::data {

class Blend {
 public:
  explicit Blend(std::vector<double> weights);  // not negative, sum > 0 (read_data checks)
  // Sample g of the run goes to source .first, as that source's sample .second.
  std::pair<int, int64_t> route(int64_t g) const;
  // How many of samples [0, g) go to source s.
  int64_t count(int s, int64_t g) const;
  int sources() const { return static_cast<int>(prefix_.size()) - 1; }

 private:
  // round(n x share of [lo, mid) in [lo, hi)): the left half's samples among the first n.
  int64_t left_of(int lo, int mid, int hi, int64_t n) const;
  std::vector<double> prefix_;  // prefix_[i] = weight of sources [0, i)
};

}  // namespace loom::data
