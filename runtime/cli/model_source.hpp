// A model to run for inference (`loom generate`, `loom eval`), from any source they accept: a Loom
// checkpoint (a step directory, a checkpoint root or a run directory), a Hugging Face folder or an
// llm.c model file. Opened once: its [model] section, its tokenizer and the ids that start and end
// a text, then the model on the CPU op table with the source's weights.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "ckpt/convert.hpp"
#include "config/config.hpp"
#include "model/model.hpp"
#include "model/params.hpp"
#include "parallel/layer_api.hpp"
#include "tokenizer/special_ids.hpp"
#include "tokenizer/tokenizer.hpp"

namespace loom::cli {

struct ModelSource {
  std::filesystem::path src;
  model::Config model;  // its [model] section, read
  std::optional<ckpt::ExternalModel>
      external;                          // the weights of a Hugging Face or llm.c source, read once
  std::filesystem::path tokenizer_path;  // empty: none found
  tok::SpecialIds special;  // from generation_config.json / config.json beside the weights
};

// `tokenizer` overrides the one found beside the weights or the run's data.
ModelSource open_model_source(const std::filesystem::path& src,
                              const std::filesystem::path& tokenizer = {});

// The [model] keys of an imported model, validated, as a config (for its vocabulary and shape).
config::Config external_model_config(const ckpt::ExternalModel& m, const std::string& where);

struct LoadedModel {
  LayerApi api;
  ParamStore params;
  std::unique_ptr<model::Model> model;
  explicit LoadedModel(const loom_ops_v2* ops) : api(ops) {}
};

// The model with the source's weights, for up to `max_rows` rows a forward; MoE routes dropless.
std::unique_ptr<LoadedModel> load_model(const ModelSource& s, int64_t max_rows);

// tokenizer.json, refused when it has more tokens than the model's vocabulary (transformers and
// Loom would index past the embedding).
tok::Tokenizer load_tokenizer(const std::filesystem::path& file, int64_t vocab);

// CPU threads for one inference process: `asked`, or the cores this process may use (0). Set and
// returned.
int inference_threads(int64_t asked);

// The tokenizer, or none: --ids, or a 256-token model read as bytes. A larger vocabulary with no
// tokenizer is a UsageError saying what to pass.
std::unique_ptr<tok::Tokenizer> tokenizer_for(const ModelSource& s, bool ids_only);

// Token ids written out, separated by white space (--ids); a UsageError names `what` otherwise.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what);

// Where the ids end a text: the source's eos ids, else the tokenizer's <|endoftext|>.
std::vector<int64_t> stop_ids(const ModelSource& s, const tok::Tokenizer* tokenizer);

}  // namespace loom::cli
