#include "data/prepare.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <thread>

#include "core/files.hpp"
#include "data/shard_writer.hpp"
#include "model/philox.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::data {

namespace {

constexpr uint64_t kValKey = 0x7a15e1u, kSampleKey = 0x5a3b1eu;

// What a resumed prepare must share with the one it continues.
json settings_of(const PrepareOptions& o, int64_t vocab) {
  json inputs = json::array();
  for (const std::string& in : o.inputs) {
    struct stat st {};
    const bool known = in != "-" && ::stat(in.c_str(), &st) == 0;
    inputs.push_back(
        {{"path", in},
         {"bytes", known ? int64_t(st.st_size) : -1},
         {"mtime_ns",
          known ? int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec : -1}});
  }
  const json tokenizer =
      o.train_tokenizer
          ? json{{"learned",
                  {{"vocab_size", o.vocab_size}, {"sample_bytes", o.tokenizer_sample_bytes}}}}
      : o.tokenizer.empty() ? json("bytes")
                            : json(o.tokenizer);
  return {{"inputs", inputs},      {"format", o.format == InputFormat::Jsonl ? "jsonl" : "text"},
          {"field", o.field},      {"tokenizer", tokenizer},
          {"vocab_size", vocab},   {"val_fraction", o.val_fraction},
          {"seed", o.seed},        {"shard_tokens", o.shard_tokens},
          {"skip_bad", o.skip_bad}};
}

// How far a prepare got: the documents read, and each split's whole shards and tokens of the next.
struct ResumePoint {
  uint64_t documents = 0, skipped = 0, text_bytes = 0;
  int64_t shards[2] = {0, 0}, partial[2] = {0, 0};
  std::string first_skipped;
  bool complete = false;
};

void save_point(const fs::path& out, const json& settings, const ResumePoint& p) {
  json j = {{"version", 1},
            {"settings", settings},
            {"complete", p.complete},
            {"documents", p.documents},
            {"skipped", p.skipped},
            {"first_skipped", p.first_skipped},
            {"text_bytes", p.text_bytes},
            {"train", {{"shards", p.shards[0]}, {"partial_tokens", p.partial[0]}}},
            {"val", {{"shards", p.shards[1]}, {"partial_tokens", p.partial[1]}}}};
  write_file(out / "prepare.json", j.dump(2) + "\n", "prepare record");
}

ResumePoint load_point(const fs::path& out, const json& settings) {
  const fs::path file = out / "prepare.json";
  ResumePoint p;
  json was;
  try {
    const json j = json::parse(read_file(file, "prepare record"));
    was = j.at("settings");
    p.complete = j.at("complete");
    p.documents = j.at("documents"), p.skipped = j.at("skipped"), p.text_bytes = j.at("text_bytes");
    p.first_skipped = j.value("first_skipped", "");
    p.shards[0] = j.at("train").at("shards"), p.partial[0] = j.at("train").at("partial_tokens");
    p.shards[1] = j.at("val").at("shards"), p.partial[1] = j.at("val").at("partial_tokens");
  } catch (const json::exception& e) {
    throw RuntimeError("--resume: '" + file.string() + "' is not a prepare record Loom can read (" +
                       e.what() + "); prepare again without --resume");
  }
  for (const auto& [key, value] : settings.items())
    if (was.value(key, json()) != value)
      throw UsageError(
          "--resume: the earlier prepare into '" + out.string() + "' had " + key + " = " +
          was.value(key, json()).dump() + ", this one " + value.dump() +
          "; resume with the same inputs and options, or prepare again without --resume");
  return p;
}

// Turns documents into ids, one per thread: its own tokenizer (their piece caches are not shared).
struct Encoder {
  std::unique_ptr<tok::Tokenizer> tok;  // null: bytes
  int64_t marker = -1;

