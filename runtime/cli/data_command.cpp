// loom data prepare (--jsonl FILE... | --text FILE...) --out DIR [--tokenizer tokenizer.json |
//   --train-tokenizer --vocab-size N] [--val-fraction F] ... (runtime/data/prepare.hpp)
// loom data encode --tokenizer tokenizer.json --text FILE [--check] [--out IDS]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>

#include "cli/parse.hpp"
#include "core/files.hpp"
#include "data/prepare.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/metrics.hpp"
#include "train/report_fields.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

std::string read_text(const fs::path& f) { return read_file(f, "text file"); }

// On a terminal a line redrawn twice a second; in a log, a line every 30 s.
class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(2)), last_(std::chrono::steady_clock::now()) {}
  ~ProgressLine() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
  }
  void operator()(const data::PrepareProgress& p) {
    const auto now =
        std::chrono::steady_clock::now();  // the first batch's line at once, then at the interval
    if (shown_ && std::chrono::duration<double>(now - last_).count() < (tty_ ? 0.5 : 30.0)) return;
    last_ = now, shown_ = true;
    std::string read = human_bytes(p.bytes_read);
    if (p.total_bytes > 0)
      read += " of " + human_bytes(p.total_bytes) + " (" +
              std::to_string(100 * p.bytes_read / p.total_bytes) + "%)";
    std::string line = "prepare: " + std::string(p.phase) + ": " + read + " read, " +
                       train::human_count(p.documents) + " documents";
    if (std::string(p.phase) == "encoding") {
      char rate[48];
      std::snprintf(rate, sizeof rate, ", %.1f MB/s of text",
                    p.seconds > 0 ? p.new_text_bytes / p.seconds / 1e6 : 0.0);
      line += ", " + train::human_count(double(p.train_tokens + p.val_tokens)) + " tokens" + rate;
      if (p.total_bytes > 0 && p.bytes_read > 0)
        line += train::eta_suffix(p.seconds, int64_t(p.bytes_read - p.skipped_bytes),
                                  int64_t(p.total_bytes - p.bytes_read));
    }
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

 private:
  static std::string human_bytes(uint64_t b) {
    char s[32];
    std::snprintf(s, sizeof s, b >= 1e9 ? "%.2f GB" : "%.1f MB", b >= 1e9 ? b / 1e9 : b / 1e6);
    return s;
  }
  bool tty_, drawn_ = false, shown_ = false;
  std::chrono::steady_clock::time_point last_;
};

data::PrepareOptions prepare_options(const po::variables_map& vm) {
  data::PrepareOptions o;
  const bool text = vm.count("text"), jsonl = vm.count("jsonl");
  if (text == jsonl)
    throw UsageError("loom data prepare needs --text FILE... or --jsonl FILE... (one of them)");
  if (!vm.count("out")) throw UsageError("loom data prepare needs --out DIR");
  o.inputs = vm[text ? "text" : "jsonl"].as<std::vector<std::string>>();
  o.format = text ? data::InputFormat::Text : data::InputFormat::Jsonl;
  o.field = vm["field"].as<std::string>();
  o.out = vm["out"].as<std::string>();
  if (vm.count("tokenizer")) o.tokenizer = vm["tokenizer"].as<std::string>();
  o.train_tokenizer = vm["train-tokenizer"].as<bool>();
  o.vocab_size = vm["vocab-size"].as<int64_t>();
  o.tokenizer_sample_bytes =
      static_cast<uint64_t>(std::max<int64_t>(1, vm["tokenizer-sample-mb"].as<int64_t>())) << 20;
  o.val_fraction = vm["val-fraction"].as<double>();
  o.seed = vm["seed"].as<uint64_t>();
  o.shard_tokens = vm["shard-tokens"].as<int64_t>();
  o.memory_bytes = static_cast<uint64_t>(std::max<int64_t>(0, vm["memory-mb"].as<int64_t>())) << 20;
  o.threads = vm["threads"].as<int>();
  o.skip_bad = vm["skip-bad"].as<bool>();
  o.resume = vm["resume"].as<bool>();
  return o;
}

