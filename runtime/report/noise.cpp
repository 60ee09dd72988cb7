#include "report/noise.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "report/svg.hpp"

namespace loom::report {

namespace {

double mean(const std::vector<double>& x) {
  return std::accumulate(x.begin(), x.end(), 0.0) / x.size();
}

// Sample standard deviation (n - 1).
double stdev(const std::vector<double>& x) {
  if (x.size() < 2) return NAN;
  const double m = mean(x);
  double s = 0;
  for (double v : x) s += (v - m) * (v - m);
  return std::sqrt(s / (x.size() - 1));
}

// The 97.5% quantile of Student's t with `df` degrees of freedom.
double t975(size_t df) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return NAN;
  if (df <= 30) return table[df - 1];
  return df <= 60 ? 2.00 : 1.96;
}

std::string pct(double ratio) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * (ratio - 1));
  return b;
}

double quantile(const std::vector<double>& sorted, double q) {
  const double at = q * (sorted.size() - 1);
  const size_t i = static_cast<size_t>(at);
  const double f = at - i;
  return i + 1 < sorted.size() ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

}  // namespace

Spread spread(std::vector<double> xs) {
  Spread s;
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](double v) { return !std::isfinite(v); }),
           xs.end());
  s.n = xs.size();
  if (xs.empty()) return s;
  std::sort(xs.begin(), xs.end());
  s.median = quantile(xs, 0.5), s.q1 = quantile(xs, 0.25), s.q3 = quantile(xs, 0.75);
  return s;
}

std::vector<double> steady_values(const Run& r, const std::string& key, size_t warmup) {
  std::vector<double> out;
  const size_t from = r.steps.size() > warmup ? warmup : 0;
  for (size_t i = from; i < r.steps.size(); ++i)
    if (std::isfinite(r.steps[i].get(key))) out.push_back(r.steps[i].get(key));
  return out;
}

// log q_i = log(b_i / a_i); estimate exp(mean), interval exp(mean +- t sd / sqrt(n)).
RatioEstimate paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  RatioEstimate r;
  std::vector<double> logs;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] > 0 && b[i] > 0) logs.push_back(std::log(b[i] / a[i]));
  r.rounds = logs.size();
  if (logs.empty()) return r;
  const double m = mean(logs);
  r.ratio = std::exp(m);
  if (logs.size() < 2) return r;
  r.sd_log = stdev(logs);
  const double half =
      t975(logs.size() - 1) * r.sd_log / std::sqrt(static_cast<double>(logs.size()));
  r.lo = std::exp(m - half), r.hi = std::exp(m + half);
  return r;
}

int64_t rounds_needed(double sd_log, double effect) {
  if (!(sd_log >= 0) || !(effect > 0)) return 0;
  const double n = std::pow((1.96 + 0.84) * sd_log / std::log1p(effect), 2);
  return std::max<int64_t>(3, static_cast<int64_t>(std::ceil(n)));
}

SpeedVerdict speed_verdict(const RatioEstimate& r, double min_effect, double effect) {
  SpeedVerdict v;
  char b[512];
  if (r.rounds < 2) {
    v.text =
        "step time: one round per config, so noise cannot be told from a difference; run --rounds "
        "5";
    return v;
  }
  const std::string ci =
      "95% CI " + pct(r.lo) + " .. " + pct(r.hi) + " over " + std::to_string(r.rounds) + " rounds";
  const bool excludes_one = r.lo > 1 || r.hi < 1;
  if (excludes_one && std::fabs(r.ratio - 1) >= min_effect) {
    v.sign = r.ratio > 1 ? 1 : -1;
    std::snprintf(b, sizeof b, "step time: B is %.1f%% %s than A (%s)",
                  100 * std::fabs(r.ratio - 1), v.sign > 0 ? "slower" : "faster", ci.c_str());
  } else if (excludes_one) {
    std::snprintf(b, sizeof b,
                  "step time: B/A %s (%s), below the %.1f%% threshold: no practical difference",
                  pct(r.ratio).c_str(), ci.c_str(), 100 * min_effect);
  } else {
    std::snprintf(b, sizeof b,
                  "step time: no difference detected at this noise level (B/A %s, %s); more rounds "
                  "are needed to "
                  "resolve a %.1f%% difference: about %lld",
                  pct(r.ratio).c_str(), ci.c_str(), 100 * effect,
                  (long long)rounds_needed(r.sd_log, effect));
  }
  v.text = b;
  return v;
}

