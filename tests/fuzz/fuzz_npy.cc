// libFuzzer target: the .npy reader (--dataset npy). An input is a 2-byte little-endian length L, then
// L bytes of images (x.npy), then the labels (y.npy). Any input either loads, with every mapped sample
// readable (through the map's guarded reads, as the loader reads them), or throws crumb::Error.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/base/error.h"
#include "engine/data/npy.h"
#include "engine/io/mapped_file.h"
#include "tests/fuzz/mem_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t split = std::min<std::size_t>(size - 2, data[0] | data[1] << 8);
  const crumb::fuzz::MemFile x(data + 2, split), y(data + 2 + split, size - 2 - split);
  try {
    const crumb::data::Dataset ds = crumb::data::load_npy(x.path(), y.path());
    // Touch every mapped byte: a size check that let the shape run past the file would fault here.
    const std::size_t bytes = std::size_t(ds.count) * ds.sample_size() *
                              (ds.pixel_type() == crumb::data::PixelType::F32 ? sizeof(float) : 1);
    const auto* p = static_cast<const volatile uint8_t*>(ds.samples());
    uint8_t sum = 0;
    if (bytes && !ds.mapped.file) __builtin_trap();
    if (bytes)
      ds.mapped.file->read([&] {
        for (std::size_t i = 0; i < bytes; ++i) sum = static_cast<uint8_t>(sum + p[i]);
      });
    for (int32_t label : ds.labels)
      if (label < 0 || label >= ds.num_classes) __builtin_trap();
    (void)sum;
  } catch (const crumb::Error&) {
  }
  return 0;
}
