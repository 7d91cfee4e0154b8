// libFuzzer target: the IDX reader (plain or gzip, Fashion-MNIST's format). Any input either reads or
// throws crumb::Error.
#include <cstddef>
#include <cstdint>

#include "engine/data/idx.h"
#include "engine/base/error.h"
#include "tests/fuzz/mem_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const crumb::fuzz::MemFile file(data, size);
  try {
    crumb::data::read_idx(file.path());
  } catch (const crumb::Error&) {
  }
  return 0;
}
