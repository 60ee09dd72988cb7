// Telling a real difference from noise when two configs are compared over several rounds
// (`loom compare --rounds N --seeds K`): the spread of each config's step times, a confidence
// interval for B/A from paired rounds, the rounds a given effect would need, and whether B's
// loss lies within A's seed-to-seed spread. The method is explained in docs/stability.md.
#pragma once

#include <string>
#include <vector>

#include "report/runs.hpp"

namespace loom::report {

// Median and quartiles (linear interpolation between order statistics).
struct Spread {
  double median = NAN, q1 = NAN, q3 = NAN;
  size_t n = 0;
};
Spread spread(std::vector<double> xs);

// The steady per-step values of `key` (steps after the first `warmup`).
std::vector<double> steady_values(const Run& r, const std::string& key, size_t warmup);

// B/A of a per-round statistic (the round's median step time) from paired rounds: round i's A
// and B ran back to back, so slow drift of the machine cancels in the ratio. The estimate is the
// geometric mean of the per-round ratios, with a Student-t 95% interval on their logarithms.
struct RatioEstimate {
  double ratio = NAN, lo = NAN, hi = NAN;
  double sd_log = NAN;  // standard deviation of the per-round log ratios
  size_t rounds = 0;
};
RatioEstimate paired_ratio(const std::vector<double>& a, const std::vector<double>& b);

// Rounds for a true ratio of 1 + effect to exclude 1 from the 95% interval 80% of the time at
// this noise: ((1.96 + 0.84) sd_log / ln(1 + effect))^2, at least 3.
int64_t rounds_needed(double sd_log, double effect);

// The verdict on step time: "B is 14.8% slower (95% CI 12.1%..17.6%)", "no difference
// detected ...", with the rounds a difference of `effect` would need. A difference smaller than
// `min_effect` is reported as no practical difference even when the interval excludes 0.
struct SpeedVerdict {
  int sign = 0;  // +1: B slower, -1: B faster, 0: no difference detected
  std::string text;
};
SpeedVerdict speed_verdict(const RatioEstimate& r, double min_effect, double effect);

// Whether B's losses lie within A's seed-to-seed spread: |mean_B - mean_A| <= 2 sd_A (sd over
// A's seeds), for the final loss and for the loss averaged over the curve.
struct LossVerdict {
  bool final_within = true, curve_within = true;
  std::string text;
};
LossVerdict loss_verdict(const std::vector<double>& a_final, const std::vector<double>& b_final,
                         const std::vector<double>& a_curve, const std::vector<double>& b_curve);

// One config's rounds as the report draws them: per round, its steady step times.
struct RoundTimes {
  std::string name, color;
  std::vector<std::vector<double>> rounds;
};
// An SVG strip plot with a box (quartiles and median) per config per round.
std::string svg_rounds(const std::vector<RoundTimes>& configs, const std::string& order_note);

}  // namespace loom::report
