// loom data prepare --text FILE... --out DIR [--tokenizer tokenizer.json | --train-tokenizer
//   --vocab-size N] [--val-fraction F]
// loom data encode --tokenizer tokenizer.json --text FILE [--check] [--out IDS]
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/parse.hpp"
#include "data/shards.hpp"
#include "tokenizer/tokenizer.hpp"
#include "core/files.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

std::string read_text(const fs::path& f) { return read_file(f, "text file"); }

// Each file is a document; it starts with the tokenizer's document marker when it has one
// (GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>), as llm.c's shards do.
std::vector<std::vector<uint32_t>> encode_files(const tok::Tokenizer& t, const std::vector<std::string>& texts) {
  int64_t marker = t.special("<|endoftext|>");
  if (marker < 0) marker = t.special("<|begin_of_text|>");
  std::vector<std::vector<uint32_t>> docs;
  for (const std::string& text : texts) {
    docs.push_back({});
    if (marker >= 0) docs.back().push_back(static_cast<uint32_t>(marker));
    std::vector<uint32_t> ids = t.encode(text);
    docs.back().insert(docs.back().end(), ids.begin(), ids.end());
  }
  return docs;
}

}  // namespace

// The ids of one file, space-separated; --check also decodes them and compares with the bytes.
int encode_file(const po::variables_map& vm) {
  if (!vm.count("tokenizer")) throw UsageError("loom data encode needs --tokenizer tokenizer.json");
  const auto& files = vm["text"].as<std::vector<std::string>>();
  if (files.size() != 1) throw UsageError("loom data encode takes one --text file");
  tok::Tokenizer t = tok::Tokenizer::from_json_file(vm["tokenizer"].as<std::string>());
  const std::string text = read_text(files[0]);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> ids = t.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (vm["check"].as<bool>()) {
    std::vector<int32_t> back(ids.begin(), ids.end());
    if (t.decode(back) != text) throw RuntimeError("decode(encode(text)) differs from '" + files[0] + "'");
    std::fprintf(stderr, "%zu bytes, %zu tokens, %.2f MB/s, decode(encode(x)) == x\n", text.size(), ids.size(),
                 text.size() / s / 1e6);
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  if (!vm.count("out")) {
    std::printf("%s\n", line.c_str());
    return kExitOk;
  }
  std::ofstream out(vm["out"].as<std::string>());
  out << line << "\n";
  if (!out) throw RuntimeError("cannot write '" + vm["out"].as<std::string>() + "'" + os_reason());
  return kExitOk;
}

int data(const Args& args) {
  po::options_description opts("loom data prepare");
  opts.add_options()("action", po::value<std::string>()->required(), "prepare")(
      "text", po::value<std::vector<std::string>>()->multitoken()->required(), "text files, one document each")(
      "out", po::value<std::string>(), "prepare: output directory for the shards (and tokenizer.json); encode: the ids' file (default: stdout)")(
      "tokenizer", po::value<std::string>(), "a byte-level BPE tokenizer.json (Hugging Face) to encode with")(
      "train-tokenizer", po::bool_switch(), "learn a byte-level BPE vocabulary from the texts first")(
      "vocab-size", po::value<int64_t>()->default_value(4096), "with --train-tokenizer: tokens in the vocabulary")(
      "val-fraction", po::value<double>()->default_value(0.05), "share of each file's tail held out for validation")(
      "check", po::bool_switch(), "encode: also check that decoding gives the text back, and report the rate");
  po::positional_options_description pos;
  pos.add("action", 1);
  po::variables_map vm;
  const char* usage =
      "loom data prepare --text FILE... --out DIR [--tokenizer tokenizer.json | --train-tokenizer --vocab-size N] "
      "[--val-fraction F]\n       loom data encode --tokenizer tokenizer.json --text FILE [--check] [--out IDS]";
  if (!parse(args, usage, opts, pos, vm)) return kExitOk;
  const std::string action = vm["action"].as<std::string>();
  if (action == "encode") return encode_file(vm);
  if (action != "prepare") throw UsageError("unknown action '" + action + "': expected 'prepare' or 'encode'");
  if (!vm.count("out")) throw UsageError("loom data prepare needs --out DIR");
  const fs::path out = vm["out"].as<std::string>();
  std::vector<fs::path> inputs;
  for (const auto& t : vm["text"].as<std::vector<std::string>>()) inputs.emplace_back(t);
  const bool train = vm["train-tokenizer"].as<bool>();
  if (train && vm.count("tokenizer")) throw UsageError("--tokenizer and --train-tokenizer exclude each other");
  if (!train && !vm.count("tokenizer")) {
    data::PrepareReport r = data::prepare_text(inputs, out, vm["val-fraction"].as<double>());
    std::printf("wrote %zu shards to %s: %lld training and %lld validation tokens (bytes)\n", r.written.size(),
                out.c_str(), (long long)r.train_tokens, (long long)r.val_tokens);
    return kExitOk;
  }
  std::vector<std::string> texts;
  for (const auto& f : inputs) texts.push_back(read_text(f));
  auto t0 = std::chrono::steady_clock::now();
  tok::Tokenizer t = train ? tok::Tokenizer::train(texts, vm["vocab-size"].as<int64_t>())
                           : tok::Tokenizer::from_json_file(vm["tokenizer"].as<std::string>());
  if (train)
    std::printf("trained a %lld-token byte-level BPE vocabulary in %.1f s\n", (long long)t.vocab_size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  data::PrepareReport r = data::write_splits(encode_files(t, texts), out, vm["val-fraction"].as<double>(), t.vocab_size());
  if (train)
    t.save_json(out / "tokenizer.json");
  else  // the user's file as it is: it may carry fields Loom does not use
    fs::copy_file(vm["tokenizer"].as<std::string>(), out / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::printf("wrote %zu shards and tokenizer.json to %s: %lld training and %lld validation tokens (vocabulary %lld)\n",
              r.written.size(), out.c_str(), (long long)r.train_tokens, (long long)r.val_tokens,
              (long long)t.vocab_size());
  return kExitOk;
}

}  // namespace loom::cli
