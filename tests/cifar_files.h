// Small CIFAR-10 binary batch files for tests: record r of file i gets label (i + r) % 10 and pixels
// derived from (i, r, byte), so a reader's order and layout can be checked byte for byte.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/cifar.h"

namespace crumb::test {

inline uint8_t cifar_pixel(int file, int record, int byte) { return uint8_t(file * 37 + record * 11 + byte * 7); }

// Writes data_batch_1..5.bin with train_records[i] records each and test_batch.bin with test_records.
inline void write_cifar_dir(const std::filesystem::path& dir, const std::vector<int>& train_records, int test_records) {
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, int file, int records) {
    std::ofstream f(dir / name, std::ios::binary);
    for (int r = 0; r < records; ++r) {
      f.put(char((file + r) % 10));
      for (int b = 0; b < data::kCifarRecordBytes - 1; ++b) f.put(char(cifar_pixel(file, r, b)));
    }
  };
  for (int i = 0; i < 5; ++i) write("data_batch_" + std::to_string(i + 1) + ".bin", i + 1, train_records[i]);
  write("test_batch.bin", 0, test_records);
}

}  // namespace crumb::test
