// The Hugging Face model matrix against transformers itself (tests/reference/hf_reference.py): tiny
// Llama, Mistral, Qwen2 and GPT-2 models in their variants (grouped-query, Llama 3.1 rope scaling,
// tied, attention biases, sliding window, exact gelu; fp32, bf16, fp16; sharded), with every norm
// and bias moved off its default so a dropped tensor shows. Each is refused at import naming the
// feature, or gives transformers' greedy ids (3 prompts x 32 tokens) and per-token loss (`loom
// eval`) within 1e-6 relative. Then tokenizers: the BOS template, eos ids, and an exported folder
// that a plain transformers script (AutoTokenizer, generate, pipeline) uses as Loom does.
#include <doctest/doctest.h>

#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/process.hpp"

using namespace loom::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kVenv = LOOM_SOURCE_DIR "/.venv/bin/python ";
const std::string kReference = kVenv + LOOM_SOURCE_DIR "/tests/reference/hf_reference.py ";
const char* const kPrompts[] = {"the quick", "12 foxes", "dog; "};
// 40 bytes; with a prompt's 32 tokens, inside the windowed Mistral's 48 positions, which its import
// makes seq_len (beyond them transformers slides a window and Loom restarts the context).
const char* const kText = "the lazy dog, 3 foxes; over 12 of them.\n";

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

json last_json(const Result& r) {
  INFO(r.out);
  REQUIRE(r.rc == 0);
  std::string s = r.out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return json::parse(s.substr(s.rfind('\n') + 1));
}

std::vector<double> loom_losses(const std::string& out) {
  std::vector<double> losses;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    long long pos, id;
    double loss;
    if (row >> pos >> id >> loss) losses.push_back(loss);
  }
  return losses;
}

std::string ids_of(const std::string& text) {
  std::string ids;
  for (unsigned char ch : text) ids += (ids.empty() ? "" : " ") + std::to_string(int(ch));
  return ids;
}

std::vector<long long> parse_ids(const std::string& line) {
  std::vector<long long> ids;
  std::istringstream in(line);
  long long id;
  while (in >> id) ids.push_back(id);
  return ids;
}

std::string last_line(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

// One model of the matrix: made by transformers, imported, then scored and decoded by Loom
// (the folder for eval, the imported checkpoint for generate) against transformers' reference.
void check_model(TempDir& t, const std::string& kind, const std::string& variants,
                 bool round_trip = false) {
  const std::string name = kind + (variants.empty() ? "" : "-" + variants),
                    hf = (t.path / name).string();
  const std::string ck = (t.path / (name + "-ck")).string(), text = t.write(name + ".txt", kText);
  REQUIRE(sh(kReference + "make " + kind + " " + hf + " " + variants).rc == 0);
  auto imp = run_loom("ckpt import " + hf + " --out " + ck);
  INFO(name << "\n" << imp.out);
  REQUIRE(imp.rc == 0);
  const json want = last_json(sh(kReference + "reference " + hf + " " + text + " '" + kPrompts[0] +
                                 "' '" + kPrompts[1] + "' '" + kPrompts[2] + "'"));
  auto eval = run_loom("eval " + hf + " --text " + text);
  INFO(eval.out);
  REQUIRE(eval.rc == 0);
  const std::vector<double> got = loom_losses(eval.out),
                            ref = want["losses"].get<std::vector<double>>();
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(name << " token " << i + 1 << ": Loom " << got[i] << ", transformers " << ref[i]);
    CHECK(std::abs(got[i] - ref[i]) <= 1e-6 * std::abs(ref[i]));
  }
  for (size_t p = 0; p < 3; ++p) {
    auto gen = run_loom("generate " + ck + " --ids --temperature 0 --max-tokens 32 --prompt '" +
                        ids_of(kPrompts[p]) + "'");
    INFO(name << " prompt '" << std::string(kPrompts[p]) << "'\n" << gen.out);
    REQUIRE(gen.rc == 0);
    CHECK(parse_ids(last_line(gen.out)) == want["greedy"][p].get<std::vector<long long>>());
  }
  if (!round_trip) return;
  // Exported back (biases included), transformers computes what it computed from the original.
  const std::string back = (t.path / (name + "-back")).string();
  auto exp = run_loom("ckpt export " + ck + " --format hf --out " + back);
  INFO(exp.out);
  REQUIRE(exp.rc == 0);
  const json again = last_json(sh(kReference + "reference " + back + " " + text + " '" +
                                  kPrompts[0] + "' '" + kPrompts[1] + "' '" + kPrompts[2] + "'"));
  CHECK(again["greedy"] == want["greedy"]);
  for (size_t i = 0; i < ref.size(); ++i)
    CHECK(std::abs(again["losses"][i].get<double>() - ref[i]) <= 1e-6 * std::abs(ref[i]));
}

}  // namespace