int prepare_command(const po::variables_map& vm) {
  const data::PrepareOptions o = prepare_options(vm);
  data::PrepareSummary s;
  {
    ProgressLine line;
    s = data::prepare(o, std::ref(line));
  }
  const data::PrepareProgress& t = s.totals;
  if (s.already_complete) {
    std::printf(
        "%s is complete already (%llu documents, %lld training and %lld validation shards): "
        "nothing to resume\n",
        o.out.c_str(), (unsigned long long)t.documents, (long long)s.train_shards,
        (long long)s.val_shards);
    return kExitOk;
  }
  if (!s.tokenizer_note.empty()) std::printf("%s\n", s.tokenizer_note.c_str());
  if (!s.split_note.empty()) std::printf("validation: %s\n", s.split_note.c_str());
  std::printf(
      "wrote %lld training and %lld validation shards to %s: %lld and %lld tokens (vocabulary "
      "%lld) from %llu "
      "documents, %.1f MB of text, in %.1f s (%.1f MB/s on %d threads%s); peak memory %.0f MiB\n",
      (long long)s.train_shards, (long long)s.val_shards, o.out.c_str(), (long long)t.train_tokens,
      (long long)t.val_tokens, (long long)s.vocab_size,
      (unsigned long long)(t.documents - t.skipped), t.text_bytes / 1e6, t.seconds,
      t.seconds > 0 ? t.new_text_bytes / t.seconds / 1e6 : 0.0, s.threads,
      s.resumed ? ", resumed" : "", train::process_memory().peak_bytes / 1048576.0);
  if (t.skipped > 0)
    std::printf("skipped %llu bad documents (--skip-bad); the first: %s\n",
                (unsigned long long)t.skipped, s.first_skipped.c_str());
  return kExitOk;
}

}  // namespace

// The ids of one file, space-separated; --check also decodes them and compares with the bytes.
int encode_file(const po::variables_map& vm) {
  if (!vm.count("tokenizer")) throw UsageError("loom data encode needs --tokenizer tokenizer.json");
  if (!vm.count("text")) throw UsageError("loom data encode needs --text FILE");
  const auto& files = vm["text"].as<std::vector<std::string>>();
  if (files.size() != 1) throw UsageError("loom data encode takes one --text file");
  tok::Tokenizer t = tok::Tokenizer::from_json_file(vm["tokenizer"].as<std::string>());
  const std::string text = read_text(files[0]);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> ids = t.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (vm["check"].as<bool>()) {
    std::vector<int32_t> back(ids.begin(), ids.end());
    if (t.decode(back) != text)
      throw RuntimeError("decode(encode(text)) differs from '" + files[0] + "'");
    std::fprintf(stderr, "%zu bytes, %zu tokens, %.2f MB/s, decode(encode(x)) == x\n", text.size(),
                 ids.size(), text.size() / s / 1e6);
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
  opts.add_options()("action", po::value<std::string>()->required(), "prepare or encode")(
      "text", po::value<std::vector<std::string>>()->multitoken(),
      "text files, one document each ('-' = standard input)")(
      "jsonl", po::value<std::vector<std::string>>()->multitoken(),
      "JSONL files, one document per line, plain, gzip or zstd ('-' = standard input)")(
      "field", po::value<std::string>()->default_value("text"),
      "--jsonl: the field holding each document's text")(
      "out", po::value<std::string>(),
      "prepare: output directory for the shards (and tokenizer.json); encode: the ids' file "
      "(default: stdout)")("tokenizer", po::value<std::string>(),
                           "a byte-level BPE tokenizer.json (Hugging Face) to encode with")(
      "train-tokenizer", po::bool_switch(),
      "learn a byte-level BPE vocabulary from a sample of the documents first")(
      "vocab-size", po::value<int64_t>()->default_value(4096),
      "with --train-tokenizer: tokens in the vocabulary")(
      "tokenizer-sample-mb", po::value<int64_t>()->default_value(64),
      "with --train-tokenizer: text it learns from, a seeded sample")(
      "val-fraction", po::value<double>()->default_value(0.05, "0.05"),
      "share of the documents held out for validation")(
      "seed", po::value<uint64_t>()->default_value(1234),
      "chooses the validation documents and the tokenizer's sample")(
      "shard-tokens", po::value<int64_t>()->default_value(100'000'000), "tokens per shard")(
      "memory-mb", po::value<int64_t>()->default_value(512),
      "memory bound: batches, one document and the tokenizers' caches")(
      "threads", po::value<int>()->default_value(0), "encoding threads; 0 = every core")(
      "skip-bad", po::bool_switch(),
      "pass over documents that are not JSON, lack the field or are not UTF-8, and count them")(
      "resume", po::bool_switch(),
      "continue a killed prepare into the same --out from its last complete batch")(
      "check", po::bool_switch(),
      "encode: also check that decoding gives the text back, and report the rate");
  po::positional_options_description pos;
  pos.add("action", 1);
  po::variables_map vm;
  const char* usage =
      "loom data prepare (--jsonl FILE... [--field text] | --text FILE...) --out DIR [--tokenizer "
      "tokenizer.json | "
      "--train-tokenizer --vocab-size N] [--val-fraction F] [--shard-tokens N] [--memory-mb M] "
      "[--skip-bad] [--resume]\n"
      "       loom data encode --tokenizer tokenizer.json --text FILE [--check] [--out IDS]";
  if (!parse(args, usage, opts, pos, vm)) return kExitOk;
  const std::string action = vm["action"].as<std::string>();
  if (action == "encode") return encode_file(vm);
  if (action != "prepare")
    throw UsageError("unknown action '" + action + "': expected 'prepare' or 'encode'");
  return prepare_command(vm);
}

}  // namespace loom::cli
