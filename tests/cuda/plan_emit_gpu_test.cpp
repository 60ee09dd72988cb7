// `loom plan --emit` for a GPU cluster, checked by `loom config check` as the cluster's run would
// be: cuda and the nccl plugin, which exists where this binary is built (the CUDA toolkit and
// NCCL). No case needs a GPU.
#include <doctest/doctest.h>

#include <string>

#include "support/process.hpp"

using namespace loom::test;

// A GPU cluster's advice is for that cluster: each of the top 5 layouts for Llama 3 70B on 8 DGX
// H100 and 405B on 128 names cuda and nccl, checkpoints, and leaves a data directory that
// `loom config check` refuses until it is filled in, and accepts once it is.
TEST_CASE(
    "loom plan --emit on an H100 cluster writes cuda and nccl, checkpointing and a data directory "
    "to fill in, for Llama 3 70B on 8 nodes and 405B on 128") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "shards for a cluster run " + std::to_string(i % 7) + "\n";
  t.write("c.txt", text);
  const std::string data = (t.path / "d").string();
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " + data).rc ==
          0);
  const std::string cfg = std::string(LOOM_SOURCE_DIR) + "/configs/plan_llama3.toml";
  const std::string h100 = std::string(LOOM_SOURCE_DIR) + "/clusters/h100-sxm.toml";
  const std::pair<const char*, const char*> shapes[] = {
      {"--nodes 8 --set model.preset=\"llama3-70b\"", "70b"},
      {"--nodes 128 --set model.preset=\"llama3-405b\" --set train.global_batch=1024", "405b"}};
  for (const auto& [args, name] : shapes)
    for (int rank = 1; rank <= 5; ++rank) {
      const std::string out =
          (t.path / (std::string(name) + std::to_string(rank) + ".toml")).string();
      const auto emit = run_loom("plan " + cfg + " --cluster " + h100 + " " + args + " --emit " +
                                 std::to_string(rank) + " --out " + out);
      INFO(name << " #" << rank << "\n" << emit.out);
      REQUIRE(emit.rc == 0);
      const std::string written = read_text(out);
      CHECK(occurrences(written, "device = 'cuda'") > 0);
      CHECK(occurrences(written, "comm = 'nccl'") > 0);
      CHECK(occurrences(written, "every = 500") > 0);
      const auto unfilled = run_loom("config check " + out);
      CHECK(unfilled.rc == 2);
      CHECK(occurrences(unfilled.out, "[data] dir is the placeholder `loom plan --emit` left") > 0);
      const auto filled = run_loom("config check " + out + " --set 'data.dir=\"" + data + "\"'");
      INFO(filled.out);
      CHECK(filled.rc == 0);
    }
}
