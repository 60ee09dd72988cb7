// The `loom` binary end to end: output and exit codes for good and bad input.
#include <doctest/doctest.h>

#include <filesystem>
#include <utility>

#include "support/process.hpp"

using loom::test::run_loom;
using loom::test::TempDir;

namespace {
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("version and help") {
  auto v = run_loom("version");
  CHECK(v.rc == 0);
  CHECK(has(v.out, "plugin ABI 3.0"));
  CHECK((has(v.out, "CPU GEMM: oneDNN ") || has(v.out, "CPU GEMM: OpenBLAS ")));
  auto h = run_loom("--help");
  CHECK(h.rc == 0);
  CHECK(has(h.out, "config check FILE"));
  auto none = run_loom("");
  CHECK(none.rc == 2);
  auto unknown = run_loom("trian x.toml");
  CHECK(unknown.rc == 2);
  CHECK(has(unknown.out, "unknown command 'trian'"));
  auto sub = run_loom("config --help");
  CHECK(sub.rc == 0);
  CHECK(has(sub.out, "--set"));
}

TEST_CASE("loom plugins lists name, kind, versions and path, --json too") {
  auto r = run_loom("plugins");
  CHECK(r.rc == 0);
  CHECK(has(r.out, "fp32"));
  CHECK(has(r.out, "libloom-precision-fp32.so"));
  CHECK(has(r.out, "skipped:"));
  auto j = run_loom("plugins --json");
  CHECK(j.rc == 0);
  CHECK(has(j.out, "\"name\": \"fp32\", \"kind\": \"precision\""));
  CHECK(has(j.out, "\"abi\": \"3.0\""));  // what the SDK stamps into a plugin built now
}

TEST_CASE("loom plugins info prints options with types, defaults and help") {
  auto r = run_loom("plugins info options");
  CHECK(r.rc == 0);
  CHECK(has(r.out, "window"));
  CHECK(has(r.out, "integer"));
  CHECK(has(r.out, "an integer"));
  auto j = run_loom("plugins info options --json");
  CHECK(has(j.out, "{\"name\": \"growth\", \"type\": \"float\", \"default\": \"2.0\""));
  auto missing = run_loom("plugins info fp33");
  CHECK(missing.rc == 2);
  CHECK(has(missing.out, "did you mean 'fp32'?"));
}

TEST_CASE("config errors exit 2 with file:line:col") {
  TempDir t;
  auto syntax = run_loom("config check " + t.write("a.toml", "[run]\nseed = \n"));
  CHECK(syntax.rc == 2);
  CHECK(has(syntax.out, "a.toml:2:8:"));
  auto typo = run_loom("config check " + t.write("b.toml", "[run]\nlog_evry = 3\n"));
  CHECK(typo.rc == 2);
  CHECK(has(typo.out, "b.toml:2:1: unknown key 'log_evry' in [run]; did you mean 'log_every'?"));
  auto missing_file = run_loom("config check " + (t.path / "nope.toml").string());
  CHECK(missing_file.rc == 2);
  CHECK(has(missing_file.out, "cannot read config file"));
}

TEST_CASE("config check and show resolve plugins and fill defaults") {
  TempDir t;
  std::string f = t.write("c.toml", "[run]\nseed = 5\n[plugins]\nprecision = \"fp32\"\n");
  auto check = run_loom("config check " + f +
                        " --no-data");  // data/fortunes is the demo's, not prepared here
  CHECK(check.rc == 0);
  CHECK(has(check.out, "ok; precision = fp32"));
  auto data = run_loom("config check " + f);  // checked against its data, as train would
  CHECK(data.rc == 2);
  CHECK(has(data.out,
            "[data] dir = \"data/fortunes\" does not exist; make it with: loom data prepare"));
  auto show = run_loom("config show " + f + " --set run.seed=11 --set run.threads=2");
  CHECK(show.rc == 0);
  CHECK(has(show.out, "seed = 11"));
  CHECK(has(show.out, "threads = 2"));
  CHECK(has(show.out, "log_every = 1"));
  auto bad_set = run_loom("config show " + f + " --set run.threads=lots");
  CHECK(bad_set.rc == 2);
  CHECK(has(bad_set.out, "--set run.threads=lots: [run] threads: expected integer"));
}

TEST_CASE("plugin failures at the command line") {
  TempDir t;
  auto not_found =
      run_loom("config check " + t.write("a.toml", "[plugins]\nprecision = \"bf61\"\n"));
  CHECK(not_found.rc == 2);
  CHECK(has(not_found.out, "a.toml:2:13: [plugins] precision: no precision plugin named 'bf61'"));
  CHECK(has(not_found.out, "searched:"));
  CHECK(has(not_found.out, "found:"));
  auto abi = run_loom("config check " + t.write("b.toml", "[plugins]\nprecision = \"future\"\n"));
  CHECK(abi.rc == 1);
  CHECK(has(abi.out, "ABI 99.3; this runtime speaks ABI 3.0"));
  auto junk =
      run_loom("config check " + t.write("c.toml", "[plugins]\nprecision = \"notaplugin\"\n"));
  CHECK(junk.rc == 1);
  CHECK(has(junk.out, "is not a Loom plugin"));
}

TEST_CASE("loom schedule prints a pipeline's timeline, its bubble and memory, bad shapes exit 2") {
  auto f = run_loom("schedule --pp 4 --microbatches 8 --schedule 1f1b");
  CHECK(f.rc == 0);
  CHECK(has(f.out, "rank 0  F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 F4 B1 B1"));
  CHECK(has(f.out, "rank 3  .  .  .  F0 B0 B0 F1 B1 B1 F2 B2 B2"));
  CHECK(has(f.out,
            "bubble 27.3% of rank-time, 9 units idle per rank (theory without split backwards "
            "(p-1)/(v m + p-1) = 27.3%"));
  CHECK(has(f.out, "per rank: 4 3 2 1"));
  auto z = run_loom("schedule --pp 4 --microbatches 8 --schedule zbh1");
  CHECK(z.rc == 0);
  CHECK(has(z.out, "rank 0  F0 F1 F2 F3 .  .  .  B0 W0 F4 B1 W1"));
  CHECK(has(z.out, "rank 3  .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 W0 F4"));
  CHECK(has(z.out, "step time: 27 units; bubble 11.1% of rank-time, 3 units idle per rank"));
  CHECK(has(z.out, "per rank: 4 3 2 1"));
  auto g = run_loom("schedule --pp 4 --microbatches 8 --schedule gpipe --backward-cost 1");
  CHECK(g.rc == 0);
  CHECK(has(g.out, "per rank: 8 8 8 8"));
  auto i = run_loom("schedule --pp 4 --microbatches 8 --schedule interleaved --chunks 2");
  CHECK(i.rc == 0);
  CHECK(has(i.out, "F0.0 F1.0 F2.0 F3.0 F0.1"));
  CHECK(has(i.out, "= 15.8%"));
  auto odd = run_loom("schedule --pp 4 --microbatches 6 --schedule interleaved");
  CHECK(odd.rc == 2);
  CHECK(has(odd.out, "use 8 micro-batches, or the 1f1b schedule"));
  auto typo = run_loom("schedule --pp 4 --microbatches 8 --schedule 1fb1");
  CHECK(typo.rc == 2);
  CHECK(has(typo.out, "did you mean '1f1b'"));
}

TEST_CASE(
    "loom model info reports parameters, FLOPs per token and ZeRO state bytes of a preset or a "
    "file") {
  auto llama = run_loom("model info llama3-8b");
  CHECK(llama.rc == 0);
  CHECK(has(llama.out, "32 heads (8 kv heads), rope, rmsnorm, swiglu, d_ff 14336, no bias"));
  CHECK(has(llama.out, "8,030,261,248"));
  CHECK(has(llama.out, "zero3    2.00 B/param"));
  auto mixtral = run_loom("model info mixtral-8x7b --json");
  CHECK(mixtral.rc == 0);
  CHECK(has(mixtral.out, "\"params\": 46702792704"));
  CHECK(has(mixtral.out, "\"active_params\": 12879925248"));
  auto shorter = run_loom("model info llama3-8b --set model.seq_len=2048 --dp 64");
  CHECK(has(shorter.out, "T = 2048"));
  CHECK(has(shorter.out, "dp = 64"));
  auto typo = run_loom("model info llama3-8bb");
  CHECK(typo.rc == 2);
  CHECK(has(typo.out, "did you mean 'llama3-8b'"));
  auto bad = run_loom("model info llama3-8b --set model.n_kv_head=5");
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "n_kv_head = 5 does not divide n_head = 32"));
  TempDir t;
  auto show = run_loom("config show " + t.write("m.toml", "[model]\npreset = \"llama-tiny\"\n"));
  CHECK(show.rc == 0);
  CHECK(has(show.out, "# model: 4 layers, d_model 64, 4 heads (2 kv heads)"));
  CHECK(has(show.out, "n_kv_head = 2"));
}

