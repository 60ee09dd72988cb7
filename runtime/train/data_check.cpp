#include "train/data_check.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/errors.hpp"
#include "data/data_settings.hpp"
#include "data/shards.hpp"
#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

// The first kDataCheckTokens of a split, read as training reads them: an id past the vocabulary
// throws naming the shard and the position.
void scan_split(const fs::path& dir, const std::string& split, int64_t vocab) {
  const data::TokenSplit tokens(dir, split, vocab);
  std::vector<int32_t> chunk(1 << 20);
  const int64_t n = std::min(tokens.size(), kDataCheckTokens);
  for (int64_t at = 0; at < n; at += static_cast<int64_t>(chunk.size()))
    tokens.read(at, std::min<int64_t>(static_cast<int64_t>(chunk.size()), n - at), chunk.data());
}

}  // namespace

void check_tokenizer_fits(int64_t tokens, const fs::path& path, int64_t vocab) {
  if (tokens > vocab)
    throw ConfigError("[data] tokenizer '" + path.string() + "' has " + std::to_string(tokens) + " tokens, more than [model] vocab_size = " +
                      std::to_string(vocab) + "; set [model] vocab_size = " + std::to_string(tokens) + " (or more)");
}

void check_data(const config::Config& cfg) {
  const data::DataSettings ds = data::read_data(cfg);
  const int64_t vocab = model::from_config(cfg).vocab_size;
  std::error_code ec;
  if (!fs::is_directory(ds.dir, ec))
    throw ConfigError("[data] dir = \"" + ds.dir + "\" " + (fs::exists(ds.dir, ec) ? "is not a directory" : "does not exist") +
                      "; make it with: loom data prepare --text FILE... --out " + ds.dir);
  const fs::path tokenizer = tok::run_tokenizer_path(cfg);
  if (!tokenizer.empty()) check_tokenizer_fits(tok::Tokenizer::from_json_file(tokenizer).vocab_size(), tokenizer, vocab);
  try {
    scan_split(ds.dir, "train", vocab);
    if (cfg.i64("train.eval_every") > 0) scan_split(ds.dir, "val", vocab);  // read only where the run evaluates
  } catch (const RuntimeError& e) {
    throw ConfigError(std::string(e.what()) + " ([model] vocab_size = " + std::to_string(vocab) + ")");
  }
}

}  // namespace loom::train