TEST_CASE(
    "the Llama family as transformers saves it: greedy ids and per-token loss equal "
    "transformers'") {
  TempDir t;
  for (const char* variants : {"", "rope31,tied", "attention-bias,bf16", "fp16,sharded"})
    check_model(t, "llama", variants, std::string(variants).starts_with("attention-bias"));
}

TEST_CASE(
    "Mistral (with and without a window), Qwen2 and GPT-2 (gelu_new, exact gelu) equal "
    "transformers") {
  TempDir t;
  for (const auto& [kind, variants] :
       std::vector<std::pair<std::string, std::string>>{{"mistral", ""},
                                                        {"mistral", "no-window,fp16"},
                                                        {"qwen2", ""},
                                                        {"qwen2", "bf16,sharded"},
                                                        {"gpt2", ""},
                                                        {"gpt2", "gelu-exact"}})
    check_model(t, kind, variants,
                (variants.empty() && kind != "mistral") || variants == "gelu-exact");
}

TEST_CASE("what no Loom model computes is refused at import, naming it, and nothing is written") {
  TempDir t;
  for (const auto& [kind, variants, says] : std::vector<std::array<std::string, 3>>{
           {"llama", "mlp-bias", "\"mlp_bias\": true is not supported"},
           {"llama", "rope-linear", "rope_scaling type \"linear\" is not supported (llama3 is)"},
           {"llama", "hidden-gelu", "\"hidden_act\": \"gelu\" is not supported"},
           {"gpt2", "inverse-layer-scale", "scale_attn_by_inverse_layer_idx"}}) {
    const std::string hf = (t.path / variants).string(),
                      ck = (t.path / (variants + "-ck")).string();
    REQUIRE(sh(kReference + "make " + kind + " " + hf + " " + variants).rc == 0);
    auto r = run_loom("ckpt import " + hf + " --out " + ck);
    INFO(variants << "\n" << r.out);
    CHECK(r.rc == 1);
    CHECK(has(r.out, says));
    CHECK_FALSE(fs::exists(ck));
  }
}

TEST_CASE(
    "an imported model brings its tokenizer: the BOS template, the text transformers gives, and a "
    "stop at eos ids") {
  TempDir t;
  const std::string hf = (t.path / "tok").string(), ck = (t.path / "tok-ck").string();
  const std::string text = t.write("text.txt", "the lazy dog jumps over 12 foxes");
  REQUIRE(sh(kReference + "make llama " + hf + " tokenizer,rope31").rc == 0);
  REQUIRE(run_loom("ckpt import " + hf + " --out " + ck).rc == 0);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    CHECK(fs::exists(fs::path(ck) / file));
  const json want =
      last_json(sh(kReference + "reference-text " + hf + " " + text + " 'the quick'"));
  // No --tokenizer: the one the import put beside the checkpoint, with <|begin_of_text|> first.
  auto eval = run_loom("eval " + ck + " --text " + text);
  INFO(eval.out);
  REQUIRE(eval.rc == 0);
  const std::vector<double> got = loom_losses(eval.out),
                            ref = want["losses"].get<std::vector<double>>();
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(std::abs(got[i] - ref[i]) <= 1e-6 * std::abs(ref[i]));
  // The text path puts <|begin_of_text|> first too: the same continuation, byte for byte.
  auto gen = run_loom("generate " + ck + " --prompt 'the quick' --temperature 0 --max-tokens 32");
  INFO(gen.out);
  REQUIRE(gen.rc == 0);
  std::string hex;
  for (unsigned char ch : gen.out.substr(9, gen.out.size() - 10))
    hex += "0123456789abcdef"[ch >> 4], hex += "0123456789abcdef"[ch & 15];
  CHECK(gen.out.starts_with("the quick"));
  CHECK(hex == want["greedy_hex"].get<std::string>());
  CHECK(want["prompt_ids"][0] == want["ids"][0]);  // the BOS of the template

  // eos ids as a list (Llama 3 Instruct's shape): the text ends before the first of them, --ids
  // too.
  auto free_run =
      run_loom("generate " + ck + " --ids --temperature 0 --max-tokens 12 --prompt '1 2 3'");
  REQUIRE(free_run.rc == 0);
  const std::vector<long long> ids = parse_ids(last_line(free_run.out));
  REQUIRE(ids.size() == 12);
  std::ofstream(fs::path(ck) / "generation_config.json")
      << "{\"eos_token_id\": [319, " << ids[4] << "]}\n";
  auto stopped =
      run_loom("generate " + ck + " --ids --temperature 0 --max-tokens 12 --prompt '1 2 3'");
  REQUIRE(stopped.rc == 0);
  const std::vector<long long> cut = parse_ids(last_line(stopped.out));
  CHECK(cut.size() <= 4);
  CHECK(std::vector<long long>(ids.begin(), ids.begin() + cut.size()) == cut);

  // Exported, the eos list goes along as it is; the import's own tokenizer files too.
  const std::string out = (t.path / "exported").string();
  auto exp = run_loom("ckpt export " + ck + " --format hf --out " + out);
  INFO(exp.out);
  REQUIRE(exp.rc == 0);
  std::ifstream gen_cfg(fs::path(out) / "generation_config.json"),
      config(fs::path(out) / "config.json");
  const json exported = json::parse(gen_cfg), model_config = json::parse(config);
  CHECK(exported["eos_token_id"] == json::array({319, ids[4]}));
  CHECK(model_config["eos_token_id"] == json::array({319, ids[4]}));
  std::ifstream tok_cfg(fs::path(out) / "tokenizer_config.json");
  CHECK(json::parse(tok_cfg)["bos_token"] == "<|begin_of_text|>");
  // Ids outside the vocabulary are refused by eval as by generate.
  auto outside = run_loom("eval " + ck + " --ids --text " + t.write("ids.txt", "1 2 400"));
  CHECK(outside.rc == 2);
  CHECK(has(outside.out, "token 400 is outside the vocabulary (320)"));
}

