// tokenizer.json (Hugging Face tokenizers) and tiktoken rank files, in and out.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_read.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::tok {

namespace {

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the other 68 (controls,
// space, 127-160, 173) for code points 256, 257, ... in byte order, so every token is text.
std::vector<uint32_t> byte_to_codepoint() {
  std::vector<uint32_t> cp(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

void put_utf8(std::string& s, uint32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12)), s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string to_byte_level(const std::string& raw) {
  static const std::vector<uint32_t> cp = byte_to_codepoint();
  std::string s;
  for (unsigned char b : raw) put_utf8(s, cp[b]);
  return s;
}

// The inverse; false when a character is not in the alphabet.
bool from_byte_level(const std::string& text, std::string& raw) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    std::vector<uint32_t> cp = byte_to_codepoint();
    for (int b = 0; b < 256; ++b) inv[cp[b]] = b;
    return inv;
  }();
  raw.clear();
  for (size_t i = 0; i < text.size();) {
    unsigned char c = text[i];
    uint32_t code;
    if (c < 0x80) {
      code = c, i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      code = ((c & 0x1F) << 6) | (text[i + 1] & 0x3F), i += 2;
    } else {
      return false;
    }
    if (code >= inverse.size() || inverse[code] < 0) return false;
    raw += static_cast<char>(inverse[code]);
  }
  return true;
}

std::string base64_decode(const std::string& in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    size_t v = chars.find(c);
    if (v == std::string::npos) throw RuntimeError("bad base64 character");
    acc = (acc << 6) | static_cast<uint32_t>(v), bits += 6;
    if (bits >= 8) bits -= 8, out += static_cast<char>((acc >> bits) & 0xFF);
  }
  return out;
}

// The pre-tokenizer of a byte-level BPE tokenizer.json: ByteLevel (GPT-2's pattern unless
// use_regex is false) or Sequence[Split(Regex), ByteLevel(use_regex = false)].
std::string pattern_of(const json& pre, bool& prefix, const std::string& where) {
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") {
    prefix = pre.value("add_prefix_space", false);
    return pre.value("use_regex", true) ? kGpt2Pattern : "";
  }
  if (type == "Sequence") {
    std::string pattern;
    for (const json& p : pre.at("pretokenizers")) {
      const std::string t = p.value("type", "");
      if (t == "Split" && p.at("pattern").contains("Regex") &&
          p.value("behavior", "") == "Isolated" && !p.value("invert", false))
        pattern = p.at("pattern").at("Regex").get<std::string>();
      else if (t == "ByteLevel" && !p.value("use_regex", true))
        prefix = p.value("add_prefix_space", false);
      else
        throw ConfigError(where + "pre_tokenizer " + t +
                          " is not supported: Loom reads a byte-level BPE split by one regex");
    }
    if (!pattern.empty()) return pattern;
  }
  throw ConfigError(
      where + "pre_tokenizer.type = \"" + type +
      "\" is not supported: Loom reads byte-level BPE (ByteLevel, or Split then ByteLevel)");
}

// The special tokens a post_processor puts around a text: TemplateProcessing's single template
// (Llama 3's <|begin_of_text|> first), Roberta/BertProcessing's cls and sep, ByteLevel (offsets
// only, no tokens) and a Sequence of these. Ids come from the file, so a token missing from the
// vocabulary is an error naming it.
void special_frame(const json& pp, std::vector<uint32_t>& prefix, std::vector<uint32_t>& suffix,
                   const std::string& where) {
  if (pp.is_null()) return;
  const std::string type = pp.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& p : pp.at("processors")) special_frame(p, prefix, suffix, where);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(json_integer<uint32_t>(pp.at("cls").at(1), where + "post_processor.cls"));
    suffix.insert(suffix.begin(),
                  json_integer<uint32_t>(pp.at("sep").at(1), where + "post_processor.sep"));
    return;
  }
  if (type != "TemplateProcessing")
    throw ConfigError(where + "post_processor.type = \"" + type +
                      "\" is not supported (TemplateProcessing, "
                      "RobertaProcessing, BertProcessing, ByteLevel)");
  bool seen_text = false;
  for (const json& piece : pp.at("single")) {
    if (piece.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!pp.at("special_tokens").contains(name))
      throw ConfigError(where + "post_processor names special token \"" + name +
                        "\" that its special_tokens lack");
    for (const json& id : pp["special_tokens"][name].at("ids"))
      (seen_text ? suffix : prefix)
          .push_back(json_integer<uint32_t>(id, where + "post_processor id"));
  }
}

}  // namespace

