// loom plan ranks only what runs: each layout it ranks for the Llama 3 jobs, turned into a config
// by --emit's own overrides, passes the check that `loom train` makes at start-up and that
// `loom config check` makes (train::check_layout, with the plugins resolved as a job resolves
// them).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli/job_config.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "core/errors.hpp"
#include "distributed/mesh.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "plan/from_config.hpp"
#include "plan/search.hpp"
#include "plan/sources.hpp"
#include "train/layout_rules.hpp"
#include "train/trainer.hpp"

namespace {

using namespace loom;
namespace fs = std::filesystem;

struct Job {
  const char* preset;
  int64_t batch;
  int devices;
  size_t stride;  // every stride-th ranked layout is checked (and the top 50 always)
};

}  // namespace

TEST_CASE(
    "every layout loom plan ranks for Llama 3 8B, 70B and 405B on H100 passes train's own check") {
  const fs::path dir =
      fs::temp_directory_path() / ("loom_plan_valid_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "job.toml";
  const plan::Cluster h100 =
      plan::load_cluster(fs::path(LOOM_SOURCE_DIR) / "clusters" / "h100-sxm.toml");
  plugins::Registry registry(plugins::Registry::default_dirs());
  // They rank 7,000, 39,000 and 125,000 layouts at about 2 ms a check: a sample keeps the test
  // short (every one of them passed when the check was built; docs/plan.md).
  for (const Job& job : {Job{"llama3-8b", 64, 8, 3}, Job{"llama3-70b", 64, 64, 25},
                         Job{"llama3-405b", 1024, 1024, 800}}) {
    {
      std::ofstream out(file);
      out << "[model]\npreset = \"" << job.preset << "\"\n[train]\nglobal_batch = " << job.batch
          << "\n[plugins]\nprecision = \"bf16\"\n";
    }
    config::Config base = config::Config::load(file);
    base.validate(loom::train::job_sections());
    const train::JobSettings base_job = train::read_job(base);
    const plan::Workload w = plan::workload_of(base_job);
    plan::PluginSources sources(plugins::Registry::default_dirs(), base_job.plugins.tables);
    const plan::SearchResult r = plan::search(h100, w, job.devices, {}, sources.costs(),
                                              sources.pipes(), sources.problems());
    REQUIRE(r.ranked.size() > 100);
    size_t checked = 0;
    for (size_t i = 0; i < r.ranked.size(); ++i) {
      if (i >= 50 && i % job.stride) continue;
      const plan::Layout& l = r.ranked[i].layout;
      INFO(job.preset << " #" << i + 1 << ": " << l.name());
      config::Config cfg = cli::load_for_job(file.string(), plan::layout_sets(w, l), l.world());
      const plugins::Selection sel = plugins::resolve(cfg, registry);
      const train::JobSettings job_settings = train::read_job(cfg, sel);
      CHECK_NOTHROW(train::check_layout(job_settings, sel,
                                        dist::resolve_mesh(job_settings.parallel, l.world())));
      CHECK(plan::layout_of(job_settings).name() == l.name());  // it reads back as the layout
      ++checked;
    }
    MESSAGE(std::string(job.preset)
            << ": " << checked << " of " << r.ranked.size() << " ranked layouts checked");
  }
  fs::remove_all(dir);
}

TEST_CASE("the planner ranks ZeRO on a GPU, and leaves out a schedule's own refusal") {
  config::Config cfg = config::Config::parse(
      "[run]\ndevice = \"cuda\"\n[model]\npreset = \"llama3-8b\"\n[train]\nglobal_batch = "
      "64\n[plugins]\nprecision = \"bf16\"\n",
      "<test>");
  cfg.validate(loom::train::job_sections());
  const train::JobSettings job = train::read_job(cfg);
  const plan::Workload w = plan::workload_of(job);
  plan::PluginSources sources(plugins::Registry::default_dirs(), job.plugins.tables);
  const plan::Cluster h100 =
      plan::load_cluster(fs::path(LOOM_SOURCE_DIR) / "clusters" / "h100-sxm.toml");
  const plan::SearchResult r =
      plan::search(h100, w, 8, {}, sources.costs(), sources.pipes(), sources.problems());
  REQUIRE_FALSE(r.ranked.empty());
  // zero1-3 keep their state in device memory (LOOM_DATA_DEVICE): a ZeRO layout is a candidate.
  CHECK(sources.problems()(w, plan::parse_layout("dp4 zero1 tp2 mb1")) == "");
  CHECK(sources.problems()(w, plan::parse_layout("dp8 zero3 mb1")) == "");
  // 64 sequences over dp 1 in micro-batches of 16: 4 micro-batches, not a multiple of pp 8.
  const std::string interleaved =
      sources.problems()(w, plan::parse_layout("dp1 pp8 interleavedx2 mb16"));
  CHECK(interleaved.find(
            "the interleaved schedule needs the micro-batch count to be a multiple of pp") == 0);
}

TEST_CASE(
    "a sharded data plugin that does not declare device state is refused off the CPU, in train's "
    "words") {
  config::Config cfg = config::Config::parse("[model]\npreset = \"llama-tiny\"\n", "<test>");
  cfg.validate(loom::train::job_sections());
  const model::Config mc = model::read_model(cfg.section("model"));
  train::LayoutFacts f;
  f.model = &mc;
  f.mesh.dp = 2;
  f.global_batch = 8;
  f.comm = "nccl", f.data = "myzero";
  f.data_caps = LOOM_DATA_SHARDED;
  CHECK(train::layout_problem(f) == "");  // on the CPU its host memory is the device's
  f.device = "cuda", f.device_host_memory = false;
  const std::string why = train::layout_problem(f);
  CHECK(why.find("[plugins] data = \"myzero\" does not declare LOOM_DATA_DEVICE") == 0);
  CHECK(why.find("[run] device = \"cuda\"") != std::string::npos);
  f.data_caps |= LOOM_DATA_DEVICE;
  CHECK(train::layout_problem(f) == "");
}

// The check the search and --emit run is train's, with the cluster's device and comm: an H100
// file plans cuda and nccl whatever the config names, and a CPU file keeps the config's.
TEST_CASE("the planner checks a layout for the device and comm its cluster file names") {
  config::Config cfg = config::Config::parse(
      "[run]\ndevice = \"strict\"\n[model]\npreset = \"llama-tiny\"\n[plugins]\ncomm = \"gloo\"\n",
      "<test>");
  cfg.validate(loom::train::job_sections());
  const plan::Workload w = plan::workload_of(train::read_job(cfg));
  const fs::path clusters = fs::path(LOOM_SOURCE_DIR) / "clusters";
  const plan::Cluster h100 = plan::load_cluster(clusters / "h100-sxm.toml");
  const plan::Cluster cpu = plan::load_cluster(clusters / "this-machine.toml");
  CHECK(h100.run_device == "cuda");
  CHECK(h100.comm == "nccl");
  const plan::Layout l = plan::parse_layout("dp2 zero1 mb1");
  const train::LayoutFacts gpu = plan::layout_facts(plan::on_cluster(w, h100), l);
  CHECK(gpu.device == "cuda");
  CHECK(gpu.comm == "nccl");
  CHECK_FALSE(gpu.device_host_memory);  // what a sharded plugin without device state is refused by
  const train::LayoutFacts here = plan::layout_facts(plan::on_cluster(w, cpu), l);
  CHECK(here.device == "strict");
  CHECK(here.comm == "gloo");
}
