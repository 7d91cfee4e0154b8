// Writing: JSON objects of strings, numbers and booleans (ObjectWriter). Reading, in one of two grammars:
// - Subset: what safetensors headers use: objects, strings, non-negative integers and arrays of integers.
//   Anything else is rejected, so a corrupt header fails with a clear message instead of being
//   half-understood.
// - Full: JSON without null (network descriptions, engine/train/network.h): also booleans, negative and
//   fractional numbers, and arrays of any values.
// Only \" and \\ escapes are supported in either (names never need others). Strings must be UTF-8, as JSON
// requires: names reach checkpoint headers, which safetensors refuses otherwise.
#pragma once
#include <cstdint>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace crumb::json {

struct Value {
  // Integer: a non-negative integer literal; Number: any other number (Full grammar).
  enum class Kind { Object, String, Integer, Array, Number, Boolean };
  Kind kind = Kind::Object;
  std::vector<std::pair<std::string, Value>> members;  // Object, in file order
  std::string string;
  uint64_t integer = 0;
  double number = 0;
  bool boolean = false;
  std::vector<Value> items;  // Array (of Integers in the Subset grammar)

  const Value* find(const std::string& key) const;  // nullptr if absent or not an object
};

const char* kind_name(Value::Kind k);

// A JSON object written member by member, in order (train's summary, the run log's lines). A number
// that is not finite is written as null: JSON has no NaN or infinity.
class ObjectWriter {
 public:
  ObjectWriter& string(const std::string& key, const std::string& value);
  ObjectWriter& integer(const std::string& key, long long value);
  ObjectWriter& boolean(const std::string& key, bool value);
  // decimals < 0: the shortest form that round-trips a float ("%.9g"); else fixed with that many.
  ObjectWriter& number(const std::string& key, double value, int decimals = -1);
  std::string str() const { return text_ + "}"; }

 private:
  void key(const std::string& k);
  std::string text_ = "{";
};

enum class Grammar { Subset, Full };
// Parses one value followed only by whitespace. Errors name `source` and the byte offset.
Value parse(const std::string& text, const std::string& source, Grammar grammar = Grammar::Subset);
// `s` as a JSON string literal, quotes included. Throws on control characters and on text that is not UTF-8.
std::string quote(const std::string& s);

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). Where it is
// not, bad (if given) is set to the offset of the first byte that does not fit.
bool valid_utf8(std::string_view s, std::size_t* bad = nullptr);

}  // namespace crumb::json
