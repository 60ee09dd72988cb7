// The frame the report's charts draw in (inline SVG, no scripts): 640 x 320 pixels, a title, a
// y grid of five labelled ticks over the data's range padded by 5%, both axes with their labels,
// and a legend at the right. Each chart adds its x ticks and its marks.
#pragma once

#include <string>

namespace loom::report {

struct SvgFrame {
  static constexpr double w = 640, h = 320, left = 64, right = 120, top = 28, bottom = 40;
  double y0, y1;
  SvgFrame(double lo, double hi);  // the y range to show; empty or non-finite ranges get a default
  double py(double y) const { return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom); }
  double plot_width() const { return w - left - right; }
  // "<svg ...>", the title, the y grid, the axes and their labels; close with "</svg>\n".
  std::string open(const std::string& css_class, const std::string& title,
                   const std::string& xlabel, const std::string& ylabel) const;
  // Legend entry k: the name in its colour.
  std::string legend(size_t k, const std::string& name, const std::string& color) const;
  // An x tick label at pixel x.
  std::string x_tick(double x, const std::string& label) const;
};

// Text safe inside HTML and SVG.
std::string html_escape(const std::string& s);

}  // namespace loom::report