TEST_CASE("a truncated plugin library on the search path is skipped with a message, not a SIGBUS") {
  TempDir t;
  const auto lib = t.path / "libloom-parallel-cut.so";
  std::filesystem::copy_file(
      std::filesystem::path(LOOM_BINARY_DIR) / "lib/loom/plugins/libloom-parallel-sp.so", lib);
  std::filesystem::resize_file(lib, std::filesystem::file_size(lib) / 2);
  auto list = loom::test::sh("LOOM_PLUGIN_PATH=" + t.path.string() + " " LOOM_BIN " plugins");
  INFO(list.out);
  CHECK(list.rc == 0);
  CHECK(has(list.out, "libloom-parallel-cut.so': truncated ELF: the file has"));
  CHECK(has(list.out, "ddp"));  // the others are still listed
  auto named = loom::test::sh(std::string(LOOM_BIN) + " plugins info " + lib.string());
  CHECK(named.rc != 0);
  CHECK(has(named.out, "truncated ELF"));
}

TEST_CASE(
    "loom schedule caps the micro-batch count with the bubble formula instead of running for "
    "minutes") {
  auto big = run_loom("schedule --pp 4 --microbatches 1000000 --schedule 1f1b");
  CHECK(big.rc == 2);
  CHECK(has(big.out, "--microbatches 1000000 is more than loom schedule draws (4096)"));
  CHECK(run_loom("schedule --pp 4 --microbatches 4096 --schedule 1f1b").rc == 0);
}

