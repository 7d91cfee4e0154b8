#include "engine/io/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "engine/base/error.h"

namespace crumb::json {
namespace {

// Nesting bound, so a hostile header of "{"a":{"a":{... cannot overflow the stack.
constexpr int kMaxDepth = 16;

// A byte as it may appear in a one-line message: garbage headers hold newlines and binary.
std::string shown(char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02x", static_cast<unsigned char>(c));
  return buf;
}

class Parser {
 public:
  Parser(const std::string& text, const std::string& source, Grammar grammar)
      : s_(text), source_(source), full_(grammar == Grammar::Full) {}

  Value document() {
    Value v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected ", shown(s_[i_]), " after the end of the JSON value");
    return v;
  }

 private:
  template <class... A>
  [[noreturn]] void fail(const A&... a) const {
    CRUMB_FAIL(source_, ": invalid JSON at byte ", i_, ": ", a...);
  }

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  char peek() {
    skip_ws();
    if (i_ == s_.size()) fail("unexpected end of input");
    return s_[i_];
  }

  void expect(char c) {
    if (peek() != c) fail("expected '", c, "', found ", shown(s_[i_]));
    ++i_;
  }

  Value value(int depth) {
    const char c = peek();
    Value v;
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth) fail("objects or arrays nested deeper than ", kMaxDepth);
      if (c == '{')
        object(v, depth);
      else
        array(v, depth);
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.string = string();
    } else if (c >= '0' && c <= '9' && !full_) {
      v.kind = Value::Kind::Integer;
      v.integer = integer();
    } else if (((c >= '0' && c <= '9') || c == '-') && full_) {
      number(v);
    } else if ((c == 't' || c == 'f') && full_) {
      v.kind = Value::Kind::Boolean;
      v.boolean = c == 't';
      const std::string word = v.boolean ? "true" : "false";
      if (s_.compare(i_, word.size(), word) != 0) fail("unsupported value starting with ", shown(c));
      i_ += word.size();
    } else {
      fail("unsupported value starting with ", shown(c),
           full_ ? " (null is not supported)" : " (only objects, strings, non-negative integers and arrays of them)");
    }
    return v;
  }

  void object(Value& v, int depth) {
    v.kind = Value::Kind::Object;
    expect('{');
    if (peek() == '}') {
      ++i_;
      return;
    }
    std::unordered_set<std::string> seen;
    while (true) {
      if (peek() != '"') fail("expected a string key");
      std::string key = string();
      if (!seen.insert(key).second) fail("duplicate key \"", key, "\"");
      expect(':');
      v.members.emplace_back(std::move(key), value(depth + 1));
      if (peek() == '}') {
        ++i_;
        return;
      }
      expect(',');
    }
  }

  void array(Value& v, int depth) {
    v.kind = Value::Kind::Array;
    expect('[');
    if (peek() == ']') {
      ++i_;
      return;
    }
    while (true) {
      const char c = peek();
      if (!full_ && (c < '0' || c > '9')) fail("arrays may only hold non-negative integers, found ", shown(c));
      v.items.push_back(value(depth + 1));
      if (peek() == ']') {
        ++i_;
        return;
      }
      expect(',');
    }
  }

  // A JSON number: an Integer when it is a non-negative integer literal that fits, else a Number.
  void number(Value& v) {
    const std::size_t start = i_;
    if (s_[i_] == '-') ++i_;
    auto digits = [&] {
      const std::size_t from = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == from) fail("a number needs digits");
      return i_ - from;
    };
    const std::size_t int_start = i_;
    if (digits() > 1 && s_[int_start] == '0') fail("integer with a leading zero");
    const bool integral = s_[start] != '-' && (i_ == s_.size() || (s_[i_] != '.' && s_[i_] != 'e' && s_[i_] != 'E'));
    if (integral) {
      i_ = start;
      v.kind = Value::Kind::Integer;
      v.integer = integer();
      v.number = static_cast<double>(v.integer);
      return;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
    v.kind = Value::Kind::Number;
    v.number = std::strtod(s_.substr(start, i_ - start).c_str(), nullptr);
    if (!std::isfinite(v.number)) fail("number out of range");
  }

