#include "report/svg.hpp"

#include <cmath>
#include <cstdio>

namespace loom::report {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

SvgFrame::SvgFrame(double lo, double hi) : y0(lo), y1(hi) {
  if (!std::isfinite(y0) || !std::isfinite(y1)) y0 = 0, y1 = 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
}

std::string SvgFrame::open(const std::string& css_class, const std::string& title,
                           const std::string& xlabel, const std::string& ylabel) const {
  char b[1024];  // the longest snprintf below (the axes and their labels) is ~450 characters
  std::string out = "<svg" + (css_class.empty() ? "" : " class=\"" + css_class + "\"") +
                    " xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"320\" "
                    "role=\"img\" aria-label=\"" +
                    html_escape(title) +
                    "\">\n<rect width=\"640\" height=\"320\" fill=\"white\"/>\n";
  std::snprintf(b, sizeof b, "<text x=\"%.0f\" y=\"18\" font-weight=\"bold\">%s</text>\n", left,
                html_escape(title).c_str());
  out += b;
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + (y1 - y0) * i / 4;
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/><text "
                  "x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"end\" font-size=\"11\">%.4g</text>\n",
                  left, py(y), w - right, py(y), left - 4, py(y) + 4, y);
    out += b;
  }
  std::snprintf(b, sizeof b,
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/><line "
                "x1=\"%.0f\" y1=\"%.0f\" "
                "x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n<text x=\"%.0f\" y=\"%.0f\" "
                "text-anchor=\"middle\" "
                "font-size=\"12\">%s</text><text x=\"12\" y=\"%.0f\" font-size=\"12\" "
                "transform=\"rotate(-90 12 %.0f)\" "
                "text-anchor=\"middle\">%s</text>\n",
                left, h - bottom, w - right, h - bottom, left, top, left, h - bottom,
                (left + w - right) / 2, h - 6, html_escape(xlabel).c_str(), (top + h - bottom) / 2,
                (top + h - bottom) / 2, html_escape(ylabel).c_str());
  return out + b;
}

std::string SvgFrame::legend(size_t k, const std::string& name, const std::string& color) const {
  char b[512];
  std::snprintf(b, sizeof b, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\" font-size=\"12\">%s</text>\n",
                w - right + 8, top + 16 + 16.0 * k, color.c_str(), html_escape(name).c_str());
  return b;
}

std::string SvgFrame::x_tick(double x, const std::string& label) const {
  char b[256];
  std::snprintf(b, sizeof b,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n",
                x, h - bottom + 16, html_escape(label).c_str());
  return b;
}

}  // namespace loom::report