TEST_CASE(
    "loom bench comm takes a config and --set for its plugin, and refuses --nproc 0 or an unknown "
    "plugin before ranks start") {
  auto zero = run_loom("bench comm --nproc 0");
  CHECK(zero.rc == 2);
  CHECK(has(zero.out, "--nproc must be a number from 1 to 4096, got 0"));
  auto unknown = run_loom("bench comm --nproc 2 --comm nosuch --max-bytes 1K");
  CHECK(unknown.rc == 2);
  CHECK(has(unknown.out, "nosuch"));
  CHECK(!has(unknown.out, "[rank"));  // refused by the launcher itself
  TempDir t;
  const std::string cfg =
      t.write("b.toml", "[plugins]\ncomm = \"gloo\"\n[plugins.gloo]\niface = \"lo\"\n");
  auto ok = run_loom("bench comm --nproc 2 --config " + cfg +
                     " --min-bytes 1K --max-bytes 4K --iters 2 --warmup 1");
  INFO(ok.out);
  CHECK(ok.rc == 0);
  auto bad_option = run_loom("bench comm --nproc 2 --config " + cfg +
                             " --set plugins.gloo.ifac=lo --max-bytes 1K");
  CHECK(bad_option.rc == 2);
  CHECK(has(bad_option.out, "did you mean 'iface'"));
}