  std::vector<uint32_t> encode(const std::string& text) const {
    if (!tok)
      return std::vector<uint32_t>(
          reinterpret_cast<const unsigned char*>(text.data()),
          reinterpret_cast<const unsigned char*>(text.data()) + text.size());
    std::vector<uint32_t> ids;
    if (marker >= 0) ids.push_back(static_cast<uint32_t>(marker));
    std::vector<uint32_t> body = tok->encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
};

std::vector<Encoder> make_encoders(const fs::path& tokenizer_json, int threads,
                                   uint64_t cache_bytes) {
  std::vector<Encoder> enc(threads);
  if (tokenizer_json.empty()) return enc;
  for (Encoder& e : enc) {
    e.tok = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_json_file(tokenizer_json));
    e.tok->set_cache_limit(
        std::max<uint64_t>(1024, cache_bytes / threads / 256));  // entries of up to ~256 bytes
    e.marker = e.tok->special("<|endoftext|>");
    if (e.marker < 0) e.marker = e.tok->special("<|begin_of_text|>");
  }
  return enc;
}

// A seeded sample of the documents, at most `cap` bytes: those with the smallest Philox keys
// (each document truncated to the cap), in input order. A document's key is known before its
// JSON is parsed, so most documents of a large corpus are passed over unread.
std::vector<std::string> tokenizer_sample(
    const PrepareOptions& o, uint64_t max_doc,
    const std::function<void(const PrepareProgress&)>& progress) {
  using Entry = std::tuple<uint64_t, uint64_t, std::string>;  // key, index, text
  constexpr uint64_t kEntryBytes = 64;  // what an entry costs besides its text
  auto later = [](const Entry& a, const Entry& b) { return std::get<0>(a) < std::get<0>(b); };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> heap(later);
  uint64_t held = 0;
  bool full = false;  // the sample has reached its cap once
  DocumentReader reader(o.inputs, o.format, max_doc);
  RawDocument doc;
  PrepareProgress p;
  p.total_bytes = reader.total_bytes();
  for (uint64_t i = 0; reader.next(doc); ++i) {
    const uint64_t key = philox64(i, o.seed, kSampleKey);
    if (full && key >= std::get<0>(heap.top())) continue;  // would be the first to leave again
    std::string text;
    try {
      text = document_text(doc, o.format, o.field, reader.inputs()[doc.input]);
    } catch (const BadDocument&) {
      if (o.skip_bad) continue;
      throw;
    }
    if (text.empty()) continue;  // teaches nothing
    if (text.size() > o.tokenizer_sample_bytes) text.resize(o.tokenizer_sample_bytes);
    held += text.size() + kEntryBytes;
    heap.emplace(key, i, std::move(text));
    while (held > o.tokenizer_sample_bytes && heap.size() > 1) {
      held -= std::get<2>(heap.top()).size() + kEntryBytes;
      heap.pop();
      full = true;
    }
    if (progress && i % 4096 == 0) {
      p.bytes_read = reader.bytes_read(), p.documents = i + 1;
      progress(p);
    }
  }
  std::vector<Entry> kept;
  for (; !heap.empty(); heap.pop()) kept.push_back(std::move(const_cast<Entry&>(heap.top())));
  std::sort(kept.begin(), kept.end(),
            [](const Entry& a, const Entry& b) { return std::get<1>(a) < std::get<1>(b); });
  std::vector<std::string> texts;
  for (Entry& e : kept) texts.push_back(std::move(std::get<2>(e)));
  return texts;
}

// The tokenizer.json beside the shards: copied from --tokenizer, learned from a sample, or (on a
// resume) the one the earlier prepare put there. Returns the path ("" for bytes) and a note.
std::pair<fs::path, std::string> settle_tokenizer(
    const PrepareOptions& o, uint64_t max_doc,
    const std::function<void(const PrepareProgress&)>& progress) {
  const fs::path beside = o.out / "tokenizer.json";
  if (o.train_tokenizer && o.resume && fs::exists(o.out / "prepare.json") && fs::exists(beside))
    return {beside, "kept the tokenizer the earlier prepare learned"};
  if (o.train_tokenizer) {
    if (std::count(o.inputs.begin(), o.inputs.end(), "-"))
      throw UsageError(
          "--train-tokenizer reads the input twice (a sample, then everything), and standard input "
          "can be "
          "read once: give files, or a --tokenizer learned elsewhere");
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::string> sample = tokenizer_sample(o, max_doc, progress);
    uint64_t bytes = 0;
    for (const std::string& s : sample) bytes += s.size();
    tok::Tokenizer t = tok::Tokenizer::train(sample, o.vocab_size);
    t.save_json(beside);
    char note[160];
    std::snprintf(
        note, sizeof note,
        "trained a %lld-token byte-level BPE vocabulary from %zu documents (%.1f MB) in %.1f s",
        (long long)t.vocab_size(), sample.size(), bytes / 1e6,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return {beside, note};
  }
  if (o.tokenizer.empty()) {
    fs::remove(
        beside);  // bytes: a tokenizer.json an earlier prepare left would speak for these shards
    return {fs::path(), ""};
  }
  const std::string bytes = read_file(o.tokenizer, "tokenizer");
  if (o.resume && fs::exists(beside) && read_file(beside, "tokenizer") != bytes)
    throw UsageError("--resume: --tokenizer '" + o.tokenizer +
                     "' differs from the tokenizer.json the earlier prepare "
                     "copied into '" +
                     o.out.string() + "'");
  write_file(beside, bytes,
             "tokenizer");  // the user's file as it is: it may carry fields Loom does not use
  return {beside, ""};
}

// Whether document i goes to validation: floor((i + 1) f + u) > floor(i f + u) holds for a share
// f of the documents, evenly spread, from a seeded phase u.
struct ValChoice {
  double f, u;
  ValChoice(double fraction, uint64_t seed)
      : f(fraction), u(static_cast<double>(philox64(0, seed, kValKey) >> 11) * 0x1.0p-53) {}
  bool operator()(uint64_t i) const { return std::floor((i + 1) * f + u) > std::floor(i * f + u); }
};

// Where each document's ids go.
struct Split {
  ShardWriter &train, &val;
  ValChoice to_val;
  bool tail;  // each document's last val_fraction to validation

  void operator()(const std::vector<uint32_t>& ids, uint64_t document) const {
    if (!tail) return (to_val(document) ? val : train).append(ids.data(), ids.size());
    const size_t cut = ids.size() - static_cast<size_t>(ids.size() * to_val.f);
    train.append(ids.data(), cut);
    val.append(ids.data() + cut, ids.size() - cut);
  }
};

struct Batch {
  std::vector<RawDocument> raw;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<std::string> error;
  uint64_t text_bytes = 0;
};

bool read_batch(DocumentReader& reader, uint64_t bytes, size_t documents, Batch& b) {
  b.raw.clear();
  uint64_t got = 0;
  RawDocument doc;
  while (got < bytes && b.raw.size() < documents && reader.next(doc)) {
    got += doc.bytes.size();
    b.raw.push_back(std::move(doc));
  }
  return !b.raw.empty();
}

void encode_batch(Batch& b, std::vector<Encoder>& enc, const PrepareOptions& o,
                  const std::vector<std::string>& inputs) {
  const size_t n = b.raw.size();
  b.ids.assign(n, {});
  b.error.assign(n, {});
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> text_bytes{0};
  std::vector<std::exception_ptr> failed(enc.size());  // rethrown once every thread has joined
  auto work = [&](size_t t) {
    try {
      for (size_t i; (i = next++) < n;) {
        std::string text;
        try {
          text = document_text(b.raw[i], o.format, o.field, inputs[b.raw[i].input]);
        } catch (const BadDocument& err) {
          b.error[i] = err.what();
        }
        std::string().swap(b.raw[i].bytes);  // the record goes before its ids are made
        text_bytes += text.size();
        if (b.error[i].empty()) b.ids[i] = enc[t].encode(text);
      }
    } catch (...) {
      failed[t] = std::current_exception();
      next = n;  // the others stop at their next document
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < enc.size(); ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  b.text_bytes = text_bytes;
}

void check_options(const PrepareOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))  // NaN fails every comparison
    throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(o.val_fraction));
  if (o.memory_bytes < (uint64_t{64} << 20)) throw UsageError("--memory-mb must be at least 64");
  if (o.train_tokenizer && !o.tokenizer.empty())
    throw UsageError("--tokenizer and --train-tokenizer exclude each other");
  if (o.shard_tokens < 1 || o.shard_tokens > INT32_MAX)
    throw UsageError("--shard-tokens must be in [1, 2^31), got " + std::to_string(o.shard_tokens));
  if (o.batch_documents < 1) throw UsageError("a batch needs at least one document");
}

// Reads past the documents a resumed prepare's shards already hold (read, not encoded).
void skip_documents(DocumentReader& reader, uint64_t documents) {
  RawDocument skip;
  for (uint64_t i = 0; i < documents; ++i)
    if (!reader.next(skip))
      throw UsageError("--resume: the inputs hold " + std::to_string(i) +
                       " documents, fewer than the " + std::to_string(documents) +
                       " the earlier prepare read");
}

// Each encoded document of the batch to its split; a bad one stops the prepare, or with
// --skip-bad is counted (the first one's error kept).
void split_batch(const Batch& b, const Split& split, bool skip_bad, PrepareProgress& p,
                 ResumePoint& at) {
  for (size_t i = 0; i < b.raw.size(); ++i, ++p.documents) {
    if (b.error[i].empty()) {
      split(b.ids[i], p.documents);
    } else if (!skip_bad) {
      throw BadDocument(b.error[i] + " (--skip-bad passes over such documents and counts them)");
    } else if (p.skipped++ == 0) {
      at.first_skipped = b.error[i];
    }
  }
  p.text_bytes += b.text_bytes;
  p.new_text_bytes += b.text_bytes;
}

// The resume point after a batch whose shards are synced: a kill from here on resumes after it.
void save_progress(const ShardWriter& train, const ShardWriter& val, const PrepareProgress& p,
                   const fs::path& out, const json& settings, ResumePoint& at) {
  at.documents = p.documents, at.skipped = p.skipped, at.text_bytes = p.text_bytes;
  at.shards[0] = train.complete(), at.partial[0] = train.partial();
  at.shards[1] = val.complete(), at.partial[1] = val.partial();
  save_point(out, settings, at);
}

}  // namespace