LossVerdict loss_verdict(const std::vector<double>& a_final, const std::vector<double>& b_final,
                         const std::vector<double>& a_curve, const std::vector<double>& b_curve) {
  LossVerdict v;
  std::string text;
  auto judge = [&](const char* what, const std::vector<double>& a, const std::vector<double>& b,
                   bool& within) {
    const double ma = mean(a), mb = mean(b), sa = stdev(a), sb = stdev(b);
    const double band = 2 * (std::isfinite(sa) ? sa : 0.0);
    within = std::fabs(mb - ma) <= band;
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s loss: B %.4f (sd %.4f over %zu seeds) %s A's seed spread %.4f +- %.4f (2 sd "
                  "over %zu seeds)\n",
                  what, mb, std::isfinite(sb) ? sb : 0.0, b.size(),
                  within ? "lies within" : "lies OUTSIDE", ma, band, a.size());
    text += line;
  };
  judge("final", a_final, b_final, v.final_within);
  judge("curve-averaged", a_curve, b_curve, v.curve_within);
  v.text = text + (v.final_within && v.curve_within
                       ? "loss: no sign that B changes convergence beyond seed noise\n"
                       : "loss: B trains differently from A beyond seed-to-seed noise\n");
  return v;
}

// x: round i's A at i - 0.18, B at i + 0.18 (in slots of one round); y: step ms. Points are
// jittered within their box's width.
std::string svg_rounds(const std::vector<RoundTimes>& configs, const std::string& order_note) {
  double y0 = INFINITY, y1 = -INFINITY;
  size_t rounds = 0;
  for (const auto& c : configs) {
    rounds = std::max(rounds, c.rounds.size());
    for (const auto& r : c.rounds)
      for (double v : r) y0 = std::min(y0, v), y1 = std::max(y1, v);
  }
  const SvgFrame f(y0, y1);
  const double slot = f.plot_width() / std::max<size_t>(rounds, 1), box = slot * 0.28;
  auto px = [&](double r) { return f.left + (r + 0.5) * slot; };
  std::string out =
      f.open("rounds", "step time per round (" + order_note + ")", "round", "step ms");
  for (size_t r = 0; r < rounds; ++r) out += f.x_tick(px(r), std::to_string(r + 1));
  char b[512];
  for (size_t k = 0; k < configs.size(); ++k) {
    const auto& c = configs[k];
    const double offset = (k == 0 ? -0.18 : 0.18) * slot;
    for (size_t r = 0; r < c.rounds.size(); ++r) {
      const Spread s = spread(c.rounds[r]);
      if (!s.n) continue;
      const double x = px(r) + offset;
      std::snprintf(b, sizeof b,
                    "<rect class=\"box\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"none\" stroke=\"%s\"/>"
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"2\"/>\n",
                    x - box / 2, f.py(s.q3), box, std::max(f.py(s.q1) - f.py(s.q3), 0.5),
                    c.color.c_str(), x - box / 2, f.py(s.median), x + box / 2, f.py(s.median),
                    c.color.c_str());
      out += b;
      for (size_t i = 0; i < c.rounds[r].size(); ++i) {
        const double jitter = (static_cast<double>((i * 37) % 11) / 10 - 0.5) * box * 0.8;
        std::snprintf(
            b, sizeof b,
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"1.8\" fill=\"%s\" fill-opacity=\"0.5\"/>",
            x + jitter, f.py(c.rounds[r][i]), c.color.c_str());
        out += b;
      }
      out += "\n";
    }
    out += f.legend(k, c.name, c.color);
  }
  return out + "</svg>\n";
}

}  // namespace loom::report
