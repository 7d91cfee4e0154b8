#include "tools/train/svg.h"

#include <cmath>
#include <cstdio>

#include "engine/base/error.h"

namespace crumb::train {

AttrValue::AttrValue(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", std::abs(v) < 0.005 ? 0.0 : v);
  text = buf;
  // "12.50" -> "12.5", "12.00" -> "12": coordinates of thousands of rectangles add up.
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
}

std::string xml_escape(const std::string& s, bool attribute) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += attribute ? "&quot;" : "\""; break;
      default: out += c;
    }
  }
  return out;
}

void XmlWriter::start(const char* tag, const Attrs& attrs) {
  out_ += '<';
  out_ += tag;
  for (const auto& [name, value] : attrs) out_ += std::string(" ") + name + "=\"" + xml_escape(value.text, true) + '"';
}

XmlWriter& XmlWriter::open(const char* tag, const Attrs& attrs) {
  start(tag, attrs);
  out_ += ">";
  open_.push_back(tag);
  return *this;
}

XmlWriter& XmlWriter::close() {
  CRUMB_CHECK(!open_.empty(), "XmlWriter: close() without an open element");
  out_ += std::string("</") + open_.back() + ">\n";
  open_.pop_back();
  return *this;
}

XmlWriter& XmlWriter::leaf(const char* tag, const Attrs& attrs, const std::string& text) {
  start(tag, attrs);
  out_ += text.empty() ? "/>\n" : ">" + xml_escape(text) + "</" + tag + ">\n";
  return *this;
}

XmlWriter& XmlWriter::titled(const char* tag, const Attrs& attrs, const std::string& title) {
  open(tag, attrs);
  out_ += "<title>" + xml_escape(title) + "</title>";
  return close();
}

XmlWriter& XmlWriter::text(const std::string& s) {
  out_ += xml_escape(s);
  return *this;
}

XmlWriter& XmlWriter::raw(const std::string& s) {
  out_ += s;
  return *this;
}

std::string XmlWriter::str() const {
  CRUMB_CHECK(open_.empty(), "XmlWriter: <", open_.back(), "> is still open");
  return out_;
}

void open_svg(XmlWriter& w, double width, double height, const Attrs& extra) {
  Attrs a = {{"xmlns", "http://www.w3.org/2000/svg"},
             {"width", width},
             {"height", height},
             {"viewBox", "0 0 " + AttrValue(width).text + " " + AttrValue(height).text},
             {"font-family", "DejaVu Sans, Helvetica, Arial, sans-serif"},
             {"font-size", 12}};
  a.insert(a.end(), extra.begin(), extra.end());
  w.open("svg", a);
  w.leaf("rect", {{"width", width}, {"height", height}, {"fill", "#ffffff"}});
}

}  // namespace crumb::train