PrepareSummary prepare(const PrepareOptions& o,
                       const std::function<void(const PrepareProgress&)>& progress) {
  check_options(o);
  // One document takes up to an eighth of the bound, and its ids (4 bytes each) up to half more.
  const uint64_t max_doc = o.memory_bytes / 8, batch_bytes = o.memory_bytes / 16;
  fs::create_directories(o.out);
  const bool earlier = o.resume && fs::exists(o.out / "prepare.json");
  // A fresh start first takes away the old record, so no kill from here on leaves a record
  // that speaks for shards or a tokenizer it did not see.
  if (!earlier) fs::remove(o.out / "prepare.json");
  PrepareSummary sum;
  sum.threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const auto [tok_path, note] = settle_tokenizer(o, max_doc, progress);
  sum.tokenizer_note = note;
  std::vector<Encoder> enc = make_encoders(tok_path, sum.threads, o.memory_bytes / 4);
  sum.vocab_size = enc[0].tok ? enc[0].tok->vocab_size() : 256;
  const json settings = settings_of(o, sum.vocab_size);
  ResumePoint at = earlier ? load_point(o.out, settings) : ResumePoint{};
  sum.resumed = earlier;
  if (at.complete) {
    sum.already_complete = true;
    sum.totals.documents = at.documents, sum.totals.skipped = at.skipped;
    sum.train_shards = at.shards[0], sum.val_shards = at.shards[1];
    return sum;
  }
  DocumentReader reader(o.inputs, o.format, max_doc);
  ShardWriter train(o.out, "train", sum.vocab_size, o.shard_tokens, at.shards[0], at.partial[0]);
  ShardWriter val(o.out, "val", sum.vocab_size, o.shard_tokens, at.shards[1], at.partial[1]);
  if (!earlier) save_point(o.out, settings, at);  // a resume point before the first batch
  PrepareProgress& p = sum.totals;
  p.phase = "encoding";
  p.total_bytes = reader.total_bytes();
  p.documents = at.documents, p.skipped = at.skipped, p.text_bytes = at.text_bytes;
  skip_documents(reader, at.documents);
  // The rate and the ETA are of the documents this run encodes: not of learning a tokenizer, not
  // of reading past what a resumed prepare's shards hold.
  const auto t0 = std::chrono::steady_clock::now();
  // Text files are whole documents: too few of them to hold any out whole, and each keeps its tail.
  const bool tails =
      o.format == InputFormat::Text && o.val_fraction > 0 && o.inputs.size() * o.val_fraction < 1;
  if (tails)
    sum.split_note =
        "too few documents to hold any out whole: the last share of each went to validation";
  const Split split{train, val, ValChoice(o.val_fraction, o.seed), tails};
  p.skipped_bytes = reader.bytes_read();
  Batch b;
  while (read_batch(reader, batch_bytes, o.batch_documents, b)) {
    encode_batch(b, enc, o, reader.inputs());
    split_batch(b, split, o.skip_bad, p, at);
    train.sync();
    val.sync();
    save_progress(train, val, p, o.out, settings, at);
    p.bytes_read = reader.bytes_read(), p.train_tokens = train.tokens(),
    p.val_tokens = val.tokens();
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) progress(p);
  }
  const bool empty = train.tokens() == 0;
  train.finish();
  val.finish();
  if (empty) throw UsageError("the input has no tokens: nothing to write");
  p.train_tokens = train.tokens(), p.val_tokens = val.tokens();
  at.complete = true;
  at.shards[0] = train.complete(), at.partial[0] = 0, at.shards[1] = val.complete(),
  at.partial[1] = 0;
  save_point(o.out, settings, at);
  sum.train_shards = train.complete(), sum.val_shards = val.complete();
  sum.first_skipped = at.first_skipped;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace loom::data
