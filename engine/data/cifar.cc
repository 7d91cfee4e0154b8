#include "engine/data/cifar.h"

#include <cstdint>
#include <vector>

#include "engine/base/error.h"
#include "engine/io/input_file.h"

namespace crumb::data {
namespace {

// The whole CIFAR-10 training set is 153 MB; a file claiming much more is not one of its batches.
constexpr long long kMaxFileBytes = 1LL << 31;

// Appends the records of one file to ds.
void read_batch_file(const std::string& path, Dataset& ds) {
  const InputFile f(path, "CIFAR-10 file '" + path + "'",
                    "--data must name the folder of the binary version (data_batch_1.bin .. data_batch_5.bin, "
                    "test_batch.bin)");
  const long long size = static_cast<long long>(f.size());
  CRUMB_CHECK(f.size() <= uint64_t(kMaxFileBytes), f.name(), " is ", f.size(), " bytes, larger than any batch file");
  CRUMB_CHECK(size % kCifarRecordBytes == 0, f.name(), " is ", size, " bytes, not a whole number of ",
              kCifarRecordBytes, "-byte records (truncated or not a CIFAR-10 binary batch)");
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  f.read_at(bytes.data(), bytes.size(), 0);
  const long long records = size / kCifarRecordBytes;
  CRUMB_CHECK(ds.count + records <= (1LL << 30), "CIFAR-10: too many records in '", path, "'");
  ds.pixels.reserve(ds.pixels.size() + static_cast<std::size_t>(records) * (kCifarRecordBytes - 1));
  for (long long r = 0; r < records; ++r) {
    const unsigned char* rec = bytes.data() + r * kCifarRecordBytes;
    CRUMB_CHECK(rec[0] < 10, "CIFAR-10 file '", path, "': record ", r, " has label ", int(rec[0]),
                ", CIFAR-10 has 10 classes (0..9)");
    ds.labels.push_back(rec[0]);
    ds.pixels.insert(ds.pixels.end(), rec + 1, rec + kCifarRecordBytes);
  }
  ds.count += static_cast<int>(records);
}

}  // namespace

Dataset load_cifar10_split(const std::string& dir, const std::string& split) {
  CRUMB_CHECK(split == "train" || split == "test", "CIFAR-10 split must be train or test, got '", split, "'");
  Dataset ds;
  ds.channels = 3;
  ds.height = ds.width = 32;
  ds.num_classes = 10;
  if (split == "test") {
    read_batch_file(dir + "/test_batch.bin", ds);
  } else {
    for (int i = 1; i <= 5; ++i) read_batch_file(dir + "/data_batch_" + std::to_string(i) + ".bin", ds);
  }
  CRUMB_CHECK(ds.count > 0, "CIFAR-10 ", split, " files in '", dir, "' hold no records");
  return ds;
}

}  // namespace crumb::data
