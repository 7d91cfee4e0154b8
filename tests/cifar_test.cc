// The CIFAR-10 binary reader: order and layout of records across the five batch files, and one clear
// error for every malformed folder or file (damaged files included).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/data/cifar.h"
#include "engine/data/loader.h"
#include "engine/base/error.h"
#include "tests/cifar_files.h"

namespace crumb::data {
namespace {

namespace fs = std::filesystem;

class Cifar : public ::testing::Test {
 protected:
  void SetUp() override { test::write_cifar_dir(dir_, {2, 0, 3, 1, 1}, 2); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string error_of(const std::string& split) {
    try {
      load_cifar10_split(dir_.string(), split);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir_ = fs::temp_directory_path() / ("crumb_cifar_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(Cifar, ReadsTheFiveBatchesInOrder) {
  const Dataset train = load_cifar10_split(dir_.string(), "train");
  ASSERT_EQ(train.count, 7);  // 2 + 0 + 3 + 1 + 1: any number of records per file, empty included
  EXPECT_EQ(train.channels, 3);
  EXPECT_EQ(train.height, 32);
  EXPECT_EQ(train.width, 32);
  EXPECT_EQ(train.sample_size(), 3072);
  // (file, record) of each sample, in reading order.
  const int order[7][2] = {{1, 0}, {1, 1}, {3, 0}, {3, 1}, {3, 2}, {4, 0}, {5, 0}};
  for (int s = 0; s < 7; ++s) {
    const auto [file, record] = order[s];
    EXPECT_EQ(train.labels[s], (file + record) % 10) << s;
    for (int b : {0, 1023, 1024, 2047, 2048, 3071})  // first and last byte of the R, G and B planes
      EXPECT_EQ(train.pixels[std::size_t(s) * 3072 + b], test::cifar_pixel(file, record, b)) << s << " " << b;
  }
  const Dataset test = load_cifar10_split(dir_.string(), "test");
  EXPECT_EQ(test.count, 2);
  EXPECT_EQ(test.labels[1], 1);
}

TEST_F(Cifar, MalformedFoldersAndFilesAreClearErrors) {
  EXPECT_NE(error_of("validation").find("split must be train or test"), std::string::npos);
  fs::remove(dir_ / "data_batch_3.bin");
  EXPECT_NE(error_of("train").find("data_batch_3.bin': not found; --data must name the folder"), std::string::npos);
  fs::create_directory(dir_ / "data_batch_3.bin");
  EXPECT_NE(error_of("train").find("data_batch_3.bin': not a regular file (a folder)"), std::string::npos);
  fs::remove(dir_ / "data_batch_3.bin");
  test::write_cifar_dir(dir_, {1, 1, 1, 1, 1}, 0);
  EXPECT_NE(error_of("test").find("hold no records"), std::string::npos);
  std::ofstream(dir_ / "test_batch.bin", std::ios::binary) << "short";
  EXPECT_NE(error_of("test").find("not a whole number of 3073-byte records"), std::string::npos);
  {
    std::string record(kCifarRecordBytes, '\0');
    record[0] = 10;
    std::ofstream(dir_ / "test_batch.bin", std::ios::binary) << record;
  }
  EXPECT_NE(error_of("test").find("record 0 has label 10"), std::string::npos);
}

// Truncated or overwritten files load or fail with one crumb::Error, never a crash (run under
// AddressSanitizer in CI).
TEST_F(Cifar, DamagedFilesNeverCrash) {
  const fs::path file = dir_ / "test_batch.bin";
  std::string good;
  {
    std::ifstream f(file, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t rng = 12345;
  auto next = [&] { return rng = rng * 6364136223846793005ull + 1442695040888963407ull, rng >> 33; };
  int errors = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string bad = good;
    if (trial % 2) bad.resize(next() % (bad.size() + 1));
    else bad[next() % bad.size()] = char(next());
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
    try {
      load_cifar10_split(dir_.string(), "test");
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 90);  // nearly every truncation is caught; a flipped pixel byte is a valid file
}

// Per-channel normalisation: each of R, G, B gets its own mean and std.
TEST_F(Cifar, LoaderNormalisesEachChannel) {
  const Dataset test = load_cifar10_split(dir_.string(), "test");
  Loader loader(test, 2, kCifar10Norm, LoaderOptions::in_order());
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  for (int c = 0; c < 3; ++c) {
    const int byte = c * 1024 + 5;
    const float want = (test.pixels[byte] / 255.f - kCifar10Norm.mean[c]) / kCifar10Norm.std[c];
    EXPECT_FLOAT_EQ(b.x[byte], want) << "channel " << c;
  }
  EXPECT_THROW(Loader(test, 2, Normalization({0.5f, 0.5f}, {1.f, 1.f}), LoaderOptions::in_order()),
               Error);  // 2 pairs, 3 channels
}

}  // namespace
}  // namespace crumb::data
