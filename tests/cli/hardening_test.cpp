// Inputs from the fault battery that used to crash or hang: each now ends at once with a named
// error (exit 2), or works.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "support/process.hpp"

using loom::test::run_loom;
using loom::test::sh;
using loom::test::TempDir;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The command's result, and that it took less than `seconds` (a hang is a failure, not a wait).
loom::test::Result quickly(const std::string& args, double seconds = 60) {
  const auto t0 = std::chrono::steady_clock::now();
  loom::test::Result r = run_loom(args);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  return r;
}

// A Hugging Face folder: `config` as config.json (a Llama of 2 layers, 64 wide, unless it says
// otherwise) and an empty but well-formed model.safetensors (an 8-byte little-endian header
// size, then "{}").
std::filesystem::path hf_folder(const TempDir& t, const std::string& fields) {
  std::filesystem::create_directories(t.path / "hf");
  t.write("hf/config.json", R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "intermediate_size": 128, "vocab_size": 256, )" +
                                fields + "}");
  t.write("hf/model.safetensors", std::string("\x02\0\0\0\0\0\0\0{}", 10));
  return t.path / "hf";
}

// A tiny model over a few words of prepared text in `t`: the config's path. `train` is the
// [train] section's extra keys.
std::string tiny_job(const TempDir& t, const std::string& train = "steps = 1") {
  t.write("c.txt", "a few words of text to train on, repeated a few words of text to train on\n");
  REQUIRE(run_loom("data prepare --val-fraction 0 --text " + (t.path / "c.txt").string() +
                   " --out " + (t.path / "d").string())
              .rc == 0);
  return t.write("f.toml", "[model]\npreset = \"tiny\"\nseq_len = 8\n[data]\ndir = \"" +
                               (t.path / "d").string() + "\"\n[train]\n" + train +
                               "\nglobal_batch = 1\neval_every = 0\n");
}

}  // namespace

TEST_CASE("loom schedule refuses shapes it cannot draw instead of growing until bad_alloc") {
  for (const char* shape : {"--pp 2147483647 --microbatches 8", "--pp 100000 --microbatches 8",
                            "--pp 4 --microbatches 8 --schedule interleaved --chunks 100000",
                            "--pp 4096 --microbatches 4096"}) {
    auto r = quickly(std::string("schedule ") + shape);
    INFO(shape << ": " << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, "loom schedule draws"));
  }
  auto nan = quickly("schedule --pp 2 --microbatches 4 --backward-cost nan");
  CHECK(nan.rc == 2);
  CHECK(has(nan.out, "--backward-cost must be a positive number"));
}

TEST_CASE("loom plan with more nodes than an int holds says how many the cluster has") {
  TempDir t;
  const std::string cfg = t.write("c.toml", "[model]\npreset = \"llama-tiny\"\n");
  auto r = quickly("plan " + cfg +
                   " --cluster " LOOM_SOURCE_DIR "/clusters/h200.toml --nodes 300000000");
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK(has(r.out, "2400000000 devices asked, but cluster 'h200'"));
}

TEST_CASE("a FIFO named like a shard or a plugin is refused, not read until the end of time") {
  TempDir t;
  const std::string cfg = tiny_job(t);
  REQUIRE(::mkfifo((t.path / "d" / "train_999999.bin").c_str(), 0644) == 0);
  auto train = quickly("train " + cfg + " --run-dir " + (t.path / "r").string());
  INFO(train.out);
  CHECK(train.rc != 0);
  CHECK(has(train.out, "train_999999.bin' is not a regular file"));
  std::filesystem::create_directories(t.path / "plugins");
  REQUIRE(::mkfifo((t.path / "plugins" / "libloom-x.so").c_str(), 0644) == 0);
  auto listed =
      sh("LOOM_PLUGIN_PATH=" + (t.path / "plugins").string() + " timeout 20 " LOOM_BIN " plugins");
  CHECK(listed.rc == 0);
  CHECK(has(listed.out, "ddp"));
}

TEST_CASE("loom launch finds a bare program name in PATH") {
  auto r = quickly("launch -n 2 -- sh -c 'echo rank $RANK'");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "rank 1"));
}

TEST_CASE("an import whose shape has a zero in it is refused by name, not a division by zero") {
  TempDir t;
  auto hf = quickly("ckpt import " + hf_folder(t, R"("num_attention_heads": 0)").string() +
                    " --out " + (t.path / "out").string());
  INFO(hf.out);
  CHECK((hf.rc == 1 || hf.rc == 2));
  CHECK(has(hf.out, "\"num_attention_heads\" = 0 must be at least 1"));
  // llm.c: magic, version 3, max_seq_len 8, vocab 16, num_layers 0, heads 2, channels 4, padded 64.
  std::string header(1024, '\0');
  const int32_t h[8] = {20240326, 3, 8, 16, 0, 2, 4, 64};
  std::memcpy(header.data(), h, sizeof h);
  t.write("m.bin", header);
  auto llmc = quickly("ckpt import " + (t.path / "m.bin").string() + " --out " +
                      (t.path / "out2").string());
  INFO(llmc.out);
  CHECK((llmc.rc == 1 || llmc.rc == 2));
  CHECK(has(llmc.out, "\"num_layers\" = 0 must be at least 1"));
}

