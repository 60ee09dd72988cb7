// loom plan's model: cluster files, the ZeRO formulas, the strategies' cost entries, the
// published runs it must predict, and the search's speed and choices.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "cli/job_config.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/registry.hpp"
#include "plan/fit.hpp"
#include "plan/from_config.hpp"
#include "plan/mixed_cluster.hpp"
#include "plan/published.hpp"
#include "plan/search.hpp"
#include "plan/sources.hpp"

namespace {

using namespace loom;
const std::filesystem::path kClusters = std::filesystem::path(LOOM_SOURCE_DIR) / "clusters";

std::string h100_text() {
  std::ifstream in(kClusters / "h100-sxm.toml");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

// A Llama 3 job as a config describes it: the [model] preset, a global batch, bf16.
plan::Workload llama3_workload(const std::string& preset, int64_t batch) {
  config::Config cfg = config::Config::parse(
      "[model]\npreset = \"" + preset + "\"\n[train]\nglobal_batch = " + std::to_string(batch) +
          "\n[plugins]\nprecision = \"bf16\"\n",
      "<test>");
  cfg.validate(loom::train::job_sections());
  return plan::workload_of(train::read_job(cfg));
}

}  // namespace

TEST_CASE("every shipped cluster file parses, with its figures where the datasheets put them") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kClusters)) {
    if (entry.path().extension() != ".toml" || plan::has_groups(entry.path()))
      continue;  // mixed: plan_mixed_test.cpp
    INFO(entry.path());
    const plan::Cluster c = plan::load_cluster(entry.path());
    CHECK(std::max(c.peak("bf16"), c.peak("fp32")) > 0);
    CHECK(c.memory > 0);
    ++files;
  }
  CHECK(files >= 5);  // A100, H100, H200, B200, this machine
  const plan::Cluster h100 = plan::load_cluster(kClusters / "h100-sxm.toml");
  CHECK(h100.peak("bf16") == doctest::Approx(989e12));
  CHECK(h100.peak("fp8") == doctest::Approx(1979e12));
  CHECK(h100.inter.bandwidth == doctest::Approx(50e9));  // NDR 400 Gb/s
  CHECK(plan::load_cluster(kClusters / "b200.toml").peak("bf16") ==
        doctest::Approx(2250e12));  // dense, not the sparse 4.5 PF
}

