#include "train/data_check.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/errors.hpp"
#include "core/files.hpp"
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

// A blend mixes ids, so its directories must share one vocabulary: the same tokenizer.json
// beside each (byte for byte), or none beside any (bytes).
void check_same_tokenizer(const data::DataSettings& ds) {
  if (ds.blend.size() < 2) return;
  auto tokenizer_of = [](const std::string& dir) -> std::optional<std::string> {
    const fs::path t = fs::path(dir) / "tokenizer.json";
    if (!fs::exists(t)) return std::nullopt;
    return read_file(t, "tokenizer");
  };
  const std::optional<std::string> first = tokenizer_of(ds.blend[0]);
  for (size_t i = 1; i < ds.blend.size(); ++i) {
    const std::optional<std::string> other = tokenizer_of(ds.blend[i]);
    if (other == first) continue;
    const std::string why = first && other ? "their tokenizer.json files differ"
                            : first        ? "the second has no tokenizer.json, so it holds bytes"
                                           : "the first has no tokenizer.json, so it holds bytes";
    throw ConfigError("[data] blend: '" + ds.blend[0] + "' and '" + ds.blend[i] +
                      "' were tokenized differently (" + why +
                      "): a blend's directories must share one tokenizer; prepare them with the "
                      "same --tokenizer");
  }
}

}  // namespace

void check_tokenizer_fits(int64_t tokens, const fs::path& path, int64_t vocab) {
  if (tokens > vocab)
    throw ConfigError("[data] tokenizer '" + path.string() + "' has " + std::to_string(tokens) +
                      " tokens, more than [model] vocab_size = " + std::to_string(vocab) +
                      "; set [model] vocab_size = " + std::to_string(tokens) + " (or more)");
}

void check_data(const JobSettings& job) {
  const data::DataSettings& ds = job.data;
  const int64_t vocab = job.model.vocab_size;
  std::error_code ec;
  for (const auto& d : ds.sources())
    if (d.dir == kDataPlaceholder)
      throw ConfigError("[data] dir is the placeholder `loom plan --emit` left (\"" + d.dir +
                        "\"): fill it in with a directory of token shards for this model's "
                        "tokenizer (loom data prepare --jsonl FILE... --out DIR)");
  for (const auto& d : ds.sources())
    if (!fs::is_directory(d.dir, ec))
      throw ConfigError((ds.blend.empty() ? "[data] dir = \"" + d.dir + "\" "
                                          : "[data] blend names \"" + d.dir + "\", which ") +
                        (fs::exists(d.dir, ec) ? "is not a directory" : "does not exist") +
                        "; make it with: loom data prepare --jsonl FILE... --out " + d.dir);
  check_same_tokenizer(ds);
  const fs::path tokenizer = ds.tokenizer_path();
  if (!tokenizer.empty())
    check_tokenizer_fits(tok::Tokenizer::from_json_file(tokenizer).vocab_size(), tokenizer, vocab);
  for (const auto& d : ds.sources()) {
    try {
      scan_split(d.dir, "train", vocab);
      if (job.train.eval_every > 0 && d.weight > 0)
        scan_split(d.dir, "val", vocab);  // read only where the run evaluates
    } catch (const RuntimeError& e) {
      throw ConfigError(std::string(e.what()) + " ([model] vocab_size = " + std::to_string(vocab) +
                        ")");
    }
  }
}

}  // namespace loom::train
