#include "train/sample.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.hpp"
#include "data/data_settings.hpp"
#include "model/philox.hpp"
#include "parallel/layer_api.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/data_check.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

// Greedy at temperature 0. Otherwise p_i = softmax(z_i / temperature) over the top_k likeliest
// tokens, cut to the smallest prefix (by probability) whose mass reaches top_p and renormalised;
// u ~ U(0, 1) from the counter RNG picks the first token whose cumulative probability exceeds u.
int32_t pick(const std::vector<float>& z, int64_t vocab, const SampleOptions& o,
             const CounterRng& rng, uint64_t n) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = o.temperature <= 0 ? 1 : o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return z[a] > z[b]; });
  if (k == 1) return order[0];
  std::vector<double> p(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i)
    sum += (p[i] = std::exp((static_cast<double>(z[order[i]]) - z[order[0]]) / o.temperature));
  int64_t keep = k;
  if (o.top_p < 1.0) {
    double mass = 0;
    for (keep = 0; keep < k && mass < o.top_p * sum; ++keep) mass += p[keep];
    sum = mass;
  }
  const double u = rng.uniform(n) * sum;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i)
    if ((acc += p[i]) > u) return order[i];
  return order[keep - 1];
}

// Sequence parallelism splits a forward's rows over tp: no single-row decode. Each token reruns
// the context, padded on the right to a multiple of tp (causal attention keeps the padding from
// the positions read).
std::vector<float> logits_without_cache(model::Model& model, const std::vector<int32_t>& ctx,
                                        int64_t rows) {
  const int64_t T_max = model.config().seq_len;
  const int64_t T = std::min<int64_t>(static_cast<int64_t>(ctx.size()), T_max);
  const int64_t padded = std::min(T_max, (T + rows - 1) / rows * rows);
  std::vector<int32_t> window(ctx.end() - T, ctx.end());
  window.resize(padded, 0);
  model.forward({window.data(), nullptr, 1, padded, 0.f});
  return model.api().logits_row(model.logits(), T - 1);
}

}  // namespace

std::vector<int32_t> generate_ids(model::Model& model, std::vector<int32_t> prompt,
                                  const SampleOptions& o, const NextLogits& next) {
  const auto& c = model.config();
  if (prompt.empty()) throw UsageError("generation needs a prompt of at least one token");
  for (int32_t id : prompt)
    if (id < 0 || id >= c.vocab_size)
      throw UsageError("prompt token " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(c.vocab_size) + ")");
  const CounterRng rng(o.seed, "sample");
  const int64_t tp = model.api().tp_size();
  const bool cached =
      !next && model.api().local_rows(tp) == tp;  // whole model, no sequence parallelism
  auto recompute = [&](const std::vector<int32_t>& ctx) {
    if (!next) return logits_without_cache(model, ctx, tp);
    return next(std::vector<int32_t>(
        ctx.end() - std::min<int64_t>(static_cast<int64_t>(ctx.size()), c.seq_len), ctx.end()));
  };
  if (static_cast<int64_t>(prompt.size()) > c.seq_len)
    prompt.erase(prompt.begin(), prompt.end() - c.seq_len);
  std::vector<int32_t> out;
  if (cached) {
    model.use_kv_cache(c.seq_len);
    model.decode(prompt.data(), static_cast<int64_t>(prompt.size()));
  }
  // decode() keeps the logits of its last piece of at most max_rows() tokens.
  auto last_row = [&](int64_t n) {
    return model.api().logits_row(model.logits(), (n - 1) % model.max_rows());
  };
  std::vector<float> z = cached ? last_row(static_cast<int64_t>(prompt.size())) : recompute(prompt);
  std::vector<int32_t> ctx = prompt;
  for (int64_t n = 0; n < o.max_tokens; ++n) {
    const int32_t next = pick(z, c.vocab_size, o, rng, static_cast<uint64_t>(n));
    if (std::find(o.stop.begin(), o.stop.end(), next) != o.stop.end()) break;
    if (o.after_token) o.after_token();
    out.push_back(next);
    ctx.push_back(next);
    if (n + 1 == o.max_tokens) break;
    if (cached && model.decoded() < c.seq_len) {
      model.decode(&next, 1);
      z = model.api().logits_row(model.logits(), 0);
    } else if (cached) {  // the context is full: it slides, the last seq_len tokens from position 0
      model.use_kv_cache(c.seq_len);
      model.decode(ctx.data() + ctx.size() - c.seq_len, c.seq_len);
      z = last_row(c.seq_len);
    } else {
      z = recompute(ctx);
    }
  }
  if (cached) model.use_kv_cache(0);
  return out;
}

std::string generate(model::Model& model, const tok::Tokenizer* tokenizer,
                     const std::string& prompt, const SampleOptions& o, const NextLogits& next) {
  std::vector<int32_t> ids;
  if (tokenizer) {
    if (o.special_prefix)
      for (uint32_t id : tokenizer->prefix()) ids.push_back(static_cast<int32_t>(id));
    for (uint32_t id : tokenizer->encode(prompt.empty() ? "\n" : prompt))
      ids.push_back(static_cast<int32_t>(id));
  } else {
    for (unsigned char ch : prompt.empty() ? std::string("\n") : prompt) ids.push_back(ch);
  }
  const std::vector<int32_t> out = generate_ids(model, ids, o, next);
  if (tokenizer) return tokenizer->decode(out);
  return std::string(out.begin(), out.end());
}

std::string printable(const std::string& bytes) {
  std::string s = bytes;
  for (char& ch : s) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (u != '\n' && (u < 0x20 || u == 0x7f)) ch = '.';
  }
  return s;
}

// The run's tokenizer, for text samples: [data] tokenizer, or tokenizer.json beside the shards.
// Without one, samples are bytes, which only a 256-token vocabulary can print.
std::unique_ptr<tok::Tokenizer> run_tokenizer(const data::DataSettings& data,
                                              const model::Config& mc, bool sampling) {
  if (!sampling) return nullptr;  // only samples decode text
  const fs::path path = data.tokenizer_path();
  if (!path.empty()) {
    auto t = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_json_file(path));
    check_tokenizer_fits(t->vocab_size(), path, mc.vocab_size);
    return t;
  }
  if (mc.vocab_size != 256)
    throw ConfigError(
        "[train] sample_every > 0 with [model] vocab_size = " + std::to_string(mc.vocab_size) +
        " and no tokenizer: samples would print token ids as bytes; set [data] tokenizer, or put "
        "tokenizer.json beside the shards (loom data prepare writes it), or set sample_every = 0");
  return nullptr;
}

}  // namespace loom::train
