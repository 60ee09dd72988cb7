#include "train/sample.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "model/philox.hpp"

namespace loom::train {

// Each new token: logits of the last position over the real vocabulary; keep the k largest,
// p = softmax over them, draw u ~ U(0,1) from the counter RNG and take the first token whose
// cumulative probability exceeds u.
std::string generate(gpt::Gpt& model, const std::string& prompt, int64_t n_tokens, int64_t top_k,
                     uint64_t seed, int64_t row_multiple) {
  const auto& c = model.config();
  std::vector<int32_t> ctx;
  for (unsigned char ch : prompt) ctx.push_back(ch % c.vocab_size);
  if (ctx.empty()) ctx.push_back('\n' % c.vocab_size);
  CounterRng rng(seed, "sample");
  std::string out;
  std::vector<int32_t> order(c.vocab_size);
  for (int64_t n = 0; n < n_tokens; ++n) {
    int64_t T = std::min<int64_t>(static_cast<int64_t>(ctx.size()), c.seq_len);
    int64_t padded = std::min(c.seq_len, (T + row_multiple - 1) / row_multiple * row_multiple);
    std::vector<int32_t> window(ctx.end() - T, ctx.end());
    window.resize(padded, 0);
    model.forward({window.data(), nullptr, 1, padded, 0.f});
    std::vector<float> row = model.api().logits_row(model.logits(), T - 1);
    const float* z = row.data();
    std::iota(order.begin(), order.end(), 0);
    int64_t k = std::min<int64_t>(top_k, c.vocab_size);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return z[a] > z[b]; });
    std::vector<double> p(k);
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += (p[i] = std::exp(static_cast<double>(z[order[i]] - z[order[0]])));
    double u = rng.uniform(static_cast<uint64_t>(n)) * sum, acc = 0;
    int32_t next = order[k - 1];
    for (int64_t i = 0; i < k; ++i) {
      acc += p[i];
      if (u < acc) {
        next = order[i];
        break;
      }
    }
    ctx.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  return out;
}

std::string printable(const std::string& bytes) {
  std::string s = bytes;
  for (char& ch : s) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (u != '\n' && (u < 0x20 || u == 0x7f)) ch = '.';
  }
  return s;
}

}  // namespace loom::train
