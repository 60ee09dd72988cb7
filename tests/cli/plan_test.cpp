// `loom plan` end to end: the ranked table, JSON, --fix and --explain, the published runs, and
// bad input (a broken cluster file, more devices than the cluster has, a layout that cannot exist).
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/process.hpp"

using loom::test::run_loom;
using loom::test::TempDir;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kClusters = std::string(LOOM_SOURCE_DIR) + "/clusters/";

std::string llama8b(const TempDir& t) {
  return t.write("l.toml",
                 "[model]\npreset = \"llama3-8b\"\n[train]\nglobal_batch = "
                 "64\n[plugins]\nprecision = \"bf16\"\n");
}

}  // namespace

TEST_CASE("loom plan ranks the layouts of one H100 node, as a table and as JSON") {
  TempDir t;
  const std::string cfg = llama8b(t);
  auto table = run_loom("plan " + cfg + " --cluster " + kClusters + "h100-sxm.toml --top 3");
  INFO(table.out);
  REQUIRE(table.rc == 0);
  CHECK(has(table.out, "layouts costed in"));
  CHECK(has(table.out, "   1  dp"));
  CHECK(has(table.out, "   3  "));
  CHECK_FALSE(has(table.out, "   4  "));
  CHECK(has(table.out, "why: "));
  // The JSON lists the layouts in the table's order (plan::rank_plausibly, tested in unit_tests),
  // the fitting ones first.
  const std::string fixed = " --cluster " + kClusters + "h100-sxm.toml --fix tp=2,recompute=full";
  auto json = run_loom("plan " + cfg + fixed + " --json");
  auto top = run_loom("plan " + cfg + fixed + " --top 3");
  REQUIRE(json.rc == 0);
  REQUIRE(top.rc == 0);
  std::istringstream lines(json.out);
  std::string line;
  int rows = 0;
  bool fitting = true;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    CHECK(j["tp"] == 2);
    CHECK(j["recompute"] == "full");
    if (rows < 3)
      CHECK(has(top.out,
                "   " + std::to_string(rows + 1) + "  " + j["layout"].get<std::string>() + " "));
    if (j["fits"] == true)
      CHECK(fitting);
    else
      fitting = false;
    ++rows;
  }
  CHECK(rows > 10);
}

TEST_CASE("loom plan --explain breaks a step into compute, each collective, bubble and optimizer") {
  TempDir t;
  auto r = run_loom("plan " + llama8b(t) + " --cluster " + kClusters +
                    "h100-sxm.toml --nodes 2 --explain \"dp4 tp4 zero1 mb1 selective\"");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "forward (all micro-batches)"));
  CHECK(has(r.out, "tp: block outputs all-reduce"));
  CHECK(has(r.out, "zero1: gradient reduce-scatter"));
  CHECK(has(r.out, "(node+network)"));  // dp 4 with stride 4 spans the two nodes
  CHECK(has(r.out, "optimizer (AdamW"));
  CHECK(has(r.out, "memory per rank: parameters"));
}

TEST_CASE(
    "loom plan refuses a broken cluster file, too many devices and an impossible layout with exit "
    "2") {
  TempDir t;
  const std::string cfg = llama8b(t);
  std::ifstream in(kClusters + "h100-sxm.toml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string negative =
      t.write("neg.toml", text.replace(text.find("latency_us = 3.0"), 16, "latency_us = -3.0"));
  auto neg = run_loom("plan " + cfg + " --cluster " + negative);
  CHECK(neg.rc == 2);
  CHECK(has(neg.out, "neg.toml:"));
  CHECK(has(neg.out, "latency_us"));
  auto check = run_loom("config check " + negative);
  CHECK(check.rc == 2);
  auto ok = run_loom("config check " + kClusters + "a100-80g.toml");
  CHECK(ok.rc == 0);
  CHECK(has(ok.out, "cluster 'a100-80g': 560 x 8"));
  auto many = run_loom("plan " + cfg + " --cluster " + kClusters + "h200.toml --nodes 1000");
  CHECK(many.rc == 2);
  CHECK(has(many.out, "8000 devices asked, but cluster 'h200'"));
  auto bad = run_loom("plan " + cfg + " --cluster " + kClusters +
                      "h100-sxm.toml --explain \"dp1 tp8 pp1 mb3\"");
  CHECK(bad.rc == 2);
  // In the words `loom train` would refuse it with.
  CHECK(has(bad.out,
            "--explain dp1 tp8 mb3: [train] global_batch = 64 over dp = 1 is 64 sequences per "
            "rank, not a multiple of micro_batch = 3"));
  auto wrong_count =
      run_loom("plan " + cfg + " --cluster " + kClusters + "h100-sxm.toml --explain \"dp2 tp2\"");
  CHECK(wrong_count.rc == 2);
  CHECK(has(wrong_count.out, "uses 4 devices, not the 8"));
  auto fix = run_loom("plan " + cfg + " --cluster " + kClusters + "h100-sxm.toml --fix tq=2");
  CHECK(fix.rc == 2);
  CHECK(has(fix.out, "did you mean 'tp'"));
  auto missing = run_loom("plan " + cfg + " --cluster " + t.path.string() + "/nope.toml");
  CHECK(missing.rc == 2);
  CHECK(has(missing.out, "nope.toml"));
}

// How close the rows come is the command's to print (docs/plan.md quotes it), not a test's to
// assert: these check that every run is there, and that --cross-validate predicts each from a
// fit without it.
TEST_CASE(
    "loom plan published prints a row per published run, and --cross-validate a leave-one-out "
    "error per run, each kind's band and the median") {
  auto r = run_loom("plan published --clusters " + kClusters);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  for (const char* row : {"GPT 1008.0B", "Llama 3 405B, 16384 H100", "MPT 70B, 512 H100, FSDP",
                          "Llama 3.1 8B, 128 H100 500 W, FSDP", "BLOOM 176B, 384 A100"})
    CHECK(has(r.out, row));
  auto cv = run_loom("plan published --cross-validate --clusters " + kClusters);
  INFO(cv.out);
  REQUIRE(cv.rc == 0);
  for (const char* kind : {"a100", "h100", "h100-500w"}) {
    CHECK(has(cv.out, std::string(kind) + ": "));
    CHECK(has(cv.out, std::string(kind) + " band (leave-one-out residuals): "));
  }
  CHECK(has(cv.out, "leave-one-out: median |error| "));
  CHECK(has(cv.out, "overlap_cost"));
}

TEST_CASE("a cluster file without its device or with an unknown one is refused by name") {
  TempDir t;
  const std::string text = loom::test::read_text(kClusters + "h100-sxm.toml");
  auto without = [&](const std::string& line, const std::string& name) {
    std::string s = text;
    s.erase(s.find(line), s.find('\n', s.find(line)) - s.find(line) + 1);
    return t.write(name, s);
  };
  auto no_device = run_loom("config check " + without("device = \"cuda\"", "a.toml"));
  CHECK(no_device.rc == 2);
  CHECK(has(no_device.out, "[cluster] device is missing"));
  std::string unknown = text;
  unknown.replace(unknown.find("device = \"cuda\""), 15, "device = \"tpu\"");
  auto bad = run_loom("config check " + t.write("b.toml", unknown));
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "tpu"));
  auto json = run_loom("plan published --fit --json --clusters " + kClusters);
  CHECK(json.rc == 2);
  CHECK(has(json.out, "--json writes the table's rows"));
}

