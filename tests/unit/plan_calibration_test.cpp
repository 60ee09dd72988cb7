// How far loom plan's predictions go: each cluster's band comes from the runs measured there (the
// published runs on that machine kind, the cluster file's [calibration]), and a layout outside
// what they cover is flagged with the reason.
#include <doctest/doctest.h>

#include <filesystem>

#include "cli/job_config.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "plan/calibration.hpp"
#include "plan/from_config.hpp"
#include "plan/published.hpp"

namespace {

using namespace loom;
const std::filesystem::path kClusters = std::filesystem::path(LOOM_SOURCE_DIR) / "clusters";

plan::Workload llama(const std::string& preset, int64_t batch, const std::string& data = "") {
  config::Config cfg = config::Config::parse(
      "[model]\npreset = \"" + preset + "\"\n[train]\nglobal_batch = " + std::to_string(batch) +
          "\n[plugins]\nprecision = \"bf16\"\n",
      "<test>");
  cfg.validate(loom::train::job_sections());
  plan::Workload w = plan::workload_of(train::read_job(cfg));
  w.data_plugin = data;
  return w;
}

}  // namespace

TEST_CASE(
    "a cluster's band spans the errors of the published runs on it, and a layout they do not cover "
    "is flagged") {
  const plan::Cluster h100 = plan::load_cluster(kClusters / "h100-sxm.toml");
  const plan::Calibration cal = plan::calibration_of(h100);
  int on_h100 = 0;
  for (const auto& run : plan::published_runs()) on_h100 += run.cluster == "h100-sxm";
  REQUIRE(on_h100 > 3);
  CHECK(int(cal.here.size()) == on_h100);
  CHECK(cal.low < 0);
  CHECK(cal.high > 0);
  for (const auto& p : cal.here) CHECK((p.residual >= cal.low && p.residual <= cal.high));

  const plan::Workload w = llama("llama3-70b", 64);
  // NeMo's 70B layout is a calibration run here: inside.
  CHECK(plan::extrapolation(
            cal, w, plan::parse_layout("dp2 tp4 sp pp4 interleavedx5 cp2 zero1 mb1")) == "");
  // cp 8 at 8192 positions: 1024 per rank, against the runs' 4096 (NeMo's cp 2) and 8192.
  const std::string short_cp =
      plan::extrapolation(cal, w, plan::parse_layout("dp1 pp8 interleavedx2 cp8 zero1 mb1"));
  CHECK(short_cp.find(
            "cp over 1024 positions per rank, shorter than any calibration run's here (4096)") !=
        std::string::npos);
  CHECK(short_cp.find("micro-batches of 1024 tokens per rank, thinner") != std::string::npos);
  CHECK(plan::extrapolation(cal, w, plan::parse_layout("dp8 pp8 zbh1 mb1"))
            .find("no calibration run uses pp zbh1") == 0);
  const plan::Workload mine = llama("llama3-70b", 64, "my_dp");
  CHECK(plan::extrapolation(cal, mine, plan::parse_layout("dp64 mb1")).find("plugin 'my_dp'") !=
        std::string::npos);

  plan::Estimate e;
  e.layout = plan::parse_layout("dp64 mb1"), e.step_ms = 1000;
  plan::judge(e, cal, w);
  CHECK(e.band_low_ms == doctest::Approx(1000 * (1 + cal.low)));
  CHECK(e.band_high_ms == doctest::Approx(1000 * (1 + cal.high)));
}

TEST_CASE(
    "a cluster file's [calibration] gives its measured layouts, one residual each, and a cluster "
    "without any has no band") {
  const std::string base =
      "[cluster]\nname = \"x\"\nnodes = 1\ndevice = \"cpu\"\ncomm = \"gloo\"\n[device]\nname = "
      "\"cpu\"\nper_node = 2\nmemory_gib = "
      "8\nhbm_gbps = 20\n"
      "peak_tflops_fp32 = 0.1\nshared_cores = 2\n[intra]\nkind = \"loopback\"\nbandwidth_gbps = "
      "5\nlatency_us = 10\n"
      "[inter]\nkind = \"none\"\n";
  const plan::Cluster none = plan::parse_cluster(base, "<x>");
  const plan::Calibration empty = plan::calibration_of(none);
  CHECK(empty.here.empty());
  plan::Estimate e;
  e.layout = plan::parse_layout("dp2 mb8"), e.step_ms = 100;
  plan::judge(e, empty, llama("llama-tiny", 16));
  CHECK(e.band_high_ms == 0);
  CHECK(e.extrapolated.find("no calibration run on this cluster") != std::string::npos);

  const plan::Cluster measured =
      plan::parse_cluster(base +
                              "[calibration]\nlayouts = [\"dp1 mb16\", \"dp2 zero1 "
                              "mb8\"]\nresiduals = [0.05, -0.2]\nseq_len = 128\n",
                          "<x>");
  const plan::Calibration cal = plan::calibration_of(measured);
  REQUIRE(cal.here.size() == 2);
  CHECK(cal.low == doctest::Approx(-0.2));
  CHECK(cal.high == doctest::Approx(0.05));
  CHECK(cal.features.count("zero1") == 1);
  CHECK_THROWS_AS(
      plan::parse_cluster(
          base +
              "[calibration]\nlayouts = [\"dp1 mb16\"]\nresiduals = [0.05, -0.2]\nseq_len = 128\n",
          "<x>"),
      ConfigError);
  CHECK_THROWS_AS(
      plan::parse_cluster(base + "[calibration]\nlayouts = [\"dp1 mb16\"]\nresiduals = [0.05]\n",
                          "<x>"),
      ConfigError);
  try {
    plan::parse_cluster(
        base + "[calibration]\nlayouts = [\"dp1 mq16\"]\nresiduals = [0.05]\nseq_len = 128\n",
        "<x>");
    FAIL("a misspelt layout was read");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("<x>: [calibration] layouts: ") == 0);
  }
}

// The table's order: fitting layouts first; among them one inside the calibrated region by its
// step and an extrapolated one by the slow end of its band; the rest keep the search's order.
TEST_CASE("rank_plausibly ranks an extrapolated layout by the slow end of its band") {
  auto row = [](const char* name, double step, double high, bool extrapolated, bool fits) {
    plan::Estimate e;
    e.layout = plan::parse_layout(name);
    e.step_ms = step, e.band_high_ms = high, e.fits = fits;
    e.extrapolated = extrapolated ? "no calibration run uses pp zbh1" : "";
    return e;
  };
  std::vector<plan::Estimate> rows = {
      row("dp2 pp2 zbh1 mb1", 90, 110, true, true),  // fastest, but 110 at its slow end
      row("dp4 mb1", 100, 120, false, true),         // inside the region: ranked by its 100
      row("dp2 tp2 mb1", 105, 125, false, true),
      row("dp1 tp4 mb1", 80, 90, false, false),  // does not fit: after every fitting layout
      row("dp1 pp4 1f1b mb1", 70, 80, false, false)};
  plan::rank_plausibly(rows);
  std::vector<std::string> order;
  for (const plan::Estimate& e : rows) order.push_back(e.layout.name());
  CHECK(order == std::vector<std::string>{"dp4 mb1", "dp2 tp2 mb1", "dp2 pp2 zbh1 mb1",
                                          "dp1 tp4 mb1", "dp1 pp4 1f1b mb1"});
}
