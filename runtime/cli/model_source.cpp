#include "cli/model_source.hpp"

#include <climits>
#include <sstream>

#include "ckpt/format.hpp"
#include "ckpt/init_from.hpp"
#include "cli/job_config.hpp"
#include "config/section.hpp"
#include "core/cpus.hpp"
#include "core/errors.hpp"
#include "data/data_settings.hpp"
#include "ops/ops.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

config::Config external_model_config(const ckpt::ExternalModel& m, const std::string& where) {
  config::Config cfg = config::Config::parse("[model]\n" + m.model_toml, where);
  cfg.validate(train::job_sections());
  return cfg;
}

// A Loom checkpoint finds its tokenizer where an import put it (the checkpoint root), else the
// run's; a Hugging Face folder holds its own; an llm.c file has none unless named.
ModelSource open_model_source(const fs::path& src, const fs::path& tokenizer) {
  ModelSource s{src, model::Config(), std::nullopt, tokenizer, {}};
  const bool loom = fs::exists(src / "manifest.json") || fs::exists(src / "latest") ||
                    fs::exists(src / "metrics.jsonl");
  if (!loom) {
    s.external = ckpt::read_external(src);
    s.model = model::read_model(external_model_config(*s.external, src.string()).section("model"));
    if (fs::is_directory(src)) {
      if (s.tokenizer_path.empty() && fs::exists(src / "tokenizer.json"))
        s.tokenizer_path = src / "tokenizer.json";
      s.special = tok::read_special_ids(src);
    }
    return s;
  }
  const fs::path dir = ckpt::find_checkpoint(src), root = dir.parent_path();
  config::Config cfg =
      config::Config::parse(ckpt::read_manifest(dir).config, (dir / "manifest.json").string());
  cfg.validate(train::job_sections());
  s.model = model::read_model(cfg.section("model"));
  if (s.tokenizer_path.empty())
    s.tokenizer_path = fs::exists(root / "tokenizer.json")
                           ? root / "tokenizer.json"
                           : data::read_data(cfg.section("data")).tokenizer_path();
  s.special = tok::read_special_ids(root);
  return s;
}

std::unique_ptr<LoadedModel> load_model(const ModelSource& s, int64_t max_rows) {
  const model::Config& c = s.model;
  auto m = std::make_unique<LoadedModel>(ops::cpu());
  m->model = model::build(c, m->api, m->params, max_rows);
  // Inference routes dropless, as evaluation and training samples do, so how the tokens are
  // batched cannot drop one.
  for (auto& [name, routed] : m->model->routed_layers()) routed->use_capacity(false);
  m->params.allocate(1);
  if (s.external)
    ckpt::init_from(s.src, *s.external, m->params, false);
  else
    ckpt::init_from(s.src, m->params, false);
  return m;
}

tok::Tokenizer load_tokenizer(const fs::path& file, int64_t vocab) {
  tok::Tokenizer t = tok::Tokenizer::from_json_file(file);
  if (t.vocab_size() > vocab)
    throw UsageError("tokenizer '" + file.string() + "' has " + std::to_string(t.vocab_size()) +
                     " tokens, more than the model's vocabulary of " + std::to_string(vocab));
  return t;
}

int inference_threads(int64_t asked) {
  return ops::set_threads("cpu",
                          asked > 0 ? static_cast<int>(asked) : threads_per_rank(1, false).cpus);
}

std::unique_ptr<tok::Tokenizer> tokenizer_for(const ModelSource& s, bool ids_only) {
  if (ids_only) return nullptr;
  const int64_t vocab = s.model.vocab_size;
  if (!s.tokenizer_path.empty())
    return std::make_unique<tok::Tokenizer>(load_tokenizer(s.tokenizer_path, vocab));
  if (vocab != 256)
    throw UsageError(
        "the model's vocabulary has " + std::to_string(vocab) +
        " tokens and no tokenizer was found: pass --tokenizer tokenizer.json, or --ids");
  return nullptr;
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  int64_t id;
  while (in >> id) {
    if (id < INT32_MIN || id > INT32_MAX)
      throw UsageError(what + ": token id " + std::to_string(id) + " is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  if (!in.eof()) throw UsageError(what + " must be token ids separated by white space");
  return ids;
}

std::vector<int64_t> stop_ids(const ModelSource& s, const tok::Tokenizer* tokenizer) {
  if (!s.special.eos.empty()) return s.special.eos;
  if (tokenizer && tokenizer->special("<|endoftext|>") >= 0)
    return {tokenizer->special("<|endoftext|>")};
  return {};
}

}  // namespace loom::cli
