// What every picture of the report shares, on top of the SVG writer: a plot frame, scales (linear or
// log2), round ticks (bytes in KiB/MiB/GiB, counts), labelled axes with grid lines, reference lines and
// legends.
#pragma once
#include <string>
#include <vector>

#include "tools/train/svg.h"

namespace crumb::train {

// The plotting area inside a picture, in pixels.
struct Frame {
  double left, top, width, height;
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

// Maps data [d0, d1] onto pixels [p0, p1], linearly or by log2 (positive data only); or, with slots, each
// of a few values (ascending) to the middle of an equal share of [p0, p1], so that close values (micro-batch
// sizes 63 and 64) stand apart as far as distant ones.
struct Scale {
  double d0, d1, p0, p1;
  bool log2 = false;
  std::vector<double> slots = {};
  double operator()(double v) const;
};

// Round tick values from 0 to at least max: bytes at 1, 2 or 5 (or 2.5) times a power of ten of the
// unit max is shown in; counts at 1, 2 or 5 times a power of ten.
std::vector<double> byte_ticks(double max);
std::vector<double> count_ticks(double max);
std::string byte_label(double bytes);  // format_bytes without trailing zero decimals: "1.5 MiB"
std::string count_label(double v);     // "12,345"

struct Tick {
  double value;
  std::string label;
};
std::vector<Tick> labelled(const std::vector<double>& values, std::string (*label)(double));

// Horizontal grid lines and labels on the left, and the axis title written upwards.
void y_axis(XmlWriter& w, const Frame& f, const Scale& y, const std::vector<Tick>& ticks, const std::string& title);
// Tick marks and labels below the frame (a label too close to the previous one is left out, unless
// `bold`: those are drawn in bold and always), and the axis title under them.
void x_axis(XmlWriter& w, const Frame& f, const Scale& x, const std::vector<Tick>& ticks, const std::string& title,
            const std::vector<double>& bold = {});
// A horizontal line across the frame at pixel y. Its value goes in the legend, not next to the line:
// lines a few pixels apart (an arena within 2% of its lower bound) would have overlapping labels.
void reference_line(XmlWriter& w, const Frame& f, double y, const char* colour, const char* dash);

struct LegendItem {
  enum class Kind { Swatch, Marker, Line };
  std::string colour, label;
  Kind kind = Kind::Swatch;
  const char* dash = "";  // Line: its stroke-dasharray
};
// A row of swatches and labels starting at (x, y), wrapping at max_width.
void legend(XmlWriter& w, double x, double y, double max_width, const std::vector<LegendItem>& items);
// The path of a diamond marker centred at (x, y) with half-diagonal r.
std::string diamond(double x, double y, double r);
// The picture's title, at the top left.
void heading(XmlWriter& w, const std::string& title, const std::string& subtitle);

// Width in pixels of a text at a font size, for deciding whether a label fits (DejaVu Sans averages
// 0.6 em per character).
double text_width(const std::string& s, double font_size);

}  // namespace crumb::train
