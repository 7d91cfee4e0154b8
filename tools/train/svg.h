// A small writer of well-formed SVG (and XHTML around it): elements are opened and closed in order,
// attribute values and text are escaped, numbers are written short. Pictures are built with it rather
// than by pasting strings, so every file parses as XML.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace crumb::train {

// An attribute value as written: strings as given, numbers with at most two decimals.
struct AttrValue {
  std::string text;
  AttrValue(const char* s) : text(s) {}
  AttrValue(std::string s) : text(std::move(s)) {}
  AttrValue(double v);
  AttrValue(int v) : AttrValue(static_cast<double>(v)) {}
};
using Attrs = std::vector<std::pair<const char*, AttrValue>>;

// Escapes &, < and > (and " in attribute values). Character data keeps its quotes: inside an HTML
// <style>, "&quot;" would not be decoded back.
std::string xml_escape(const std::string& s, bool attribute = false);

class XmlWriter {
 public:
  XmlWriter& open(const char* tag, const Attrs& attrs = {});
  XmlWriter& close();  // the innermost open element
  // An element with escaped text content (none: <tag/>).
  XmlWriter& leaf(const char* tag, const Attrs& attrs = {}, const std::string& text = "");
  // An element holding a <title> (the hover text browsers show) and nothing else.
  XmlWriter& titled(const char* tag, const Attrs& attrs, const std::string& title);
  XmlWriter& text(const std::string& s);  // escaped character data
  XmlWriter& raw(const std::string& s);   // already well-formed markup (a nested picture)
  // The document; every element must be closed.
  std::string str() const;

 private:
  void start(const char* tag, const Attrs& attrs);
  std::string out_;
  std::vector<const char*> open_;
};

// Opens the root <svg> of a width x height picture (user units are pixels), with the fonts and the
// white background every picture shares.
void open_svg(XmlWriter& w, double width, double height, const Attrs& extra = {});

}  // namespace crumb::train
