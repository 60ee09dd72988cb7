// The statistics behind `loom compare --rounds`: quartiles, the paired B/A interval, the rounds a
// given effect needs, and the verdicts, on data whose answer is known.
#include "report/noise.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace loom::report;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Per-round medians of A and B: B = A x (1 + effect), each round's pair sharing the machine's
// drift, with independent noise of relative size `noise` on each run.
void rounds(int n, double effect, double noise, uint32_t seed, std::vector<double>& a,
            std::vector<double>& b) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0, noise);
  a.clear(), b.clear();
  for (int r = 0; r < n; ++r) {
    const double drift = 100 * (1 + 0.3 * r);  // the machine gets 30% slower every round
    a.push_back(drift * std::exp(d(g)));
    b.push_back(drift * (1 + effect) * std::exp(d(g)));
  }
}

}  // namespace

TEST_CASE("spread: median and quartiles by linear interpolation, non-finite values left out") {
  Spread s = spread({4, 1, 3, 2, NAN, 5});
  CHECK(s.n == 5);
  CHECK(s.median == 3);
  CHECK(s.q1 == 2);
  CHECK(s.q3 == 4);
  CHECK(spread({1, 2}).median == 1.5);
  CHECK(spread({}).n == 0);
}

TEST_CASE("paired rounds cancel drift: a 15% slower B is found with an interval containing 15%") {
  std::vector<double> a, b;
  rounds(5, 0.15, 0.02, 1, a, b);
  RatioEstimate r = paired_ratio(a, b);
  CHECK(r.rounds == 5);
  CHECK(r.lo < 1.15);
  CHECK(r.hi > 1.15);
  CHECK(r.lo > 1.0);
  SpeedVerdict v = speed_verdict(r, 0.01, 0.02);
  CHECK(v.sign == 1);
  CHECK(has(v.text, "B is 1"));
  INFO(v.text);
  CHECK(has(v.text, "% slower than A (95% CI +"));
}

TEST_CASE(
    "A/A: the interval contains 1 in at least 90 of 100 trials, and the verdict says no "
    "difference") {
  int covered = 0, said_none = 0;
  for (uint32_t t = 0; t < 100; ++t) {
    std::vector<double> a, b;
    rounds(5, 0.0, 0.03, 100 + t, a, b);
    RatioEstimate r = paired_ratio(a, b);
    covered += r.lo <= 1 && r.hi >= 1;
    said_none += speed_verdict(r, 0.01, 0.02).sign == 0;
  }
  CHECK(covered >= 90);    // a 95% interval
  CHECK(said_none >= 95);  // and the 1% practical threshold on top
}

TEST_CASE(
    "a 2% difference under 3% noise with 3 rounds needs more rounds, and says about how many") {
  std::vector<double> a, b;
  rounds(3, 0.02, 0.03, 7, a, b);
  RatioEstimate r = paired_ratio(a, b);
  SpeedVerdict v = speed_verdict(r, 0.01, 0.02);
  CHECK(v.sign == 0);
  CHECK(has(v.text, "more rounds are needed to resolve a 2.0% difference: about"));
  // (1.96 + 0.84)^2 sd^2 / ln(1.02)^2 with sd = 0.03 sqrt(2) (two runs' noise per ratio): ~36.
  CHECK(rounds_needed(0.03 * std::sqrt(2.0), 0.02) == doctest::Approx(37).epsilon(0.05));
  CHECK(rounds_needed(0.0, 0.02) == 3);
  CHECK(has(speed_verdict(paired_ratio({100}, {120}), 0.01, 0.02).text, "one round per config"));
}

TEST_CASE("loss against seed noise: a small change lies within A's spread, a broken B does not") {
  LossVerdict same =
      loss_verdict({2.50, 2.54, 2.47}, {2.51, 2.49, 2.53}, {3.1, 3.2, 3.0}, {3.12, 3.05, 3.15});
  CHECK(same.final_within);
  CHECK(same.curve_within);
  CHECK(has(same.text, "no sign that B changes convergence"));
  LossVerdict broken =
      loss_verdict({2.50, 2.54, 2.47}, {3.9, 4.1, 4.0}, {3.1, 3.2, 3.0}, {4.5, 4.6, 4.4});
  CHECK_FALSE(broken.final_within);
  CHECK(has(broken.text, "lies OUTSIDE"));
  CHECK(has(broken.text, "beyond seed-to-seed noise"));
}