TEST_CASE("a byte count with a unit loom does not know is refused, not read as its digits") {
  for (const char* bad : {"1T", "8x", "1.5M", "K", "-8"}) {
    auto r = quickly(std::string("bench comm --nproc 1 --min-bytes ") + bad + " --max-bytes 1G");
    INFO(bad << ": " << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, "cannot read byte count"));
  }
}

TEST_CASE("a config.json or an index with a value of the wrong type names the file and the key") {
  TempDir t;
  auto r = quickly("ckpt import " +
                   hf_folder(t, R"("num_attention_heads": 4, "rms_norm_eps": "tiny")").string() +
                   " --out " + (t.path / "out").string());
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "config.json: \"rms_norm_eps\" has the wrong type: \"tiny\""));
  CHECK_FALSE(has(r.out, "json.exception"));
  std::filesystem::remove(t.path / "hf" / "model.safetensors");
  t.write("hf/model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": 7}})");
  auto index =
      quickly("ckpt import " + (t.path / "hf").string() + " --out " + (t.path / "out").string());
  INFO(index.out);
  CHECK(has(index.out, "weight_map[\"model.norm.weight\"] must be a file name, got 7"));
  CHECK_FALSE(has(index.out, "json.exception"));
}

TEST_CASE("config check refuses what train would refuse at start-up, with the same message") {
  TempDir t;
  const std::string cfg = t.write(
      "c.toml", "[model]\npreset = \"llama-tiny\"\n[data]\ndir = \"" + t.path.string() + "\"\n");
  auto check = quickly("config check " + cfg + " --set parallel.tp=2");
  auto train =
      quickly("train " + cfg + " --set parallel.tp=2 --run-dir " + (t.path / "r").string());
  INFO(check.out << train.out);
  CHECK(check.rc == 2);
  CHECK(train.rc == 2);
  const std::string why =
      "tp x pp x ep x cp = 2 does not divide the world size 1 (set [parallel] nproc";
  CHECK(has(check.out, why));
  CHECK(has(train.out, why));
  auto ok =
      quickly("config check " + cfg + " --set parallel.tp=2 --set parallel.nproc=2 --no-data");
  CHECK(ok.rc == 0);
  CHECK(has(ok.out, "tensor = tp"));
  // With its data checked, as train checks it: the directory holds no shards.
  auto data = quickly("config check " + cfg + " --set parallel.tp=2 --set parallel.nproc=2");
  auto trained = quickly("train " + cfg + " --set parallel.tp=2 --set parallel.nproc=2 --run-dir " +
                         (t.path / "r2").string());
  INFO(data.out << trained.out);
  CHECK(data.rc == 2);
  CHECK(trained.rc == 2);
  for (const auto* out : {&data.out, &trained.out})
    CHECK(has(*out, "no train shards (*train*.bin) in '" + t.path.string() + "'"));
}

namespace {

// A copy of `library` whose dynamic section points its string and symbol tables at an address
// nothing is mapped at: dlopen of it faults inside the dynamic loader.
void write_damaged_copy(const std::filesystem::path& library, const std::filesystem::path& out) {
  std::string b = loom::test::read_text(library);
  auto u16 = [&](size_t at) {
    uint16_t v;
    std::memcpy(&v, b.data() + at, 2);
    return static_cast<size_t>(v);
  };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  const size_t phoff = u64(32), phent = u16(54), phnum = u16(56);
  for (size_t i = 0; i < phnum; ++i) {
    const size_t ph = phoff + i * phent;
    if (u64(ph) % (1ull << 32) != 2) continue;  // p_type PT_DYNAMIC
    for (uint64_t at = u64(ph + 8), end = at + u64(ph + 32); at + 16 <= end; at += 16) {
      const uint64_t tag = u64(at), nowhere = 0x7ffdeadbeef0;
      if (tag == 5 || tag == 6)
        std::memcpy(b.data() + at + 8, &nowhere, 8);  // DT_STRTAB, DT_SYMTAB
    }
  }
  std::ofstream(out, std::ios::binary) << b;
}

}  // namespace