  uint64_t integer() {
    const std::size_t start = i_;
    uint64_t n = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(s_[i_] - '0');
      if (n > (UINT64_MAX - d) / 10) fail("integer does not fit in 64 bits");
      n = n * 10 + d;
      ++i_;
    }
    if (i_ - start > 1 && s_[start] == '0') fail("integer with a leading zero");
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) fail("only integers are supported");
    return n;
  }

  std::string string() {
    const std::size_t start = ++i_;  // after the opening quote
    std::string out;
    while (true) {
      if (i_ == s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') {
        // The literal as written (its escapes are ASCII), so that the error names the byte in the text.
        std::size_t bad = 0;
        if (!valid_utf8(std::string_view(s_).substr(start, i_ - 1 - start), &bad)) {
          i_ = start + bad;
          fail("a string that is not UTF-8 (", shown(s_[i_]), "); save the text as UTF-8");
        }
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ == s_.size()) fail("unterminated string");
      const char e = s_[i_++];
      if (e != '"' && e != '\\') fail("unsupported escape \\ followed by ", shown(e), " (only \\\" and \\\\)");
      out += e;
    }
  }

  const std::string& s_;
  const std::string& source_;
  const bool full_;
  std::size_t i_ = 0;
};

}  // namespace

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  for (const auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Object: return "an object";
    case Value::Kind::String: return "a string";
    case Value::Kind::Integer: return "an integer";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Number: return "a number";
    case Value::Kind::Boolean: return "a boolean";
  }
  return "?";
}

Value parse(const std::string& text, const std::string& source, Grammar grammar) {
  return Parser(text, source, grammar).document();
}

bool valid_utf8(std::string_view s, std::size_t* bad) {
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    // Lead byte: the sequence length and the range its second byte must be in (which rules out overlong
    // forms, surrogates and code points past U+10FFFF); continuation bytes after it are 0x80-0xbf.
    int len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80) len = 1;
    else if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c == 0xe0) len = 3, lo = 0xa0;
    else if (c == 0xed) len = 3, hi = 0x9f;
    else if (c >= 0xe1 && c <= 0xef) len = 3;
    else if (c == 0xf0) len = 4, lo = 0x90;
    else if (c == 0xf4) len = 4, hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3) len = 4;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xbf;
    }
    if (!ok) {
      if (bad) *bad = i;
      return false;
    }
    i += len;
  }
  return true;
}

std::string quote(const std::string& s) {
  std::size_t bad = 0;
  CRUMB_CHECK(valid_utf8(s, &bad), "cannot write \"", s.substr(0, bad), "...\" as JSON: byte ", bad,
              " is not UTF-8 (names and text in JSON and checkpoint headers must be UTF-8)");
  std::string out = "\"";
  for (char c : s) {
    CRUMB_CHECK(static_cast<unsigned char>(c) >= 0x20, "cannot write control characters in JSON string \"", s, "\"");
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void ObjectWriter::key(const std::string& k) {
  if (text_.size() > 1) text_ += ',';
  text_ += quote(k) + ':';
}

ObjectWriter& ObjectWriter::string(const std::string& k, const std::string& value) {
  key(k);
  text_ += quote(value);
  return *this;
}

ObjectWriter& ObjectWriter::integer(const std::string& k, long long value) {
  key(k);
  text_ += std::to_string(value);
  return *this;
}

ObjectWriter& ObjectWriter::boolean(const std::string& k, bool value) {
  key(k);
  text_ += value ? "true" : "false";
  return *this;
}

ObjectWriter& ObjectWriter::number(const std::string& k, double value, int decimals) {
  key(k);
  if (!std::isfinite(value)) {
    text_ += "null";
    return *this;
  }
  char buf[64];
  if (decimals < 0)
    std::snprintf(buf, sizeof buf, "%.9g", value);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  text_ += buf;
  return *this;
}

}  // namespace crumb::json
