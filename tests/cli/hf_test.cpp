// Weights in and out against transformers (tests/reference/hf_reference.py, in .venv): tiny
// GPT-2 and Llama models made and saved by transformers, and an llm.c file written from the GPT-2
// one, imported into Loom give PyTorch's loss on a fixed window within 1e-5 and the same greedy
// tokens; a Loom-trained llama-tiny exported for transformers gives Loom's loss back; broken
// inputs fail naming the file and the tensor, and write nothing.
#include <doctest/doctest.h>

#include <fstream>
#include <vector>

#include "support/metrics.hpp"
#include "support/process.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::string kPython =
    LOOM_SOURCE_DIR "/.venv/bin/python " LOOM_SOURCE_DIR "/tests/reference/hf_reference.py";

// T = 64: a data split of exactly T + 2 byte tokens, so every sample is the window [0, T].
struct Fixture {
  TempDir t;
  std::string window, data, base;
  Fixture() {
    std::string text;
    for (int i = 0; i < 66; ++i) text += "the quick brown fox, 12 jumps.\n"[(i * 7) % 31];
    window = t.write("w.txt", text);
    REQUIRE(run_loom("data prepare --val-fraction 0 --text " + window + " --out " +
                     (t.path / "d").string())
                .rc == 0);
    base = "[run]\nthreads = 1\n[data]\ndir = \"" + (t.path / "d").string() +
           "\"\n[train]\nsteps = 1\nglobal_batch = 1\nlr = 0.0\nwarmup_steps = 0\neval_every = 0\n";
  }
  std::string py(const std::string& args) {
    auto r = sh(kPython + " " + args);
    INFO(args << "\n" << r.out);
    REQUIRE(r.rc == 0);
    return r.out;
  }
  // Loom's loss of the window with the weights of `src`, the model as `model_toml` says.
  double loom_loss(const std::string& model_toml, const std::string& src, const std::string& name) {
    const std::string cfg = t.write(name + ".toml", base + model_toml);
    const std::string dir = (t.path / ("run-" + name)).string();
    auto r = run_loom("train " + cfg + " --run-dir " + dir + " --set model.init_from=" + src);
    INFO(r.out);
    REQUIRE(r.rc == 0);
    return column(fs::path(dir) / "metrics.jsonl", "loss").at(0);
  }
  std::string prompt_ids() const {
    std::string ids;
    for (char ch : std::string("the quick brown fox"))
      ids += (ids.empty() ? "" : " ") + std::to_string(int(ch));
    return ids;
  }
  std::string loom_greedy(const std::string& src) {
    auto r = run_loom("generate " + src + " --ids --temperature 0 --max-tokens 32 --prompt '" +
                      prompt_ids() + "'");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    return r.out;
  }
  std::string py_greedy(const std::string& dir);
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The last line the reference printed (transformers may warn before it).
std::string last_line(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

double py_loss(Fixture& f, const std::string& dir) {
  return std::stod(last_line(f.py("loss " + dir + " " + f.window + " 64")));
}

std::string Fixture::py_greedy(const std::string& dir) {
  std::string prompt = t.write("prompt.txt", "the quick brown fox");
  return last_line(py("greedy " + dir + " " + prompt + " 32"));
}

}  // namespace

TEST_CASE(
    "GPT-2 and Llama saved by transformers, imported: the same loss within 1e-5 and the same 32 "
    "greedy tokens") {
  Fixture f;
  for (const char* kind : {"gpt2", "llama"}) {
    const std::string hf = (f.t.path / kind).string(),
                      ck = (f.t.path / (std::string(kind) + "-ckpt")).string();
    f.py(std::string("make ") + kind + " " + hf);
    auto imp = run_loom("ckpt import " + hf + " --out " + ck);
    INFO(imp.out);
    REQUIRE(imp.rc == 0);
    const std::string model = slurp(fs::path(ck) / "model.toml");
    const double want = py_loss(f, hf);
    for (const std::string& src : {ck, hf}) {  // the imported checkpoint, and the folder itself
      const double got = f.loom_loss(model, src, std::string(kind) + (src == ck ? "-ck" : "-hf"));
      INFO(kind << " from " << src << ": Loom " << got << ", PyTorch " << want);
      CHECK(std::abs(got - want) <= 1e-5 * std::abs(want));
    }
    CHECK(last_line(f.loom_greedy(ck)) == f.py_greedy(hf));
  }
}

TEST_CASE(
    "a Llama saved in bf16 over several safetensors files (an index) imports with PyTorch's loss") {
  Fixture f;
  const std::string hf = (f.t.path / "sharded").string();
  f.py("make llama " + hf + " bf16-sharded");
  REQUIRE(fs::exists(fs::path(hf) / "model.safetensors.index.json"));
  const std::string ck = (f.t.path / "ck").string();
  auto imp = run_loom("ckpt import " + hf + " --out " + ck);
  INFO(imp.out);
  REQUIRE(imp.rc == 0);
  // PyTorch upcasts the same bf16 values to fp32, as Loom does.
  const double want = py_loss(f, hf),
               got = f.loom_loss(slurp(fs::path(ck) / "model.toml"), ck, "sharded");
  INFO("Loom " << got << ", PyTorch " << want);
  CHECK(std::abs(got - want) <= 1e-5 * std::abs(want));
}

TEST_CASE("an llm.c model file (version 3) gives PyTorch's loss and greedy tokens") {
  Fixture f;
  const std::string hf = (f.t.path / "gpt2").string(), bin = (f.t.path / "gpt2_tiny.bin").string();
  f.py("make gpt2 " + hf);
  f.py("llmc " + hf + " " + bin);
  const std::string ck = (f.t.path / "ck").string();
  REQUIRE(run_loom("ckpt import " + bin + " --out " + ck).rc == 0);
  const double want = py_loss(f, hf),
               got = f.loom_loss(slurp(fs::path(ck) / "model.toml"), bin, "llmc");
  INFO("Loom " << got << ", PyTorch " << want);
  CHECK(std::abs(got - want) <= 1e-5 * std::abs(want));
  CHECK(last_line(f.loom_greedy(bin)) == f.py_greedy(hf));
}

TEST_CASE(
    "a Loom-trained llama-tiny exported with --format hf loads in transformers with Loom's loss") {
  Fixture f;
  const std::string model = "[model]\npreset = \"llama-tiny\"\nseq_len = 64\n";
  const std::string cfg = f.t.write("train.toml", f.base + model);
  const std::string ck = (f.t.path / "ckpt").string();
  auto train = run_loom(
      "train " + cfg + " --run-dir " + (f.t.path / "run").string() +
      " --set train.steps=5 --set train.lr=3e-3 --set plugins.ckpt=sync --set checkpoint.every=5"
      " --set checkpoint.dir=" +
      ck);
  INFO(train.out);
  REQUIRE(train.rc == 0);
  const std::string hf = (f.t.path / "hf").string();
  auto exp = run_loom("ckpt export " + ck + " --format hf --out " + hf);
  INFO(exp.out);
  REQUIRE(exp.rc == 0);
  CHECK(fs::exists(fs::path(hf) / "config.json"));
  const double loom = f.loom_loss(model, ck, "trained"), torch = py_loss(f, hf);
  INFO("Loom " << loom << ", PyTorch " << torch);
  CHECK(std::abs(loom - torch) <= 1e-5 * std::abs(torch));
}

TEST_CASE("broken weights fail naming the file and the tensor, and write nothing") {
  Fixture f;
  const std::string hf = (f.t.path / "llama").string();
  f.py("make llama " + hf);
  const fs::path st = fs::path(hf) / "model.safetensors";
  auto import_to = [&](const std::string& src, const std::string& out) {
    auto r = run_loom("ckpt import " + src + " --out " + (f.t.path / out).string());
    CHECK(!fs::exists(f.t.path / out));  // nothing written
    return r;
  };
  {  // a header length past the end of the file
    fs::copy(hf, f.t.path / "long", fs::copy_options::recursive);
    std::fstream s(f.t.path / "long" / "model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    const unsigned char huge[8] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0};
    s.write(reinterpret_cast<const char*>(huge), 8);
    s.close();
    auto r = import_to((f.t.path / "long").string(), "o1");
    CHECK(r.rc == 1);
    CHECK(has(r.out, "long/model.safetensors': header length 16777215 is past the end"));
  }
  {  // a tensor missing, and one of another shape: config.json says otherwise
    fs::copy(hf, f.t.path / "shape", fs::copy_options::recursive);
    std::string cfg = slurp(fs::path(hf) / "config.json");
    const std::string from = "\"intermediate_size\": 96", to = "\"intermediate_size\": 80";
    REQUIRE(cfg.find(from) != std::string::npos);
    cfg.replace(cfg.find(from), from.size(), to);
    std::ofstream(f.t.path / "shape" / "config.json") << cfg;
    auto r = import_to((f.t.path / "shape").string(), "o2");
    CHECK(r.rc == 1);
    CHECK(has(r.out,
              "model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape 96x64, "
              "config.json implies 80x64"));
    std::string layers = slurp(fs::path(hf) / "config.json");
    const std::string l2 = "\"num_hidden_layers\": 2";
    REQUIRE(layers.find(l2) != std::string::npos);
    layers.replace(layers.find(l2), l2.size(), "\"num_hidden_layers\": 3");
    std::ofstream(f.t.path / "shape" / "config.json") << layers;
    auto missing = import_to((f.t.path / "shape").string(), "o3");
    CHECK(missing.rc == 1);
    CHECK(has(missing.out, "tensor model.layers.2.input_layernorm.weight is missing"));
  }
  {  // an llm.c file of a version Loom does not read
    const std::string bin = (f.t.path / "v9.bin").string();
    f.py("make gpt2 " + (f.t.path / "g").string());
    f.py("llmc " + (f.t.path / "g").string() + " " + bin);
    std::fstream s(bin, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(4);
    const int32_t nine = 9;
    s.write(reinterpret_cast<const char*>(&nine), 4);
    s.close();
    auto r = import_to(bin, "o4");
    CHECK(r.rc == 1);
    CHECK(has(r.out, "v9.bin': version 9 is not supported (3: fp32, 5: bf16)"));
  }
  auto beyond = run_loom("generate " + hf + " --ids --prompt '1 2 300'");
  CHECK(beyond.rc == 2);
  CHECK(has(beyond.out, "prompt token 300 is outside the vocabulary (256)"));
}

TEST_CASE(
    "a sliding window caps seq_len at import, and a RoPE model with MLP biases is not exported") {
  Fixture f;
  // A sliding window shorter than the context is exact when seq_len stops at the window.
  const std::string mistral = (f.t.path / "mistral").string();
  f.py("make mistral " + mistral);
  auto m = run_loom("ckpt import " + mistral + " --out " + (f.t.path / "ck-mistral").string());
  INFO(m.out);
  CHECK(m.rc == 0);
  CHECK(has(m.out, "sliding_window 48: seq_len is capped at it"));
  CHECK(has(slurp(f.t.path / "ck-mistral" / "model.toml"), "seq_len = 48\n"));
  CHECK(has(slurp(f.t.path / "ck-mistral" / "model.toml"), "sliding_window = 48\n"));
  // A longer context than the window is refused: it would not be this model's attention.
  const std::string longer =
      f.t.write("longer.toml", f.base + slurp(f.t.path / "ck-mistral" / "model.toml"));
  auto l = run_loom("train " + longer + " --set model.seq_len=64 --set model.init_from=" +
                    (f.t.path / "ck-mistral").string());
  CHECK(l.rc == 2);
  CHECK(has(l.out, "[model] seq_len = 64 is more than sliding_window = 48"));

  // A Llama-shaped model with biases everywhere is not exported without them.
  const std::string cfg =
      f.t.write("biased.toml", f.base +
                                   "[model]\npreset = \"llama-tiny\"\nbias = true\nseq_len = 64\n"
                                   "[checkpoint]\nevery = 1\n[plugins]\nckpt = \"sync\"\n");
  REQUIRE(run_loom("train " + cfg + " --run-dir " + (f.t.path / "biased").string()).rc == 0);
  auto e = run_loom("ckpt export " + (f.t.path / "biased").string() + " --format hf --out " +
                    (f.t.path / "biased-hf").string());
  CHECK(e.rc == 1);
  CHECK(has(e.out,
            "exporting a RoPE model with [model] bias = true is not supported: no Hugging Face "
            "Llama-family class"));
  CHECK_FALSE(fs::exists(f.t.path / "biased-hf" / "config.json"));
}
