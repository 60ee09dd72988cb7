// `loom data prepare`: documents in, llm.c token shards out, at a memory bound that does not
// depend on the corpus.
//
// The input is read a batch of documents at a time (a sixteenth of the memory bound). Every
// thread takes documents from the batch, turns each into text (parses its JSON, checks its UTF-8)
// and encodes it, marker first; the ids are then written in document order, so the output does
// not depend on the thread count. A document goes whole to validation or to training: every
// 1/val_fraction-th one from a seeded starting point (text files too few to hold any out whole
// are the exception: each one's tail is held out). Shards are named only when
// complete (shard_writer.hpp), and after each batch `prepare.json` records how far the input
// got, so `--resume` continues a killed prepare and gives the same bytes as an uninterrupted one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/documents.hpp"

namespace loom::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files; "-" = standard input
  InputFormat format = InputFormat::Jsonl;
  std::string field = "text";
  std::filesystem::path out;
  std::string tokenizer;  // tokenizer.json to encode with; "" = bytes (vocabulary 256) unless
                          // train_tokenizer
  bool train_tokenizer = false;
  int64_t vocab_size = 4096;
  uint64_t tokenizer_sample_bytes = uint64_t{64} << 20;
  double val_fraction = 0.05;
  uint64_t seed = 1234;
  int64_t shard_tokens = 100'000'000;
  uint64_t memory_bytes = uint64_t{512} << 20;
  int threads = 0;  // 0 = every core
  bool skip_bad = false, resume = false;
  // A batch ends at this many documents or a sixteenth of the memory bound, whichever comes
  // first: enough to keep every thread busy, and a resume point every few seconds.
  size_t batch_documents = 4096;
};

struct PrepareProgress {
  const char* phase = "sampling";            // "sampling" (for --train-tokenizer), then "encoding"
  uint64_t bytes_read = 0, total_bytes = 0;  // of the inputs (compressed where they are)
  uint64_t skipped_bytes = 0;  // read by a resume to pass what the shards hold: not in the ETA
  uint64_t text_bytes = 0, documents = 0,
           skipped = 0;         // since the start (a resumed prepare's included)
  uint64_t new_text_bytes = 0;  // encoded by this process: the rate's
  int64_t train_tokens = 0, val_tokens = 0;
  double seconds = 0;
};

struct PrepareSummary {
  PrepareProgress totals;
  int64_t train_shards = 0, val_shards = 0, vocab_size = 0;
  std::string first_skipped;   // the first bad document's message, under skip_bad
  std::string tokenizer_note;  // what --train-tokenizer did, or ""
  std::string split_note;      // how the validation split was taken, when not document by document
  bool resumed = false, already_complete = false;
  int threads = 0;
};

// `progress` is called after each batch (and while a tokenizer sample is read).
PrepareSummary prepare(const PrepareOptions& o,
                       const std::function<void(const PrepareProgress&)>& progress = {});

}  // namespace loom::data
