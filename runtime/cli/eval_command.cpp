// loom eval SRC (--data DIR | --text FILE) [--split S] [--windows N] [--batch B] [--tokenizer FILE]
//   [--ids] [--logits N] [--logits-out FILE] [--threads N]
// Scores a model without training it. --data: the mean loss and perplexity over the windows of a
// prepared split (seq_len tokens each, side by side, as training reads them). --text: the loss of
// every token of a text, given the tokens before it (the tokenizer's special tokens around it, as
// transformers' tokenizer(text) puts them). --logits N: the logits of the first N positions, as
// safetensors. SRC is any model `loom generate` reads.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "ckpt/safetensors.hpp"
#include "cli/model_source.hpp"
#include "cli/parse.hpp"
#include "core/files.hpp"
#include "data/shards.hpp"
#include "train/sample.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

// -log softmax(z)[target] in double over the real vocabulary (the padded rows never count).
double token_loss(const float* z, int64_t vocab, int32_t target) {
  double max = z[0], sum = 0;
  for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, z[v]);
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(z[v]) - max);
  return max + std::log(sum) - static_cast<double>(z[target]);
}

// --text scores one text, token by token, and prints a line per token: 64 MiB is far past what
// anyone reads that way. A corpus goes through `loom data prepare` and --data.
constexpr uintmax_t kMaxTextBytes = uintmax_t(64) << 20;

// The ids of a text file: tokenized (with the special tokens around it), bytes for a 256-token
// model without a tokenizer, or ids written out with --ids.
std::vector<int32_t> text_ids(const fs::path& file, const tok::Tokenizer* tokenizer, bool ids_only,
                              int64_t vocab) {
  const std::string text = read_regular_file(file, "--text file", kMaxTextBytes);
  std::vector<int32_t> ids;
  if (ids_only) {
    ids = parse_token_ids(text, "--ids: '" + file.string() + "'");
  } else if (tokenizer) {
    for (uint32_t id : tokenizer->prefix()) ids.push_back(static_cast<int32_t>(id));
    for (uint32_t id : tokenizer->encode(text)) ids.push_back(static_cast<int32_t>(id));
    for (uint32_t id : tokenizer->suffix()) ids.push_back(static_cast<int32_t>(id));
  } else {
    for (unsigned char ch : text) ids.push_back(ch);
  }
  if (ids.size() < 2)
    throw UsageError("'" + file.string() + "' has " + std::to_string(ids.size()) +
                     " tokens: a loss needs at least 2");
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw UsageError("'" + file.string() + "': token " + std::to_string(id) +
                       " is outside the vocabulary (" + std::to_string(vocab) + ")");
  return ids;
}

// The first `rows` rows of the last forward's logits, over the real vocabulary, as safetensors
// [rows, V], with the tokens they followed in the metadata.
void write_logits(const fs::path& out, const Tensor& z, int64_t rows, int64_t vocab,
                  const int32_t* tokens) {
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  std::string ids;
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(z.f32() + r * z.dim(1), vocab, logits.begin() + r * vocab);
    ids += (r ? " " : "") + std::to_string(tokens[r]);
  }
  ckpt::write_safetensors(out, {{"logits", {rows, vocab}}}, {&logits},
                          {{"format", "pt"}, {"tokens", ids}});
  std::printf("wrote %s: logits [%lld, %lld] of the first %lld positions\n", out.c_str(),
              (long long)rows, (long long)vocab, (long long)rows);
}

// Per-token losses of `ids`: windows of up to seq_len tokens, each starting at the last token of
// the one before, so every token after the first is scored once, seeing up to seq_len - 1 before
// it.
int eval_text(model::Model& model, const std::vector<int32_t>& ids, const tok::Tokenizer* tokenizer,
              int64_t logits_rows, const fs::path& logits_out) {
  const int64_t T = model.config().seq_len, V = model.config().vocab_size,
                n = static_cast<int64_t>(ids.size());
  if (T < 2)
    throw UsageError("--text needs seq_len >= 2: a token's loss is given the tokens before it");
  std::printf("%8s %8s %12s  %s\n", "position", "id", "loss", "token");
  double sum = 0;
  for (int64_t start = 0; start + 1 < n; start += T - 1) {
    const int64_t len = std::min(T, n - start);
    model.forward({ids.data() + start, nullptr, 1, len, 0.f});
    const Tensor& z = model.logits();
    if (start == 0 && logits_rows > 0)
      write_logits(logits_out, z, std::min(logits_rows, len), V, ids.data());
    for (int64_t i = 1; i < len; ++i) {
      const int32_t target = ids[start + i];
      const double loss = token_loss(z.f32() + (i - 1) * z.dim(1), V, target);
      sum += loss;
      const std::string text = tokenizer ? tokenizer->token_bytes(static_cast<uint32_t>(target))
                                         : std::string(1, char(target));
      std::printf("%8lld %8d %12.9f  %s\n", (long long)(start + i), target, loss,
                  train::printable(text).c_str());
    }
  }
  const double mean = sum / static_cast<double>(n - 1);
  std::printf("mean loss %.9f over %lld tokens, perplexity %.4f\n", mean, (long long)(n - 1),
              std::exp(mean));
  return kExitOk;
}