Tokenizer Tokenizer::from_json_file(const fs::path& path) {
  const std::string where = "tokenizer '" + path.string() + "': ";
  std::ifstream in = open_input(path, "tokenizer");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw RuntimeError(where + "not JSON: " + e.what());
  }
  try {
    const json& model = j.at("model");
    const std::string type = model.value("type", "BPE");
    if (type != "BPE")
      throw ConfigError(where + "model.type = \"" + type +
                        "\" is not supported: Loom reads byte-level BPE tokenizers");
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      throw ConfigError(where + "normalizer.type = \"" + j["normalizer"].value("type", "?") +
                        "\" is not supported");
    if (model.value("byte_fallback", false))
      throw ConfigError(where + "model.byte_fallback (SentencePiece-style BPE) is not supported");
    Tokenizer t;
    const std::string pattern = pattern_of(j.at("pre_tokenizer"), t.add_prefix_space_, where);
    t.ignore_merges_ = model.value("ignore_merges", false);
    std::string raw;
    for (const auto& [text, id] : model.at("vocab").items()) {
      if (!from_byte_level(text, raw))
        throw ConfigError(where + "vocab token \"" + text + "\" is not in the byte-level alphabet");
      const uint32_t i = json_integer<uint32_t>(id, where + "vocab id of \"" + text + "\"");
      if (i >= t.bytes_.size()) t.bytes_.resize(i + 1);
      t.bytes_[i] = raw;
      t.ids_[raw] = i;
    }
    for (const json& a : j.value("added_tokens", json::array())) {
      const uint32_t i = json_integer<uint32_t>(a.at("id"), where + "added token id");
      if (i >= t.bytes_.size()) t.bytes_.resize(i + 1);
      t.bytes_[i] = a.at("content").get<std::string>();
      t.specials_.emplace_back(t.bytes_[i], i);
    }
    std::string left, right;
    for (const json& m : model.at("merges")) {
      std::string l, r;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos)
          throw ConfigError(where + "merge \"" + s + "\" is not two tokens");
        l = s.substr(0, sp), r = s.substr(sp + 1);
      } else {
        l = m.at(0).get<std::string>(), r = m.at(1).get<std::string>();
      }
      if (!from_byte_level(l, left) || !from_byte_level(r, right))
        throw ConfigError(where + "merge \"" + l + " " + r + "\" is not byte-level");
      auto a = t.ids_.find(left), b = t.ids_.find(right), c = t.ids_.find(left + right);
      if (a == t.ids_.end() || b == t.ids_.end() || c == t.ids_.end())
        throw ConfigError(where + "merge \"" + l + " " + r +
                          "\" names a token missing from model.vocab");
      t.add_merge(a->second, b->second, c->second);
    }
    t.finish(pattern);
    special_frame(j.value("post_processor", json()), t.prefix_, t.suffix_, where);
    for (const auto* frame : {&t.prefix_, &t.suffix_})
      for (uint32_t id : *frame)
        if (id >= t.bytes_.size())
          throw ConfigError(where + "post_processor adds token id " + std::to_string(id) +
                            ", outside the vocabulary");
    if (j.contains("post_processor")) t.post_processor_ = j["post_processor"].dump();
    return t;
  } catch (const json::exception& e) {
    throw ConfigError(where + e.what());
  } catch (const RuntimeError& e) {  // json_integer's: an id that is not one
    throw ConfigError(e.what());
  }
}

Tokenizer Tokenizer::from_tiktoken(const fs::path& path, const std::string& pattern,
                                   const std::vector<std::string>& specials) {
  std::ifstream in = open_input(path, "tiktoken file");
  Tokenizer t;
  std::string b64;
  uint32_t rank;
  int64_t line = 0;
  while (in >> b64 >> rank) {
    ++line;
    std::string raw;
    try {
      raw = base64_decode(b64);
    } catch (const RuntimeError& e) {
      throw RuntimeError("tiktoken file '" + path.string() + "' line " + std::to_string(line) +
                         ": " + e.what());
    }
    if (rank >= t.bytes_.size()) t.bytes_.resize(rank + 1);
    t.bytes_[rank] = raw;
    t.ids_[raw] = rank;
  }
  // tiktoken merges the adjacent pair whose concatenation ranks lowest: each split of a token into
  // two tokens is a merge with the token's rank.
  std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> merges;
  for (uint32_t id = 0; id < t.bytes_.size(); ++id) {
    const std::string& s = t.bytes_[id];
    for (size_t k = 1; k < s.size(); ++k) {
      auto l = t.ids_.find(s.substr(0, k)), r = t.ids_.find(s.substr(k));
      if (l != t.ids_.end() && r != t.ids_.end()) merges.emplace_back(l->second, r->second, id);
    }
  }
  for (auto [l, r, id] : merges)
    t.merges_.emplace((static_cast<uint64_t>(l) << 32) | r, std::make_pair(id, id));
  for (const std::string& s : specials) {
    t.specials_.emplace_back(s, static_cast<uint32_t>(t.bytes_.size()));
    t.bytes_.push_back(s);
  }
  t.finish(pattern);
  return t;
}

void Tokenizer::save_json(const fs::path& path) const {
  json vocab = json::object(), merges = json::array(), added = json::array();
  for (const auto& [raw, id] : ids_) vocab[to_byte_level(raw)] = id;
  std::vector<std::pair<uint32_t, uint64_t>> by_rank;
  for (const auto& [key, rm] : merges_) by_rank.emplace_back(rm.first, key);
  std::sort(by_rank.begin(), by_rank.end());
  for (const auto& [rank, key] : by_rank)
    merges.push_back(to_byte_level(bytes_[key >> 32]) + " " +
                     to_byte_level(bytes_[key & 0xffffffffu]));
  for (const auto& [content, id] : specials_)
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  json pre = pattern_ == kGpt2Pattern ? json{{"type", "ByteLevel"},
                                             {"add_prefix_space", add_prefix_space_},
                                             {"trim_offsets", true},
                                             {"use_regex", true}}
                                      : json{{"type", "Sequence"},
                                             {"pretokenizers",
                                              {{{"type", "Split"},
                                                {"pattern", {{"Regex", pattern_}}},
                                                {"behavior", "Isolated"},
                                                {"invert", false}},
                                               {{"type", "ByteLevel"},
                                                {"add_prefix_space", add_prefix_space_},
                                                {"trim_offsets", true},
                                                {"use_regex", false}}}}};
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", pre},
            {"post_processor", post_processor_.empty() ? json() : json::parse(post_processor_)},
            {"decoder",
             {{"type", "ByteLevel"},
              {"add_prefix_space", true},
              {"trim_offsets", true},
              {"use_regex", true}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", ignore_merges_},
              {"vocab", vocab},
              {"merges", merges}}}};
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) throw RuntimeError("cannot write '" + tmp.string() + "'" + os_reason());
  }
  fs::rename(tmp, path);
}

}  // namespace loom::tok
