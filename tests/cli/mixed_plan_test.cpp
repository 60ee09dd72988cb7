// `loom plan` on a mixed cluster file ([[group]]s), and the input a mixed job can get wrong: the
// groups of a config, its split, and the cluster file. Each mistake is exit 2, named. (The timed
// run on namespace nodes is in tests/serial/mixed_cluster_test.cpp; Slurm het jobs in
// tests/slurm/slurm_multinode_test.sh.)
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "support/metrics.hpp"
#include "support/process.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kHalved = std::string(LOOM_SOURCE_DIR) + "/clusters/this-machine-halved.toml";

std::string job(TempDir& t) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "a mixed cluster balances its stages " + std::to_string(i % 11) + "\n";
  t.write("c.txt", text);
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                   (t.path / "d").string())
              .rc == 0);
  return t.write("job.toml",
                 "[run]\nthreads = 1\n[model]\nn_layer = 6\nn_head = 4\nd_model = 192\nseq_len = "
                 "128\nvocab_size = 256\n"
                 "[data]\ndir = \"" +
                     (t.path / "d").string() +
                     "\"\n[train]\nsteps = 2\nglobal_batch = 32\neval_every = 0\n");
}

// `cmd` fails with exit 2 and says `what`.
void refused(const std::string& cmd, const std::string& what) {
  const Result r = run_loom(cmd);
  INFO(cmd << "\n" << r.out);
  CHECK(r.rc == 2);
  CHECK(has(r.out, what));
}

}  // namespace

TEST_CASE(
    "loom plan on a mixed cluster: the half-speed group goes first with fewer blocks, --explain "
    "says why, --emit writes what config check places and trains with group threads") {
  TempDir t;
  const std::string cfg = job(t);
  const Result plan = run_loom("plan " + cfg + " --cluster " + kHalved + " --top 4");
  INFO(plan.out);
  REQUIRE(plan.rc == 0);
  CHECK(has(plan.out,
            "on mixed cluster 'this-machine-halved': fast: 1 node x 1 CPU core; slow: 1 node x 1 "
            "CPU core; between: veth"));
  CHECK(has(plan.out, "groups in node order: slow fast"));
  CHECK(has(plan.out, "stage 0 on slow (CPU core): E + 2 blocks"));
  CHECK(has(plan.out, "stage 1 on fast (CPU core): 4 blocks + L"));
  CHECK(has(plan.out, "the groups meet at pipeline boundaries"));
  const Result explain =
      run_loom("plan " + cfg + " --cluster " + kHalved + " --explain 'dp1 pp2 gpipe mb4'");
  INFO(explain.out);
  CHECK(explain.rc == 0);
  CHECK(has(explain.out, "layout dp1 pp2 gpipe mb4 on this-machine-halved"));
  CHECK(has(explain.out, "this one is "));
  const Result json = run_loom("plan " + cfg + " --cluster " + kHalved + " --json");
  CHECK(json.rc == 0);
  CHECK(has(json.out,
            "{\"layout\": \"dp1 pp2 1f1b mb1\", \"groups\": [\"slow\", \"fast\"], \"pp_layout\": "
            "\"E t t | t t t t L\""));

  const std::string out = (t.path / "mixed.toml").string();
  REQUIRE(run_loom("plan " + cfg + " --cluster " + kHalved + " --emit 1 --out " + out).rc == 0);
  const std::string text = read_text(out);
  CHECK(has(text, "groups = [ 'slow nodes=1', 'fast nodes=1' ]"));
  CHECK(has(text, "pp_layout = 'E t t | t t t t L'"));
  const Result check = run_loom("config check " + out);
  INFO(check.out);
  CHECK(check.rc == 0);
  CHECK(has(check.out, "groups: slow: node 0 (rank 0, stage 0); fast: node 1 (rank 1, stage 1)"));

  // Both "nodes" on this machine, one `loom train` each: the slow group's ranks take its threads.
  const std::string dir = (t.path / "run").string();
  const std::string node = "LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " LOOM_BIN " train " + out +
                           " --run-dir " + dir +
                           " --set 'parallel.groups=[\"slow nodes=1 threads=2\", \"fast "
                           "nodes=1\"]' --nnodes 2 --node-rank ";
  const Result run = sh("export MASTER_ADDR=127.0.0.1 MASTER_PORT=29478; " + node +
                        "1 > /dev/null 2>&1 & " + node + "0; rc=$?; wait; exit $rc");
  INFO(run.out);
  REQUIRE(run.rc == 0);
  CHECK(has(run.out,
            "groups: slow: node 0 (rank 0, stage 0, threads 2); fast: node 1 (rank 1, stage 1)"));
  CHECK(column(std::filesystem::path(dir) / "metrics.jsonl", "threads") ==
        std::vector<double>{2, 2});  // [run] threads = 1
  CHECK(column(std::filesystem::path(dir) / "metrics.jsonl", "stage1_compute_ms").size() == 2);
}

