// libFuzzer target: network descriptions (engine/train/network.h) as --model-file reads them (a file,
// engine/train/network_file.h), parsed and built for a small image and written back canonically. Any input
// either builds or throws crumb::Error; the file reads back as its bytes; a canonical text must parse to
// itself. Anything else (a crash, a sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/base/error.h"
#include "engine/train/network.h"
#include "engine/train/network_file.h"
#include "tests/fuzz/mem_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const crumb::fuzz::MemFile file(data, size);
  try {
    const std::string text = crumb::read_network_file(file.path());
    if (text != std::string(reinterpret_cast<const char*>(data), size)) std::abort();
    const std::string canonical = crumb::network_json(crumb::parse_network(text, "fuzz input"));
    if (crumb::network_json(crumb::parse_network(canonical, "canonical")) != canonical) std::abort();
    crumb::build_network(text, {3, 8, 8, 10});
  } catch (const crumb::Error&) {
  }
  return 0;
}