TEST_CASE(
    "a Loom-trained model exported for transformers works in a plain script: AutoTokenizer, "
    "generate, pipeline") {
  TempDir t;
  std::string lines;
  for (int i = 0; i < 120; ++i)
    lines +=
        "line " + std::to_string(i * 37 % 1000) + ": the quick brown fox jumps over the lazy dog\n";
  const std::string corpus = t.write("corpus.txt", lines);
  // A byte-level model (the tokenizer is made at export) and one on a BPE tokenizer Loom trained.
  for (const auto& [name, prepare, model] : std::vector<std::array<std::string, 3>>{
           {"bytes", "", "vocab_size = 256"},
           {"bpe", " --train-tokenizer --vocab-size 300", "vocab_size = 320"}}) {
    const std::string data = (t.path / (name + "-data")).string(),
                      ck = (t.path / (name + "-ck")).string();
    REQUIRE(run_loom("data prepare --val-fraction 0 --text " + corpus + " --out " + data + prepare)
                .rc == 0);
    const std::string cfg =
        t.write(name + ".toml", "[run]\nthreads = 1\n[data]\ndir = \"" + data +
                                    "\"\n[model]\npreset = "
                                    "\"llama-tiny\"\nseq_len = 32\n" +
                                    model +
                                    "\n[train]\nsteps = 4\nglobal_batch = 2\n"
                                    "lr = 3e-3\neval_every = 0\n[plugins]\nckpt = "
                                    "\"sync\"\n[checkpoint]\nevery = 4\ndir = \"" +
                                    ck + "\"\n");
    auto train = run_loom("train " + cfg + " --run-dir " + (t.path / (name + "-run")).string());
    INFO(train.out);
    REQUIRE(train.rc == 0);
    const std::string hf = (t.path / (name + "-hf")).string();
    auto exp = run_loom("ckpt export " + ck + " --format hf --out " + hf);
    INFO(exp.out);
    REQUIRE(exp.rc == 0);
    CHECK(has(exp.out, "tokenizer.json, tokenizer_config.json, special_tokens_map.json"));
    const json script = last_json(
        sh(kVenv + LOOM_SOURCE_DIR "/tests/reference/hf_script.py " + hf + " 'the quick' 12"));
    auto loom =
        run_loom("generate " + ck + " --prompt 'the quick' --temperature 0 --max-tokens 12");
    INFO(name << ": " << script.dump() << "\nLoom: " << loom.out);
    REQUIRE(loom.rc == 0);
    CHECK(loom.out == "the quick" + script["generate"].get<std::string>() + "\n");
    CHECK(script["pipeline"].get<std::string>() ==
          "the quick" + script["generate"].get<std::string>());
  }
}