TEST_CASE(
    "mixed input: groups that do not add up, a stage with no layers, a bad group entry, a bad "
    "mixed cluster file: exit 2, named") {
  TempDir t;
  const std::string cfg = job(t), check = "config check " + cfg + " --set parallel.pp=2 ";
  refused(check + "--set 'parallel.groups=[\"a nodes=2\", \"b nodes=1\"]' --set parallel.nproc=2",
          "'a' holds 4 ranks, not a multiple of a pipeline stage's 3 (world 6 / pp 2), so a stage "
          "would straddle two groups");
  // Launched on 2 nodes, the groups ask for 3: refused before any rank starts.
  const Result launch = run_loom("train " + cfg +
                                     " --set parallel.pp=2 --set 'parallel.groups=[\"a nodes=2\", "
                                     "\"b nodes=1\"]' --nnodes 2 --node-rank 0",
                                 "MASTER_ADDR=127.0.0.1 MASTER_PORT=29477");
  INFO(launch.out);
  CHECK(launch.rc == 2);
  CHECK(has(launch.out, "[parallel] groups hold 2 + 1 nodes x nproc 1 = 3 ranks; the job has 2"));
  refused(check +
              "--set 'parallel.groups=[\"a nodes=1\", \"b nodes=1\"]' --set "
              "'parallel.pp_layout=\"E t t t t t t L |\"'",
          "the last stage is empty");
  refused(check + "--set 'parallel.groups=[\"a nodes=1\", \"b nodez=1\"]'",
          "unknown setting 'nodez' (nodes, threads, device); did you mean 'nodes'?");
  refused(check + "--set 'parallel.groups=[\"a\"]'", "nodes=N is missing");
  refused(check + "--set 'parallel.groups=[\"a nodes=1 device=gpu\", \"b nodes=1\"]'",
          "device 'gpu' is not one [run] device takes (cpu, strict, cuda)");
  refused(check + "--set 'parallel.groups=[\"a nodes=1 threads=5000\", \"b nodes=1\"]'",
          "threads must be from 0 (every core) to 4096");
  refused(check + "--set 'parallel.groups=[\"a nodes=1\", \"a nodes=1\"]'",
          "the name 'a' is given twice");

  const std::string good = read_text(kHalved);
  auto cluster = [&](const std::string& name, const std::string& text) {
    const std::string file = t.write(name, text);
    for (const char* kind : {"this-machine-core.toml", "this-machine-core-halved.toml"})
      std::filesystem::copy_file(std::string(LOOM_SOURCE_DIR) + "/clusters/" + kind, t.path / kind,
                                 std::filesystem::copy_options::overwrite_existing);
    return file;
  };
  std::string typo = good;
  typo.replace(typo.find("per_node = 1"), 12, "per_nod = 1");
  refused("config check " + cluster("typo.toml", typo), "unknown key 'per_nod'");
  std::string missing = good;
  const std::string kind = "cluster = \"this-machine-core.toml\"";
  missing.replace(missing.find(kind), kind.size(), "cluster = \"no-such-kind.toml\"");
  refused("config check " + cluster("missing.toml", missing), "[[group]] #1 ('fast'): ");
  std::string no_nodes = good;
  no_nodes.replace(no_nodes.find("nodes = 1"), 9, "");
  refused("config check " + cluster("nonodes.toml", no_nodes),
          "[[group]] #1 ('fast') has no nodes");
  refused("plan " + cfg + " --cluster " + cluster("ok.toml", good) + " --nodes 2",
          "a mixed cluster is planned on all its groups' devices");
  refused("plan " + cfg + " --cluster " + cluster("ok.toml", good) + " --dtype bf16",
          "group 'fast' (" + (t.path / "this-machine-core.toml").string() + ") gives no bf16 peak");
  refused("plan " + cfg + " --cluster " + cluster("ok.toml", good) + " --versus 'dp1 pp2 mb1'",
          "on a mixed cluster, --explain LAYOUT");
}
