#include "tools/train/chart.h"

#include <algorithm>
#include <cmath>

#include "engine/strategy/memory_report.h"

namespace crumb::train {

double Scale::operator()(double v) const {
  if (!slots.empty()) {
    const double i = double(std::lower_bound(slots.begin(), slots.end(), v) - slots.begin());
    return p0 + (i + 0.5) * (p1 - p0) / double(slots.size());
  }
  const double t = log2 ? (std::log2(v) - std::log2(d0)) / (std::log2(d1) - std::log2(d0)) : (v - d0) / (d1 - d0);
  return p0 + (d1 == d0 ? 0.0 : t) * (p1 - p0);
}

namespace {

// The round step giving about five intervals over [0, max] in units of `unit`.
double round_step(double max, double unit) {
  const double raw = std::max(max / unit / 5.0, 1e-9);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double k : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (k * p >= raw) return k * p * unit;
  return 10 * p * unit;
}

std::vector<double> ticks_by(double max, double step) {
  std::vector<double> out;
  for (int i = 0; out.empty() || out.back() < max; ++i) out.push_back(i * step);
  return out;
}

}  // namespace

std::vector<double> byte_ticks(double max) {
  max = std::max(max, 1.0);
  const double unit = max >= double(1ull << 30) ? double(1ull << 30) : max >= double(1 << 20) ? double(1 << 20)
                      : max >= 1024                ? 1024.0
                                                   : 1.0;
  return ticks_by(max, std::max(1.0, round_step(max, unit)));
}

std::vector<double> count_ticks(double max) {
  max = std::max(max, 1.0);
  return ticks_by(max, std::max(1.0, round_step(max, 1.0)));
}

std::string byte_label(double bytes) {
  std::string s = format_bytes(static_cast<std::size_t>(std::llround(bytes)));
  const std::size_t space = s.find(' '), dot = s.find('.');
  if (dot == std::string::npos || dot > space) return s;
  std::size_t end = space;
  while (s[end - 1] == '0') --end;
  if (s[end - 1] == '.') --end;
  return s.substr(0, end) + s.substr(space);
}

std::string count_label(double v) {
  std::string digits = std::to_string(std::llround(v));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

std::vector<Tick> labelled(const std::vector<double>& values, std::string (*label)(double)) {
  std::vector<Tick> out;
  for (double v : values) out.push_back({v, label(v)});
  return out;
}

double text_width(const std::string& s, double font_size) { return 0.6 * font_size * static_cast<double>(s.size()); }

// Ticks past the end of an axis (round ticks overshoot its data) are left out.
bool on_axis(const Scale& s, double v) {
  if (!s.slots.empty()) return std::binary_search(s.slots.begin(), s.slots.end(), v);
  return v >= std::min(s.d0, s.d1) - 1e-9 && v <= std::max(s.d0, s.d1) + 1e-9;
}

void y_axis(XmlWriter& w, const Frame& f, const Scale& y, const std::vector<Tick>& ticks, const std::string& title) {
  for (const Tick& t : ticks) {
    if (!on_axis(y, t.value)) continue;
    const double py = y(t.value);
    w.leaf("line", {{"x1", f.left}, {"x2", f.right()}, {"y1", py}, {"y2", py}, {"stroke", "#e3e3e3"}});
    w.leaf("text", {{"x", f.left - 6}, {"y", py + 4}, {"text-anchor", "end"}, {"fill", "#333"}}, t.label);
  }
  const double cx = f.left - 70, cy = f.top + f.height / 2;
  w.leaf("text",
         {{"x", cx}, {"y", cy}, {"text-anchor", "middle"}, {"font-size", 13},
          {"transform", "rotate(-90 " + AttrValue(cx).text + " " + AttrValue(cy).text + ")"}},
         title);
}

void x_axis(XmlWriter& w, const Frame& f, const Scale& x, const std::vector<Tick>& ticks, const std::string& title,
            const std::vector<double>& bold) {
  w.leaf("line", {{"x1", f.left}, {"x2", f.right()}, {"y1", f.bottom()}, {"y2", f.bottom()}, {"stroke", "#555"}});
  double last_right = -1e9;
  for (const Tick& t : ticks) {
    if (!on_axis(x, t.value)) continue;
    const double px = x(t.value);
    const bool strong = std::find(bold.begin(), bold.end(), t.value) != bold.end();
    const double half = text_width(t.label, 12) / 2;
    w.leaf("line", {{"x1", px}, {"x2", px}, {"y1", f.bottom()}, {"y2", f.bottom() + 5}, {"stroke", "#555"}});
    if (!strong && px - half < last_right + 6) continue;
    w.leaf("text",
           {{"x", px}, {"y", f.bottom() + 19}, {"text-anchor", "middle"}, {"fill", "#333"},
            {"font-weight", strong ? "bold" : "normal"}},
           t.label);
    last_right = px + half;
  }
  w.leaf("text", {{"x", f.left + f.width / 2}, {"y", f.bottom() + 40}, {"text-anchor", "middle"}, {"font-size", 13}},
         title);
}

void reference_line(XmlWriter& w, const Frame& f, double y, const char* colour, const char* dash) {
  w.leaf("line", {{"x1", f.left}, {"x2", f.right()}, {"y1", y}, {"y2", y}, {"stroke", colour}, {"stroke-width", 2},
                  {"stroke-dasharray", dash}});
}

void legend(XmlWriter& w, double x, double y, double max_width, const std::vector<LegendItem>& items) {
  double cx = x;
  for (const LegendItem& item : items) {
    const double width = 22 + text_width(item.label, 12) + 14;
    if (cx > x && cx + width > x + max_width) cx = x, y += 18;
    if (item.kind == LegendItem::Kind::Marker)
      w.leaf("path", {{"d", diamond(cx + 7, y - 5, 6)}, {"fill", item.colour}});
    else if (item.kind == LegendItem::Kind::Line)
      w.leaf("line", {{"x1", cx}, {"x2", cx + 16}, {"y1", y - 5}, {"y2", y - 5}, {"stroke", item.colour},
                      {"stroke-width", 2}, {"stroke-dasharray", item.dash}});
    else
      w.leaf("rect", {{"x", cx}, {"y", y - 10}, {"width", 14}, {"height", 11}, {"fill", item.colour},
                      {"stroke", "#666"}, {"stroke-width", 0.5}});
    w.leaf("text", {{"x", cx + 20}, {"y", y}}, item.label);
    cx += width;
  }
}

std::string diamond(double x, double y, double r) {
  return "M" + AttrValue(x).text + " " + AttrValue(y - r).text + " l" + AttrValue(r).text + " " + AttrValue(r).text +
         " l-" + AttrValue(r).text + " " + AttrValue(r).text + " l-" + AttrValue(r).text + " -" + AttrValue(r).text +
         " z";
}

void heading(XmlWriter& w, const std::string& title, const std::string& subtitle) {
  w.leaf("text", {{"x", 16}, {"y", 24}, {"font-size", 16}, {"font-weight", "bold"}}, title);
  w.leaf("text", {{"x", 16}, {"y", 42}, {"fill", "#555"}}, subtitle);
}

}  // namespace crumb::train