TEST_CASE(
    "loom eval --data gives transformers' mean loss over the windows of a split, and --logits its "
    "logits") {
  TempDir t;
  const std::string hf = (t.path / "gpt2").string(), data = (t.path / "d").string();
  std::string text;
  for (int i = 0; i < 8; ++i)
    text += "line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog\n";
  const std::string file = t.write("text.txt", text);
  REQUIRE(sh(kReference + "make gpt2 " + hf).rc == 0);
  REQUIRE(run_loom("data prepare --val-fraction 0 --text " + file + " --out " + data).rc == 0);
  // 3 windows a forward: the last forward is partial.
  const std::string logits = (t.path / "logits.safetensors").string();
  auto eval = run_loom("eval " + hf + " --data " + data +
                       " --split train --batch 3 --logits 5 --logits-out " + logits);
  INFO(eval.out);
  REQUIRE(eval.rc == 0);
  const size_t at = eval.out.find("mean loss ");
  REQUIRE(at != std::string::npos);
  CHECK(
      has(eval.out, "train: " + std::to_string((text.size() - 1) / 64) + " windows of 64 tokens"));
  const double got = std::stod(eval.out.substr(at + 10));
  const double want =
      std::stod(last_line(sh(kReference + "windows " + hf + " " + file + " 64").out));
  INFO("Loom " << got << ", transformers " << want);
  CHECK(std::abs(got - want) <= 1e-6 * want);
  const double diff =
      std::stod(last_line(sh(kReference + "logits " + hf + " " + file + " 5 " + logits).out));
  INFO("largest logit difference " << diff);
  CHECK(diff < 1e-4);

  auto neither = run_loom("eval " + hf);
  CHECK(neither.rc == 2);
  CHECK(has(neither.out, "give one of --data DIR and --text FILE"));
  auto no_split = run_loom("eval " + hf + " --data " + data);  // prepared without a val split
  CHECK(no_split.rc == 1);
  CHECK(has(no_split.out, "no val shards (*val*.bin) in '" + data + "'"));
}

TEST_CASE(
    "an llm.c model imported with --tokenizer keeps it: generate finds it beside the checkpoint") {
  TempDir t;
  const std::string hf = (t.path / "gpt2").string(), bin = (t.path / "model.bin").string(),
                    ck = (t.path / "ck").string();
  REQUIRE(sh(kReference + "make gpt2 " + hf).rc == 0);
  REQUIRE(sh(kReference + "llmc " + hf + " " + bin).rc == 0);
  const std::string corpus = t.write("c.txt", "the quick brown fox jumps over the lazy dog\n");
  const std::string data = (t.path / "d").string();
  REQUIRE(run_loom("data prepare --val-fraction 0 --text " + corpus + " --out " + data +
                   " --train-tokenizer --vocab-size 257")
              .rc == 0);
  auto too_big = run_loom("ckpt import " + bin + " --out " + ck + " --tokenizer " +
                          (fs::path(data) / "tokenizer.json").string());
  INFO(too_big.out);  // 256 tokens and <|endoftext|>: one more than the model has
  CHECK(too_big.rc == 2);
  CHECK(has(too_big.out, "tokens, more than the model's vocabulary of 256"));
  CHECK_FALSE(fs::exists(ck));
  // The byte-level tokenizer an export writes for a 256-token model is one the import takes.
  REQUIRE(run_loom("ckpt import " + bin + " --out " + (t.path / "plain").string()).rc == 0);
  REQUIRE(run_loom("ckpt export " + (t.path / "plain").string() + " --format hf --out " +
                   (t.path / "hf2").string())
              .rc == 0);
  auto imp = run_loom("ckpt import " + bin + " --out " + ck + " --tokenizer " +
                      (t.path / "hf2" / "tokenizer.json").string());
  INFO(imp.out);
  REQUIRE(imp.rc == 0);
  CHECK(fs::exists(fs::path(ck) / "tokenizer.json"));
  auto with = run_loom("generate " + ck + " --prompt 'the quick' --temperature 0 --max-tokens 8");
  auto bytes = run_loom("generate " + bin + " --prompt 'the quick' --temperature 0 --max-tokens 8");
  INFO(with.out << bytes.out);
  REQUIRE(with.rc == 0);
  CHECK(with.out == bytes.out);  // the byte tokenizer maps each byte to itself
}
