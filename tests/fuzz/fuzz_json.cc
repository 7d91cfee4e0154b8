// libFuzzer target: the JSON parser of checkpoint headers. Any input either parses or throws
// crumb::Error; anything else (a crash, a sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/base/error.h"
#include "engine/io/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    crumb::json::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz input");
  } catch (const crumb::Error&) {
  }
  return 0;
}
