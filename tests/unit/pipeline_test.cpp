// The pipeline plugin's three schedules through the runtime's plan: complete and deadlock-free
// for every shape tried, the bubble and in-flight bounds of REFERENCE.md, the layer split
// (balanced and user layouts) and the errors for shapes a schedule refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "parallel/pipeline_plan.hpp"
#include "support/process.hpp"

using namespace loom;
using namespace loom::plugins;

using loom::test::error_of;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

PipelinePlan plan(const std::string& name, int p, int m, int v = 0) {
  static Registry reg{{{Registry::install_dir(), "install"}}};
  static config::Config cfg = config::Config::parse("", "t.toml");
  loom_options none = options_for(cfg, name);
  return PipelinePlan(reg.find(name, LOOM_KIND_PARALLEL), &none, loom_pipeline_shape{p, m, v});
}

}  // namespace

TEST_CASE(
    "gpipe and 1f1b finish for every p and m, with the (p-1)/(m+p-1) bubble and their memory "
    "bounds") {
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 3 * p; ++m) {
      INFO("p = " << p << ", m = " << m);
      PipelinePlan g = plan("gpipe", p, m), f = plan("1f1b", p, m);  // constructing checks them
      const double theory = double(p - 1) / (m + p - 1);
      CHECK(g.simulate().bubble() == doctest::Approx(theory));
      CHECK(f.simulate().bubble() == doctest::Approx(theory));
      CHECK(g.peak_in_flight(0) == m);               // GPipe keeps every micro-batch
      CHECK(f.peak_in_flight(0) == std::min(m, p));  // 1F1B at most p on the first stage
      for (int r = 0; r < p; ++r) CHECK(f.peak_in_flight(r) <= p - r);
    }
}

TEST_CASE("interleaved finishes for every p, v and m = k p, and cuts the bubble by v") {
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        INFO("p = " << p << ", v = " << v << ", m = " << m);
        PipelinePlan i = plan("interleaved", p, m, v);
        CHECK(i.shape().chunks == v);
        const double theory = double(p - 1) / (v * m + p - 1);
        CHECK(i.theoretical_bubble() == doctest::Approx(theory));
        // Unit costs: the simulated bubble is the formula's when m is a multiple of p.
        CHECK(i.simulate().bubble() == doctest::Approx(theory).epsilon(1e-9));
      }
  CHECK(plan("interleaved", 4, 8).shape().chunks == 2);  // the default
}

TEST_CASE(
    "zbh1 splits every backward and leaves a third of 1f1b's idle time, with 1f1b's activations in "
    "flight") {
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 3 * p; ++m) {
      INFO("p = " << p << ", m = " << m);
      PipelinePlan z = plan("zbh1", p, m), f = plan("1f1b", p, m);
      CHECK(z.actions(0).size() == size_t(3 * m));
      CHECK(z.split(p - 1, m - 1, 0));
      CHECK_FALSE(f.split(0, 0, 0));
      // A forward 1, a backward 2 (its input and weight halves 1 each), as Qi et al. count them.
      const PipeTimeline zt = z.simulate(1, 2), ft = f.simulate(1, 2);
      const double z_idle = zt.makespan - 3.0 * m, f_idle = ft.makespan - 3.0 * m;
      CHECK(f_idle == doctest::Approx(3.0 * (p - 1)));
      // (p - 1)(F + B - W) once the steady state is reached (m >= p); fewer micro-batches than
      // stages leave the weight halves too few to fill the cool-down.
      if (m >= p) CHECK(z_idle == doctest::Approx(p - 1.0));
      CHECK(z_idle < f_idle);
      for (int r = 0; r < p; ++r) CHECK(z.peak_in_flight(r) == f.peak_in_flight(r));
    }
}

TEST_CASE("a shape a schedule cannot run is a config error that says what would fit") {
  auto odd = error_of([] { plan("interleaved", 4, 6, 2); });
  CHECK(has(odd, "multiple of pp: 6 micro-batches"));
  CHECK(has(odd, "use 8 micro-batches"));
  CHECK_THROWS_AS(plan("interleaved", 4, 6, 2), ConfigError);
  CHECK(has(error_of([] { plan("interleaved", 2, 4, 1); }), "at least 2 model chunks"));
  CHECK(has(error_of([] { plan("1f1b", 2, 4, 2); }), "chunks > 1 need pipeline = \"interleaved\""));
  CHECK(has(error_of([] { plan("gpipe", 2, 4, 3); }), "one model chunk per rank"));
}

TEST_CASE("the timeline shows who runs what when") {
  PipelinePlan f = plan("1f1b", 2, 3);
  std::string text = f.render(f.simulate());
  CHECK(has(text, "rank 0  F0 F1 .  B0 F2 B1 .  B2"));
  CHECK(has(text, "rank 1  .  F0 B0 F1 B1 F2 B2"));
}

TEST_CASE(
    "the default split balances cost, a layout string splits as written, and a wrong one says "
    "why") {
  PipelinePlan two = plan("1f1b", 2, 4);
  // Six equal blocks and a head as heavy as two of them: the head's stage gets fewer blocks.
  auto split = two.partition("EttttttL", {0.01, 1, 1, 1, 1, 1, 1, 2}, "");
  CHECK(split == std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1});
  auto even = two.partition("EttttL", {0.01, 1, 1, 1, 1, 0.01}, "");
  CHECK(even == std::vector<int32_t>{0, 0, 0, 1, 1, 1});
  auto uneven = two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "E t | t t t L");
  CHECK(uneven == std::vector<int32_t>{0, 0, 1, 1, 1, 1});
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "E t t | t t L L");
            }),
            "more layers than the model's 6"));
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "E t t | t t t L");
            }),
            "layer 5 is 'L' in the model, not 't'"));
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "E t | t | t t L");
            }),
            "3 stages; pp x chunks is 2"));
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "E t t | t t");
            }),
            "names 5 layers; the model has 6"));
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "E t t x | t L");
            }),
            "'x' is not a layer"));
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "t E t t | t L");
            }),
            "layer 0 is 'E' in the model, not 't'"));
  CHECK(has(error_of([&] {
              two.partition("EttttL", {1, 1, 1, 1, 1, 1}, "| E t t t t L");
            }),
            "stage 0 is empty"));
  PipelinePlan eight = plan("interleaved", 4, 8, 2);
  CHECK(has(error_of([&] {
              eight.partition("EttttL", {1, 1, 1, 1, 1, 1}, "");
            }),
            "6 pipeline layers (embedding, blocks, head), fewer than the 8 stages"));
}