TEST_CASE("a cluster file with a missing, negative or misspelt figure is an error naming it") {
  const std::string good = h100_text();
  auto error_of = [](const std::string& text) {
    try {
      plan::parse_cluster(text, "c.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of(replace(good, "hbm_gbps = 3350.0", "")).find("[device] hbm_gbps is missing") !=
        std::string::npos);
  const std::string negative = error_of(replace(good, "hbm_gbps = 3350.0", "hbm_gbps = -3350.0"));
  CHECK(negative.find("c.toml:") == 0);
  CHECK(negative.find("hbm_gbps") != std::string::npos);
  CHECK(error_of(replace(good, "memory_gib = 80.0", "memory_gib = 0")).find("must be positive") !=
        std::string::npos);
  CHECK(error_of(replace(good, "rail_optimized = true", "rail_optimised = true"))
            .find("did you mean 'rail_optimized'") != std::string::npos);
  CHECK(error_of(replace(good, "nics_per_node = 8\n", "")).find("needs the network between them") !=
        std::string::npos);
  CHECK(error_of(replace(good, "[intra]", "[intro]")).find("did you mean 'intra'") !=
        std::string::npos);
  CHECK(error_of(good) == "no error");
}

TEST_CASE("the ZeRO memory formulas are the model's, exactly") {
  const double psi = 1e9;
  const int n = 8;
  double b[3];
  auto total = [&](int stage, bool mixed) {
    plan::model_state_bytes(psi, n, stage, mixed, b);
    return b[0] + b[1] + b[2];
  };
  // Rajbhandari et al. 2020, mixed-precision Adam (K = 12).
  CHECK(total(0, true) == doctest::Approx(16 * psi));
  CHECK(total(1, true) == doctest::Approx(4 * psi + 12 * psi / n));
  CHECK(total(2, true) == doctest::Approx(2 * psi + 14 * psi / n));
  CHECK(total(3, true) == doctest::Approx(16 * psi / n));
  // fp32 training (REFERENCE.md): 4 + 4 + 8, the same terms sharded.
  CHECK(total(0, false) == doctest::Approx(16 * psi));
  CHECK(total(1, false) == doctest::Approx(8 * psi + 8 * psi / n));
  CHECK(total(2, false) == doctest::Approx(4 * psi + 12 * psi / n));
  CHECK(total(3, false) == doctest::Approx(16 * psi / n));
}

TEST_CASE("the built-in strategies report their traffic through their cost entries") {
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::CostSource costs = sources.costs();
  loom_cost_query q{};
  q.group = 4, q.params = 1000000, q.grad_bytes = 4, q.act_bytes = 4, q.tokens = 512,
  q.d_model = 64;
  q.kv_width = 128, q.layers = 2, q.microbatches = 3, q.chunks = 1;
  bool has = false;
  auto ddp = costs("ddp", q, has);
  REQUIRE(has);
  REQUIRE(ddp.size() == 1);
  CHECK(ddp[0].op == LOOM_COST_ALL_REDUCE);
  CHECK(ddp[0].bytes == 4000000);
  auto zero3 = costs("zero3", q, has);
  double moved = 0;  // ZeRO-3: 3 psi per micro-batch, as gather + gather + scatter
  for (const auto& c : zero3) moved += double(c.bytes) * c.calls;
  CHECK(moved == doctest::Approx(3.0 * 4000000 * 3));
  for (const auto& c : zero3)
    CHECK(c.calls == 3 * (2 + 1));  // a collective per unit (2 blocks, the ends) per micro-batch
  auto tp = costs("tp", q, has);
  int64_t block_calls = 0;
  for (const auto& c : tp)
    if (std::string(c.what).find("block") != std::string::npos) block_calls += c.calls;
  CHECK(block_calls ==
        4 * 2 * 3);  // 2 forward + 2 backward all-reduces, per layer, per micro-batch
  q.sequence_parallel = 1;
  auto sp = costs("sp", q, has);
  CHECK(sp.size() == 4);
  for (const char* name : {"cp", "ep", "1f1b", "interleaved", "gpipe", "zero1", "zero2"}) {
    costs(name, q, has);
    CHECK_MESSAGE(has, name);
  }
}

// The cost entry sees the plugin's options as the run would get them, so the plan follows them.
TEST_CASE(
    "a strategy's cost entry sees its options: ddp's bf16 wire halves the bytes, no overlap "
    "exposes them") {
  loom_cost_query q{};
  q.group = 4, q.params = 1000000, q.grad_bytes = 4, q.act_bytes = 4, q.tokens = 512,
  q.d_model = 64, q.layers = 2;
  q.microbatches = 1, q.chunks = 1;
  bool has = false;
  const auto fp32 =
      plan::PluginSources(plugins::Registry::default_dirs(), "[plugins]\n").costs()("ddp", q, has);
  const std::string narrow = "[plugins.ddp]\nreduce_dtype = \"bf16\"\noverlap = false\n";
  const auto bf16 =
      plan::PluginSources(plugins::Registry::default_dirs(), narrow).costs()("ddp", q, has);
  REQUIRE(fp32.size() == 1);
  REQUIRE(bf16.size() == 1);
  CHECK(fp32[0].bytes == 4000000);
  CHECK(fp32[0].phase == LOOM_COST_BACKWARD);
  CHECK(fp32[0].hidden == 1.0);
  CHECK(bf16[0].bytes == 2000000);
  CHECK(bf16[0].phase == LOOM_COST_STEP);
  CHECK(bf16[0].hidden == 0.0);
}

// docs/plan.md's table: every published run is planned from its file in configs/published/ and
// nothing else. The build compiles in exactly the files on disk, each reads as a job config with
// its [published] section, and each plans to a finite figure. How close the figures come is
// `loom plan published`'s to print (and bench/plan_accuracy.sh's), not a test's to assert.
TEST_CASE("each published run is planned from its config file in configs/published/, alone") {
  std::set<std::string> on_disk, compiled;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(LOOM_SOURCE_DIR) / "configs" / "published"))
    on_disk.insert("configs/published/" + entry.path().filename().string());
  for (const plan::PublishedFile& f : plan::published_files()) compiled.insert(f.path);
  CHECK(on_disk == compiled);
  int table1 = 0;
  for (const std::string& file : on_disk) {
    std::ifstream in(std::filesystem::path(LOOM_SOURCE_DIR) / file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const plan::PublishedRun run = plan::read_published(text, file);
    INFO(file);
    plan::PluginSources sources = plan::published_sources(run);
    const plan::Cluster c = plan::load_cluster(kClusters / (run.cluster + ".toml"));
    const plan::Estimate e =
        plan::estimate(c, run.workload, run.layout, sources.costs(), sources.pipes());
    const double predicted = plan::predicted_metric(run, e);
    CHECK(std::isfinite(predicted));
    CHECK(predicted > 0);
    CHECK(run.layout.world() > 0);
    table1 += run.source.find("Table 1") != std::string::npos;
  }
  CHECK(table1 == 10);
  CHECK(on_disk.size() >= 26);
  // The paper's own count (eq. 3) for its 1T row: 502 PFLOP/s over 3072 GPUs is 163 TFLOP/s each.
  plan::Workload w;
  w.model.n_layer = 128, w.model.d_model = 25600, w.model.seq_len = 2048,
  w.model.vocab_size = 51200;
  CHECK(plan::megatron_flops(w.model, 3072) ==
        doctest::Approx(96.0 * 3072 * 2048 * 128 * 25600.0 * 25600 *
                        (1 + 2048 / (6.0 * 25600) + 51200 / (16.0 * 128 * 25600))));
}

TEST_CASE("a published run's file that misspells a key or omits its figure is refused by name") {
  const std::string model = "[model]\npreset = \"llama3-8b\"\n[plan]\nattention = \"unfused\"\n";
  const std::string head = "[published]\nname = \"x\"\nsource = \"y\"\ncluster = \"h100-sxm\"\n";
  CHECK_THROWS_WITH_AS(
      plan::read_published(head + "metrik = \"mfu\"\nvalue = 0.5\n" + model, "a.toml"),
      doctest::Contains("metric"), ConfigError);
  CHECK_THROWS_WITH_AS(plan::read_published(head + model, "b.toml"),
                       doctest::Contains("[published] value must be above 0"), ConfigError);
  CHECK_THROWS_WITH_AS(
      plan::read_published(head + "value = 0.5\n" + model + "stage_split = \"equal\"\n", "c.toml"),
      doctest::Contains("stage_split"), ConfigError);
  const plan::PublishedRun run = plan::read_published(head + "value = 0.5\n" + model, "d.toml");
  CHECK(run.workload.unfused_attention);
  CHECK(run.workload.stage_split == "cost");
}

// How long the search takes is measured by bench/plan_search.sh (its target: 10 s).
TEST_CASE("a 1024-GPU search for Llama 3 405B ranks the published layout's rivals") {
  const plan::Cluster c = plan::load_cluster(kClusters / "h100-sxm.toml");
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::Workload w = llama3_workload("llama3-405b", 1024);
  const plan::SearchResult r =
      plan::search(c, w, 1024, {}, sources.costs(), sources.pipes(), sources.problems());
  CHECK(r.considered > 1000);
  REQUIRE(!r.ranked.empty());
  REQUIRE(r.ranked.front().fits);
  // Llama 3's own layout (tp 8, pp 16; Dubey et al. 2024) is among those searched, and the top one
  // is at least as fast by the model's account, with a reason.
  const plan::Estimate* published = nullptr;
  for (const auto& e : r.ranked)
    if (e.layout.tp == 8 && e.layout.pp == 16 && e.layout.cp == 1 && e.layout.dp == 8 &&
        e.layout.micro_batch == 1 && e.layout.schedule == "1f1b" && e.layout.zero == 1 &&
        e.layout.recompute == "none" && !e.layout.sp)
      published = &e;
  REQUIRE(published);
  CHECK(r.ranked.front().step_ms <= published->step_ms);
  CHECK(plan::reason(r).find("slower, mostly") != std::string::npos);
}

TEST_CASE("Llama 3 8B on one H100 node: the layout that wins fits, and ZeRO-0 at dp 8 does not") {
  const plan::Cluster c = plan::load_cluster(kClusters / "h100-sxm.toml");
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::SearchResult r = plan::search(c, llama3_workload("llama3-8b", 64), 8, {},
                                            sources.costs(), sources.pipes(), sources.problems());
  REQUIRE(r.ranked.front().fits);
  // 8B parameters in bf16 with fp32 Adam replicated: 16 bytes x 8.03e9 = 128 GB > 80 GB.
  plan::Layout ddp = plan::parse_layout("dp8 mb1");
  const plan::Estimate e =
      plan::estimate(c, llama3_workload("llama3-8b", 64), ddp, sources.costs(), sources.pipes());
  CHECK_FALSE(e.fits);
  CHECK(e.why_not.find("model states") != std::string::npos);
  CHECK(e.memory.model_states() == doctest::Approx(16.0 * 8.03e9).epsilon(0.01));
}

TEST_CASE("layouts read back as they print, and one that cannot exist is refused with the reason") {
  const plan::Layout l = plan::parse_layout("dp2 tp4+sp pp4 interleavedx2 zero1 mb2 selective");
  CHECK(l.dp == 2);
  CHECK(l.tp == 4);
  CHECK(l.sp);
  CHECK(l.pp == 4);
  CHECK(l.chunks == 2);
  CHECK(l.zero == 1);
  CHECK(l.recompute == "selective");
  CHECK(plan::parse_layout(l.name()).name() == l.name());
  CHECK_THROWS_AS(plan::parse_layout("dp2 tq2"), ConfigError);
  plan::Workload w = llama3_workload("llama3-8b", 64);
  CHECK(plan::invalid_reason(w, plan::parse_layout("tp3 dp1"))
            .find("n_head = 32 is not divisible by [parallel] tp = 3") != std::string::npos);
  CHECK(plan::invalid_reason(w, plan::parse_layout("dp3")).find("not a multiple") !=
        std::string::npos);
  CHECK(plan::invalid_reason(w, plan::parse_layout("dp8 interleavedx2 mb1")).find("needs pp > 1") !=
        std::string::npos);
}

// Past 256 micro-batches the planner stops simulating and uses closed forms; they must continue
// the simulated line, zbh1's (its backwards split in halves) included.
TEST_CASE("the planner's pipeline closed forms continue the simulated makespans, zbh1 included") {
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::PipeSource source = sources.pipes();
  const std::vector<double> costs(34,
                                  1.0);  // E, 32 blocks, L: the split does not move the makespan
  auto pipes = [&](const std::string& schedule, int pp, int m, int chunks, double k) {
    return source(schedule, pp, m, chunks, k, costs);
  };
  for (const char* schedule : {"1f1b", "gpipe", "zbh1"})
    for (double k : {2.0, 3.0}) {
      INFO(schedule << ", k = " << k);
      const double simulated = pipes(schedule, 4, 256, 1, k).makespan,
                   closed = pipes(schedule, 4, 257, 1, k).makespan;
      CHECK(closed - simulated ==
            doctest::Approx(1 + k));  // one more micro-batch: a forward and a backward
    }
  CHECK(pipes("zbh1", 4, 257, 1, 2.0).makespan == doctest::Approx(257 * 3 + 3));        // (p - 1) F
  CHECK(pipes("zbh1", 4, 257, 1, 3.0).makespan == doctest::Approx(257 * 4 + 3 * 1.5));  // (p - 1) B
}

// The fitted cluster files say what the fit gives: `loom plan published --fit` and
// --cross-validate, rerun here, reproduce each kind's [efficiency] figures and its [fit] band
// and median.
TEST_CASE(
    "each fitted cluster file holds its kind's fitted efficiencies, leave-one-out band and "
    "median") {
  for (const plan::FitSet& set : plan::fit_sets(kClusters.string())) {
    INFO(set.kind);
    const plan::FitResult r = plan::fit(set);
    const std::vector<double> loo = plan::leave_one_out(set);
    const double low = std::min(0.0, *std::min_element(loo.begin(), loo.end())),
                 high = std::max(0.0, *std::max_element(loo.begin(), loo.end()));
    for (const auto& [name, c] : set.clusters) {
      INFO(name);
      const plan::FitValues held = plan::fit_values_of(c);
      for (int k = 0; k < plan::kFitted; ++k) {
        INFO(plan::kFittedKeys[k]);
        CHECK(std::fabs(held.v[k] - r.values.v[k]) <= 0.0006);  // written to 3 decimals
      }
      CHECK(c.fit.runs == int(set.runs.size()));
      REQUIRE(c.fit.band.size() == 2);
      CHECK(std::fabs(c.fit.band[0] - low) <= 0.0006);
      CHECK(std::fabs(c.fit.band[1] - high) <= 0.0006);
      CHECK(std::fabs(c.fit.median - plan::median_abs(loo)) <= 0.0006);
    }
  }
}

// ZeRO-3 holds one gathered copy per unit it prefetches: [plugins.zero3] prefetch_depth, as the
// run reads it, adds a unit's gathered bytes per step of depth to the planned buffers, and
// prefetch = false holds none ahead.
TEST_CASE(
    "the planner's ZeRO-3 buffers grow by one gathered unit per step of prefetch_depth, none "
    "without prefetch") {
  auto buffers = [](const std::string& options) {
    config::Config cfg = config::Config::parse(
        "[model]\npreset = \"llama3-8b\"\n[train]\nglobal_batch = 16\n[plugins]\nprecision = "
        "\"bf16\"\ndata = \"zero3\"\n" +
            options,
        "<test>");
    cfg.validate(loom::train::job_sections());
    const train::JobSettings job = train::read_job(cfg);
    plan::PluginSources sources(plugins::Registry::default_dirs(), job.plugins.tables);
    const plan::Cluster c = plan::load_cluster(kClusters / "h100-sxm.toml");
    const plan::Estimate e =
        plan::estimate(c, plan::workload_of(job), plan::parse_layout("dp8 zero3 mb2"),
                       sources.costs(), sources.pipes());
    double unit = 0;
    for (const plan::CommItem& it : e.comms)
      if (it.op == "all_gather") unit = std::max(unit, it.bytes);
    return std::pair{e.memory.buffers, unit};
  };
  const auto [one, unit] = buffers("");
  const auto [three, same_unit] = buffers("[plugins.zero3]\nprefetch_depth = 3\n");
  const auto [none, unit_again] = buffers("[plugins.zero3]\nprefetch = false\n");
  // ZeRO-3's unit as the planner prices it: an even share of Llama 3 8B's 8.03e9 published
  // parameters over its 33 units (32 blocks and the embeddings), gathered in fp32.
  REQUIRE(unit == doctest::Approx(4 * 8.03e9 / 33).epsilon(0.01));
  CHECK(same_unit == unit);
  CHECK(unit_again == unit);
  CHECK(three - one == doctest::Approx(2 * unit));
  CHECK(one - none == doctest::Approx(unit));  // without prefetch no unit is gathered ahead
}