TEST_CASE(
    "a third-party strategy is planned through its own cost entry, one without is named, and "
    "layouts its plugins refuse are not ranked") {
  TempDir t;
  const std::string head =
      "[model]\nn_layer = 2\nn_head = 2\nd_model = 64\nseq_len = 32\n[train]\nglobal_batch = 8\n"
      "[plugins]\npath = [\"" +
      std::string(LOOM_TEST_PLUGIN_DIR) + "\"]\n";
  const std::string ema = t.write("ema.toml", head + "data = \"ema\"\n");
  auto plan = [&](const std::string& cfg, const std::string& cluster, const std::string& args) {
    return run_loom("plan " + cfg + " --cluster " + kClusters + cluster + " " + args);
  };
  auto r = plan(ema, "this-machine.toml", "--devices 2 --explain dp2");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "ema: ema: gradient all-reduce, then average, all_reduce"));
  auto ranked = plan(ema, "this-machine.toml", "--devices 2 --json");
  CHECK(ranked.rc == 0);
  CHECK_FALSE(has(ranked.out, "\"zero\": 1"));  // the planner cannot shard a state it does not own
  CHECK(has(ranked.out, "\"dp\": 2"));
  // ema declares no LOOM_DATA_PIPELINE: train refuses it pp > 1 wherever a data group exists.
  // On 8 devices every pp 2 layout of this 2-head model has a data group (dp or cp > 1).
  auto staged = plan(ema, "h100-sxm.toml", "--devices 8 --json");
  CHECK(staged.rc == 0);
  CHECK(has(staged.out, "\"dp\": 4"));
  CHECK_FALSE(has(staged.out, "\"pp\": 2"));
  auto fixed = plan(ema, "h100-sxm.toml", "--devices 8 --fix pp=2");
  CHECK(fixed.rc == 2);
  CHECK(has(fixed.out, "no layout of 8 devices can run this model with the --fix choices"));
  auto refused = plan(ema, "h100-sxm.toml", "--devices 8 --explain \"dp4 pp2\"");
  CHECK(refused.rc == 2);
  CHECK(has(
      refused.out,
      "--explain dp4 pp2 1f1b mb1: [plugins] data = \"ema\" does not declare LOOM_DATA_PIPELINE"));
  const std::string nop2p = t.write("nop2p.toml", head + "comm = \"nop2p\"\n");
  auto ring = plan(nop2p, "this-machine.toml", "--devices 2 --json");
  CHECK(ring.rc == 0);
  CHECK(has(ring.out, "\"dp\": 2"));
  CHECK_FALSE(has(ring.out, "\"cp\": 2"));  // cp's ring and pp's stages need send and recv
  CHECK_FALSE(has(ring.out, "\"pp\": 2"));
  const std::string old = t.write("old.toml", head + "data = \"ddp12\"\n");
  auto none = plan(old, "this-machine.toml", "--devices 2 --explain dp2");
  CHECK(none.rc == 0);
  CHECK(has(none.out, "plugin 'ddp12' has no cost entry: planned as communicating nothing"));
}

TEST_CASE("loom plan keeps its columns in line when layout names run past 40 characters") {
  auto r = run_loom("plan " LOOM_SOURCE_DIR "/configs/llama.toml --cluster " LOOM_SOURCE_DIR
                    "/clusters/h100-sxm.toml --nodes 64 --top 60");
  REQUIRE(r.rc == 0);
  std::istringstream in(r.out);
  std::string line, header;
  size_t rows = 0, longest = 0;
  while (std::getline(in, line)) {
    if (line.rfind("   #  layout", 0) == 0) header = line;
    if (header.empty() || line == header) continue;
    if (line.empty()) break;
    ++rows;
    CHECK(line.size() == header.size());  // every field after the name is fixed-width
    longest = std::max(longest, line.find("  ", 6) - 6);
  }
  CHECK(rows == 60);
  CHECK(longest > 40);
}
