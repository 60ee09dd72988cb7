#include "report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/svg.hpp"

namespace loom::report {

namespace {

std::string fmt(const char* format, double v) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(a), 1e-30); }

// Steps 3.. when a run has more than 3: the first two pay for warm-up (page faults, probes).
size_t steady(const Run& r) { return r.steps.size() > 3 ? 2 : 0; }

// The largest peak resident set over the ranks (ranks.json), else rank 0's from the metrics.
double busiest(const Run& r) {
  if (r.peak_mem_per_rank.empty()) return r.max("peak_mem_bytes");
  return *std::max_element(r.peak_mem_per_rank.begin(), r.peak_mem_per_rank.end());
}

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;
};

Series series(const std::string& name, const std::string& color, const Run& r,
              const std::string& key) {
  Series s{name, color, {}};
  for (const auto& row : r.steps)
    if (std::isfinite(row.get(key))) s.points.push_back({row.get("step"), row.get(key)});
  return s;
}

// A line chart of the series against step, with five ticks on each axis and a legend. The second
// series is dashed, so that two curves that agree (the point of most comparisons) both show.
std::string svg_chart(const std::string& title, const std::string& ylabel,
                      const std::vector<Series>& all) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : all)
    for (auto [x, y] : s.points)
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  const SvgFrame f(y0, y1);
  auto px = [&](double x) { return f.left + (x - x0) / (x1 - x0) * f.plot_width(); };
  std::string out = f.open("", title, "step", ylabel);
  char b[64];
  for (int i = 0; i <= 4; ++i) {
    const double x = x0 + (x1 - x0) * i / 4;
    std::snprintf(b, sizeof b, "%.0f", x);
    out += f.x_tick(px(x), b);
  }
  for (size_t k = 0; k < all.size(); ++k) {
    out += "<polyline class=\"curve\" fill=\"none\" stroke-width=\"1.5\"" +
           std::string(k > 0 ? " stroke-dasharray=\"6 4\"" : "") + " stroke=\"" + all[k].color +
           "\" points=\"";
    for (auto [x, y] : all[k].points) {
      std::snprintf(b, sizeof b, "%.1f,%.1f ", px(x), f.py(y));
      out += b;
    }
    out += "\"/>\n" + f.legend(k, all[k].name + (k > 0 ? " (dashed)" : ""), all[k].color);
  }
  return out + "</svg>\n";
}

}  // namespace

Comparison compare_runs(const std::string& name_a, const Run& a, const std::string& name_b,
                        const Run& b, double rtol, std::vector<std::string> notes) {
  Comparison c;
  c.name_a = name_a;
  c.name_b = name_b;
  c.rtol = rtol;
  c.notes = std::move(notes);
  const double mib = 1048576.0;
  double exposed_a = a.mean("exposed_comm_ms", steady(a)) / a.mean("step_ms", steady(a));
  double exposed_b = b.mean("exposed_comm_ms", steady(b)) / b.mean("step_ms", steady(b));
  c.table = {
      {"tokens/s", a.mean("tokens_per_s", steady(a)), b.mean("tokens_per_s", steady(b)), "%.0f",
       true},
      {"MFU", 100 * a.mean("mfu", steady(a)), 100 * b.mean("mfu", steady(b)), "%.1f%%", true},
      {"step time (ms)", a.mean("step_ms", steady(a)), b.mean("step_ms", steady(b)), "%.1f", false},
      {"exposed comm share", 100 * exposed_a, 100 * exposed_b, "%.1f%%", false},
      {"peak memory, max rank (MiB)", busiest(a) / mib, busiest(b) / mib, "%.0f", false},
      {"activation memory/rank (MiB)", a.max("activation_bytes") / mib,
       b.max("activation_bytes") / mib, "%.1f", false},
      {"final loss", a.last("loss"), b.last("loss"), "%.4f", false},
      {"final val loss", a.last("val_loss"), b.last("val_loss"), "%.4f", false},
  };
  c.steps = std::min(a.steps.size(), b.steps.size());
  if (a.steps.size() != b.steps.size())
    c.notes.push_back("A has " + std::to_string(a.steps.size()) + " steps and B " +
                      std::to_string(b.steps.size()) + ": the first " + std::to_string(c.steps) +
                      " are compared");
  // Relative to A; a value non-finite in both runs agrees (both skipped that step), in one only
  // it does not.
  auto differ = [&](double x, double y, double& worst) {
    if (!std::isfinite(x) || !std::isfinite(y)) return std::isfinite(x) != std::isfinite(y);
    worst = std::max(worst, rel(x, y));
    return rel(x, y) > rtol;
  };
  for (size_t i = 0; i < c.steps; ++i) {
    const bool loss = differ(a.steps[i].get("loss"), b.steps[i].get("loss"), c.worst_loss);
    const bool grad =
        differ(a.steps[i].get("grad_norm"), b.steps[i].get("grad_norm"), c.worst_grad);
    if (c.diverged_at == 0 && (loss || grad))
      c.diverged_at = static_cast<int64_t>(a.steps[i].get("step"));
  }
  return c;
}