TEST_CASE(
    "plugin libraries that crash or lie are probed apart, named, and never loaded by a run that "
    "does not name them") {
  TempDir t;
  std::filesystem::copy(LOOM_BROKEN_PLUGIN_DIR, t.path / "plugins");
  write_damaged_copy(LOOM_BINARY_DIR "/lib/loom/plugins/libloom-precision-fp32.so",
                     t.path / "plugins" / "libloom-precision-damaged.so");
  const std::string env = "LOOM_PLUGIN_PATH=" + (t.path / "plugins").string() + " timeout 60 ";
  auto listed = sh(env + LOOM_BIN " plugins");
  INFO(listed.out);
  CHECK(listed.rc == 0);
  CHECK(has(listed.out, "libloom-precision-damaged.so' crashed with SIGSEGV while it was probed"));
  CHECK(has(listed.out, "libloom-precision-faults.so' crashed with SIGSEGV"));
  CHECK(has(listed.out, "its entry reports 1 plugins and a NULL list"));
  CHECK(has(listed.out, "plugin 'fp32' in '" +
                            (t.path / "plugins" / "libloom-precision-impostor.so").string() +
                            "' is not exact and leaves add_site or site_format NULL"));
  CHECK(has(listed.out, "fp32           precision"));

  // A run searches that directory first, names none of its plugins, and trains.
  const std::string cfg = tiny_job(t, "steps = 2");
  auto train = sh(env + LOOM_BIN " train " + cfg + " --run-dir " + (t.path / "r").string());
  INFO(train.out);
  CHECK(train.rc == 0);
  CHECK(has(train.out, "step     2/2"));

  // Named by path, the impostor is refused with its reason.
  auto named = sh(env + LOOM_BIN " train " + cfg + " --run-dir " + (t.path / "r2").string() +
                  " --set plugins.precision=" +
                  (t.path / "plugins" / "libloom-precision-impostor.so").string());
  CHECK(named.rc != 0);
  CHECK(has(named.out, "is not exact and leaves add_site or site_format NULL"));
}

TEST_CASE("a number too big for its type is refused as a number, not read as a string") {
  TempDir t;
  const std::string cfg = t.write("c.toml", "[model]\npreset = \"tiny\"\n");
  auto big = quickly("config check " + cfg + " --set train.steps=99999999999999999999");
  CHECK(big.rc == 2);
  CHECK(has(big.out,
            "--set train.steps=99999999999999999999: Error while parsing decimal integer: "
            "'99999999999999999999' is not "
            "representable in 64 bits"));
  auto huge = quickly("config check " + cfg + " --set train.lr=1e999");
  CHECK(huge.rc == 2);
  CHECK(has(huge.out, "'1e999' could not be interpreted as a value"));
  CHECK_FALSE(has(huge.out, "got string"));
}

TEST_CASE(
    "a wrapper whose inner plugin is of another kind fails config check, and the wrapper works "
    "under bench comm") {
  TempDir t;
  const std::string cfg =
      t.write("w.toml",
              "[model]\npreset = \"tiny\"\n[parallel]\nnproc = 2\n[plugins]\ncomm = \"counting\"\n"
              "[plugins.counting]\ninner = \"ddp\"\n");
  auto check = quickly("config check " + cfg);
  INFO(check.out);
  CHECK(check.rc == 2);
  CHECK(has(check.out,
            "[plugins.counting] inner = \"ddp\": 'ddp' is a parallel plugin, not a comm plugin"));
  CHECK(quickly("config check " + cfg + " --set plugins.counting.inner=gloo --no-data").rc == 0);
  auto bench = quickly("bench comm --comm counting --max-bytes 1K --iters 2 --warmup 1", 60);
  INFO(bench.out);
  CHECK(bench.rc == 0);
  CHECK(has(bench.out, "collectives over gloo"));
}

TEST_CASE(
    "loom train spins briefly at OpenMP barriers unless GOMP_SPINCOUNT is set, keeping its pid") {
  TempDir t;
  const std::string cfg = tiny_job(t, "steps = 1000000");
  for (const auto& [env, want] : std::vector<std::pair<std::string, std::string>>{
           {"env -u GOMP_SPINCOUNT ", "GOMP_SPINCOUNT=1000"},  // ctest sets it for the suite
           {"GOMP_SPINCOUNT=5 ", "GOMP_SPINCOUNT=5"}}) {
    const std::string dir = (t.path / ("r" + want.substr(15))).string();
    auto started = sh("(" + env + LOOM_BIN " train " + cfg + " --run-dir " + dir +
                      " > /dev/null 2>&1 & echo $!)");
    const std::string pid = started.out.substr(0, started.out.find('\n'));
    for (int i = 0; i < 100 && !std::filesystem::exists(dir + "/metrics.jsonl"); ++i)
      sh("sleep 0.1");
    const std::string environ = sh("tr '\\0' '\\n' < /proc/" + pid + "/environ").out;
    sh("kill " + pid + "; while kill -0 " + pid + " 2>/dev/null; do sleep 0.1; done");
    INFO(environ);
    CHECK(has(environ, want + "\n"));
  }
}