TEST_CASE(
    "messages name what the user typed: --set arguments, missing positional arguments, directories "
    "given as files") {
  TempDir t;
  const std::string cfg = t.write("c.toml", "[train]\nsteps = 1\n");
  auto key = run_loom("config check " + cfg + " --set train.lrr=1");
  CHECK(key.rc == 2);
  CHECK(has(key.out, "--set train.lrr=1: unknown key 'lrr' in [train]; did you mean 'lr'?"));
  CHECK_FALSE(has(key.out, "<input>"));
  auto section = run_loom("config check " + cfg + " --set nosuch.x=1");
  CHECK(has(section.out, "--set nosuch.x=1: unknown section [nosuch]"));
  // Positional arguments have internal option names; the message uses the synopsis' words.
  for (auto [cmd, word] : {std::pair{"train", "missing FILE"},
                           {"ckpt verify", "missing DIR"},
                           {"generate", "missing SRC"},
                           {"launch -n 2", "missing PROGRAM"}}) {
    auto r = run_loom(cmd);
    INFO(cmd);
    CHECK(r.rc == 2);
    CHECK(has(r.out, word));
    CHECK_FALSE(has(r.out, "the option '--"));
  }
  std::filesystem::create_directory(t.path / "adir");
  const std::string dir = (t.path / "adir").string();
  auto text = run_loom("data prepare --text " + dir + " --out " + (t.path / "o").string());
  CHECK(text.rc == 1);
  CHECK(has(text.out, "cannot read input '" + dir + "': it is a directory"));
  const std::string txt = t.write("t.txt", "some text\n");
  auto tok = run_loom("data prepare --text " + txt + " --tokenizer " + dir + " --out " +
                      (t.path / "o").string());
  CHECK(has(tok.out, "cannot read tokenizer '" + dir + "': it is a directory"));
  auto missing = run_loom("data prepare --text " + (t.path / "none.txt").string() + " --out " +
                          (t.path / "o").string());
  CHECK(has(missing.out, "none.txt': No such file or directory"));
  for (const auto& r : {text, tok, missing}) CHECK_FALSE(has(r.out, "basic_filebuf"));
}

TEST_CASE(
    "loom plugins info lists the optional entries a plugin provides and the services it uses") {
  auto ruled = run_loom("plugins info ruled");
  CHECK(has(ruled.out, "  provides:  option rules, validate hook\n"));
  CHECK(has(ruled.out, "  uses:      none\n"));
  auto ddp = run_loom("plugins info ddp");
  CHECK(has(ddp.out, "  provides:  cost entry\n"));
  auto fp16 = run_loom("plugins info fp16");
  CHECK(has(fp16.out, "  provides:  state save and load\n"));
  auto zero3 = run_loom("plugins info zero3");
  CHECK(has(zero3.out, "  declares:  experts, pipeline, sharded state, device state\n"));
  auto counting = run_loom("plugins info counting");
  CHECK(has(counting.out, "  uses:      loom.plugins, loom.trace, loom.placement\n"));
  auto fp32 = run_loom("plugins info fp32");
  CHECK(has(fp32.out, "  provides:  no optional entries\n"));
  auto old = run_loom("plugins info ddp12");  // built against ABI 1.2
  CHECK(has(old.out, "  abi:       1.2 (loaded through the ABI 1 adapter)\n"));
  CHECK(has(old.out, "  provides:  no optional entries (it was built against plugin ABI 1.2"));
  CHECK(has(old.out, "  uses:      any (ABI 1 plugins declare none)\n"));
  auto json = run_loom("plugins info counting --json");
  CHECK(has(json.out,
            "\"provides\": [\"validate hook\"], \"services\": [\"loom.plugins\", \"loom.trace\", "
            "\"loom.placement\"], \"adapted\": false"));
}