std::string describe(const Comparison& c) {
  std::string out;
  char b[256];
  std::snprintf(b, sizeof b, "%-30s %14s %14s %9s\n", "", c.name_a.c_str(), c.name_b.c_str(),
                "B/A");
  out += b;
  for (const auto& r : c.table) {
    const std::string ratio =
        std::isfinite(r.a) && std::isfinite(r.b) && r.a != 0 ? fmt("%.3f", r.b / r.a) : "-";
    std::snprintf(b, sizeof b, "%-30s %14s %14s %9s\n", r.what.c_str(), fmt(r.format, r.a).c_str(),
                  fmt(r.format, r.b).c_str(), ratio.c_str());
    out += b;
  }
  for (const auto& n : c.notes) out += "note: " + n + "\n";
  if (c.diverged_at)
    std::snprintf(b, sizeof b,
                  "DIVERGED at step %lld: loss or grad norm differ by more than rtol %.1e "
                  "(largest differences over the run: loss %.2e, grad norm %.2e)\n",
                  (long long)c.diverged_at, c.rtol, c.worst_loss, c.worst_grad);
  else
    std::snprintf(b, sizeof b,
                  "agree: %zu steps, loss within %.2e and grad norm within %.2e (rtol %.1e)\n",
                  c.steps, c.worst_loss, c.worst_grad, c.rtol);
  return out + b;
}

std::string html_report(const Comparison& c, const Run& a, const Run& b, const std::string& extra) {
  const std::string na = html_escape(c.name_a), nb = html_escape(c.name_b);
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>loom compare: " +
      na + " vs " + nb +
      "</title>\n<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:4px "
      "10px;text-align:right}th:first-child,td:first-child{text-align:left}"
      ".bad{color:#b00}.good{color:#070}</style></head><body>\n<h1>" +
      na + " vs " + nb + "</h1>\n";
  out += c.diverged_at
             ? "<p id=\"verdict\" class=\"bad\">Diverged at step " + std::to_string(c.diverged_at) +
                   " (rtol " + fmt("%.1e", c.rtol) + ").</p>\n"
             : "<p id=\"verdict\" class=\"good\">Agree over " + std::to_string(c.steps) +
                   " steps: loss within " + fmt("%.2e", c.worst_loss) + ", grad norm within " +
                   fmt("%.2e", c.worst_grad) + " (rtol " + fmt("%.1e", c.rtol) + ").</p>\n";
  out += extra;
  out += "<table id=\"summary\"><tr><th></th><th>" + na + "</th><th>" + nb +
         "</th><th>B/A</th></tr>\n";
  for (const auto& r : c.table) {
    const std::string ratio =
        std::isfinite(r.a) && std::isfinite(r.b) && r.a != 0 ? fmt("%.3f", r.b / r.a) : "-";
    out += "<tr><td>" + html_escape(r.what) + "</td><td>" + fmt(r.format, r.a) + "</td><td>" +
           fmt(r.format, r.b) + "</td><td>" + ratio + "</td></tr>\n";
  }
  out += "</table>\n";
  for (const auto& n : c.notes) out += "<p class=\"note\">" + html_escape(n) + "</p>\n";
  out +=
      svg_chart("training loss", "loss",
                {series(c.name_a, "#1f77b4", a, "loss"), series(c.name_b, "#d62728", b, "loss")});
  out += svg_chart(
      "gradient norm", "grad norm",
      {series(c.name_a, "#1f77b4", a, "grad_norm"), series(c.name_b, "#d62728", b, "grad_norm")});
  out += svg_chart(
      "step time", "ms",
      {series(c.name_a, "#1f77b4", a, "step_ms"), series(c.name_b, "#d62728", b, "step_ms")});
  return out + "</body></html>\n";
}

}  // namespace loom::report
