// Text from the model: sampling with temperature, top-k and top-p, through a key/value cache, and
// through the run's tokenizer (or bytes, for a 256-token vocabulary).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/data_settings.hpp"
#include "model/model.hpp"

namespace loom::tok {
class Tokenizer;
}

namespace loom::train {

struct SampleOptions {
  int64_t max_tokens = 96;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // the smallest set of likeliest tokens whose probability reaches top_p
  uint64_t seed = 0;
  std::vector<int64_t> stop;          // token ids that end the text (not included)
  std::function<void()> after_token;  // called after each token (generate's thread back-off)
  // Text prompts start with the tokens the tokenizer's post-processor puts first (Llama 3's BOS),
  // as transformers' tokenizer(text) does: `loom generate`. Training samples continue mid-text.
  bool special_prefix = false;
};

// The logits over the vocabulary of the last position of a context, for a model that cannot run
// on its own (a pipeline stage).
using NextLogits = std::function<std::vector<float>(const std::vector<int32_t>& ctx)>;

// Continues `prompt` by up to max_tokens ids, stopping at any of `stop`; once the context is full
// it slides (the last seq_len tokens, from position 0). Deterministic for a given seed. Runs every
// layer on every rank that calls it (tensor-parallel layers talk inside forward), through a
// key/value cache unless sequence parallelism splits the rows, in which case each token reruns the
// padded context. With `next` (a pipeline), each token's logits come from it, over the whole
// context.
std::vector<int32_t> generate_ids(model::Model& model, std::vector<int32_t> prompt,
                                  const SampleOptions& o, const NextLogits& next = {});

// The same from text to text: through `tokenizer` when given (with o.special_prefix, after the
// special tokens its post-processor puts first, such as Llama 3's BOS), as bytes otherwise.
std::string generate(model::Model& model, const tok::Tokenizer* tokenizer,
                     const std::string& prompt, const SampleOptions& o,
                     const NextLogits& next = {});

// The bytes made printable for a terminal: control bytes other than newline become '.'.
std::string printable(const std::string& bytes);

// The run's tokenizer for text samples: [data] tokenizer, or tokenizer.json beside the shards;
// null for bytes or when the run takes no samples. Refuses samples of a non-byte vocabulary
// without one.
std::unique_ptr<tok::Tokenizer> run_tokenizer(const data::DataSettings& data,
                                              const model::Config& mc, bool sampling);

}  // namespace loom::train