// Mean loss over the split's windows [s, s + T] at s = 0, T, 2T, ..., `batch` at a time. Progress
// goes to stderr only where a person watches it (a terminal) and only once the work has taken a
// few seconds: a script or a short set gets the result line alone.
int eval_data(model::Model& model, const fs::path& dir, const std::string& split,
              int64_t max_windows, int64_t batch, int64_t logits_rows, const fs::path& logits_out) {
  const int64_t T = model.config().seq_len, V = model.config().vocab_size;
  const data::TokenSplit tokens(dir, split, V);
  const int64_t available = tokens.empty() ? 0 : (tokens.size() - 1) / T;
  if (available == 0)
    throw UsageError("'" + dir.string() + "' has no " + split + " split of at least " +
                     std::to_string(T + 1) +
                     " tokens (seq_len + 1); prepare one with loom data prepare, or pass --split");
  const int64_t windows = max_windows > 0 ? std::min(max_windows, available) : available;
  std::vector<int32_t> in(static_cast<size_t>(batch * (T + 1))), x(static_cast<size_t>(batch * T)),
      y(x.size());
  double sum = 0;
  int64_t done = 0, shown = 0;
  const bool watched = ::isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  while (done < windows) {
    const int64_t b = std::min(batch, windows - done);
    for (int64_t w = 0; w < b; ++w) {
      tokens.read((done + w) * T, T + 1, in.data() + w * (T + 1));
      std::copy_n(in.begin() + w * (T + 1), T, x.begin() + w * T);
      std::copy_n(in.begin() + w * (T + 1) + 1, T, y.begin() + w * T);
    }
    if (done == 0 && logits_rows > 0) {
      model.forward({x.data(), nullptr, 1, T, 0.f});  // the head keeps logits only without targets
      write_logits(logits_out, model.logits(), std::min(logits_rows, T), V, x.data());
    }
    sum += model.forward({x.data(), y.data(), b, T, 0.f});
    done += b;
    const bool long_work = std::chrono::steady_clock::now() - start > std::chrono::seconds(3);
    if (watched && long_work && done < windows && done * 10 / windows > shown) {
      shown = done * 10 / windows;
      std::fprintf(stderr, "eval: %lld / %lld windows, mean loss so far %.6f\n", (long long)done,
                   (long long)windows, sum / static_cast<double>(done * T));
    }
  }
  const double mean = sum / static_cast<double>(windows * T);
  std::printf(
      "%s %s: %lld windows of %lld tokens (%lld of %lld), mean loss %.9f, perplexity %.4f\n",
      dir.c_str(), split.c_str(), (long long)windows, (long long)T, (long long)(windows * T),
      (long long)tokens.size(), mean, std::exp(mean));
  return kExitOk;
}

}  // namespace

int eval(const Args& args) {
  po::options_description opts("loom eval");
  opts.add_options()("src", po::value<std::string>()->required(),
                     "a Loom checkpoint (a step directory, a checkpoint root or a run directory), "
                     "a Hugging Face folder or an llm.c model file")(
      "data", po::value<std::string>(),
      "a prepared data directory: the mean loss and perplexity over its windows")(
      "text", po::value<std::string>(), "a text file: the loss of each of its tokens")(
      "split", po::value<std::string>()->default_value("val"),
      "--data: the split to read (val, train)")(
      "windows", ranged<int64_t>("windows", 0, int64_t(1) << 40)->default_value(0),
      "--data: at most this many windows; 0 = all")(
      "batch", ranged<int64_t>("batch", 1, 4096)->default_value(8), "--data: windows per forward")(
      "tokenizer", po::value<std::string>(),
      "tokenizer.json (default: beside the weights or the run's data)")(
      "ids", po::bool_switch(), "--text holds token ids separated by white space")(
      "logits", ranged<int64_t>("logits", 0, 1 << 20)->default_value(0),
      "write the logits of the first N positions")(
      "logits-out", po::value<std::string>()->default_value("logits.safetensors"),
      "where --logits writes them")("threads",
                                    ranged<int64_t>("threads", 0, 4096)->default_value(0),
                                    "CPU threads; 0 = the cores this process may use");
  po::positional_options_description pos;
  pos.add("src", 1);
  po::variables_map vm;
  const char* usage =
      "loom eval SRC (--data DIR | --text FILE) [--split S] [--windows N] [--batch B] [--tokenizer "
      "FILE] [--ids] "
      "[--logits N] [--logits-out FILE] [--threads N]";
  if (!parse(args, usage, opts, pos, vm)) return kExitOk;
  if (vm.count("data") == vm.count("text"))
    throw UsageError(std::string("give one of --data DIR and --text FILE\nusage: ") + usage);
  const ModelSource source = open_model_source(
      vm["src"].as<std::string>(), vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "");
  const int64_t asked = vm["threads"].as<int64_t>();
  inference_threads(asked);
  const int64_t T = source.model.seq_len, batch = vm.count("data") ? vm["batch"].as<int64_t>() : 1;
  const auto loaded = load_model(source, batch * T);
  const int64_t logits = vm["logits"].as<int64_t>();
  const fs::path logits_out = vm["logits-out"].as<std::string>();
  if (logits > 0) check_can_write(logits_out, "logits file");
  if (vm.count("data"))
    return eval_data(*loaded->model, vm["data"].as<std::string>(), vm["split"].as<std::string>(),
                     vm["windows"].as<int64_t>(), batch, logits, logits_out);
  const bool ids_only = vm["ids"].as<bool>();
  const std::unique_ptr<tok::Tokenizer> tokenizer = tokenizer_for(source, ids_only);
  return eval_text(
      *loaded->model,
      text_ids(vm["text"].as<std::string>(), tokenizer.get(), ids_only, source.model.vocab_size),
      tokenizer.get(), logits, logits_out);
}

}  // namespace loom::cli
