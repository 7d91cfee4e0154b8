// --dataset npy (engine/data/npy.h): .npy files written here byte by byte, read back mapped; every defect
// is one error line naming the file; a mapped data set trains exactly like the same data in memory.
#include "engine/data/npy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/data/loader.h"
#include "engine/train/trainer.h"
#include "tests/npy_files.h"
#include "tests/test_util.h"
#include "tests/trained_model.h"

namespace crumb::data {
namespace {

namespace fs = std::filesystem;
using test::npy;

// A literal's bytes, NULs included.
template <std::size_t N>
std::string bytes_of(const char (&s)[N]) {
  return std::string(s, N - 1);
}

// A fresh folder per test, removed afterwards.
class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("npy_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  fs::path dir_;
};

std::vector<uint8_t> bytes_0_to(int n) {
  std::vector<uint8_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
  return v;
}

TEST_F(NpyFiles, MappedImagesAndLabelsWithTheLastTenthHeldOut) {
  const std::vector<uint8_t> x = bytes_0_to(20 * 6);
  std::vector<int64_t> y(20);
  for (int i = 0; i < 20; ++i) y[i] = i % 3;
  write("x.npy", npy("|u1", "(20, 1, 2, 3)", x));
  write("y.npy", npy("<i8", "(20,)", y));
  Dataset train, test;
  load_npy_dir(dir_.string(), train, test);
  EXPECT_EQ(train.count, 18);
  EXPECT_EQ(test.count, 2);
  EXPECT_EQ(train.num_classes, 3);
  EXPECT_EQ(test.num_classes, 3);
  EXPECT_EQ(train.channels * 100 + train.height * 10 + train.width, 123);
  EXPECT_TRUE(train.pixels.empty()) << "mapped samples must not be copied";
  EXPECT_EQ(train.pixel_type(), PixelType::U8);
  const uint8_t* px = static_cast<const uint8_t*>(train.samples());
  EXPECT_TRUE(std::equal(px, px + 18 * 6, x.begin()));
  const uint8_t* tx = static_cast<const uint8_t*>(test.samples());
  EXPECT_TRUE(std::equal(tx, tx + 2 * 6, x.begin() + 18 * 6));
  EXPECT_EQ(test.labels, (std::vector<int32_t>{0, 1}));
  // The loader reads them in place, normalised to [-1, 1].
  Loader loader(test, 2, kNpyU8Norm, LoaderOptions::in_order());
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.x[i], (float(x[18 * 6 + i]) / 255.f - 0.5f) / 0.5f);
}

TEST_F(NpyFiles, Float32ImagesAndATestSet) {
  const std::vector<float> x = {1.5f, -2.f, 1e-3f, 4.f, 0.f, -7.25f}, xt = {9.f, 8.f};
  write("x.npy", npy("<f4", "(3, 2, 1, 1)", x));
  write("y.npy", npy("|u1", "(3,)", std::vector<uint8_t>{4, 0, 2}));
  write("x_test.npy", npy("<f4", "(1, 2, 1, 1)", xt));
  write("y_test.npy", npy("<i4", "(1,)", std::vector<int32_t>{3}));
  Dataset train, test;
  load_npy_dir(dir_.string(), train, test);
  EXPECT_EQ(train.count, 3);
  EXPECT_EQ(train.num_classes, 5);
  EXPECT_EQ(test.count, 1);
  EXPECT_EQ(test.labels, std::vector<int32_t>{3});
  EXPECT_EQ(train.pixel_type(), PixelType::F32);
  Loader loader(train, 3, kNpyF32Norm, LoaderOptions::in_order());
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(std::vector<float>(b.x, b.x + 6), x) << "float32 samples are taken as they are";
  EXPECT_EQ(std::vector<int32_t>(b.y, b.y + 3), (std::vector<int32_t>{4, 0, 2}));
  // Version 2 headers (4-byte length) read alike.
  write("x_test.npy", npy("<f4", "(1, 2, 1, 1)", xt.data(), 8, "False", 2));
  load_npy_dir(dir_.string(), train, test);
  EXPECT_EQ(static_cast<const float*>(test.samples())[1], 8.f);
}

// Class counts are the largest label + 1, computed in 64 bits: a stray large label gives that many classes
// (for the budget to refuse, engine/strategy), up to the largest count an int holds.
TEST_F(NpyFiles, LargeLabelsGiveTheirClassCountExactly) {
  write("x.npy", npy("|u1", "(4, 1, 1, 1)", std::vector<uint8_t>{1, 2, 3, 4}));
  for (int64_t label : {int64_t{100000000}, int64_t{INT32_MAX} - 1}) {
    write("y.npy", npy("<i8", "(4,)", std::vector<int64_t>{0, 1, label, 1}));
    Dataset train, test;
    load_npy_dir(dir_.string(), train, test);
    EXPECT_EQ(train.num_classes, label + 1);
    EXPECT_EQ(train.images, path("x.npy"));
    EXPECT_EQ(train.first, 0);
    EXPECT_EQ(test.first, 3) << "the held-out tail starts at image 3 of x.npy";
  }
}

// Each defect: the file it is in, its bytes, and what the one error line must say.
TEST_F(NpyFiles, EveryDefectIsOneErrorLineNamingTheFile) {
  const std::vector<uint8_t> x = bytes_0_to(4 * 4);
  const std::string good_x = npy("|u1", "(4, 1, 2, 2)", x), good_y = npy("<i8", "(4,)", std::vector<int64_t>{0, 1, 2, 1});
  struct Case {
    const char* file;
    std::string bytes;
    const char* says;
  };
  std::string bad_version = good_x;
  bad_version[6] = 9;
  const std::vector<Case> cases = {
      {"x.npy", "", "not a .npy file"},
      {"x.npy", "PK\x03\x04 not numpy at all", "not a .npy file"},
      {"x.npy", bad_version, "version 9.0 is not supported"},
      {"x.npy", good_x.substr(0, 40), "truncated .npy header (118 bytes announced, 30 there)"},
      {"x.npy", npy("|u1", "(4, 1, 2, 2)", x).replace(10, 1, "["), "expected '{'"},
      {"x.npy", bytes_of("\x93NUMPY\x01\x00\x10\x00{'shape': (4,)}\n"), "lacks descr"},
      {"x.npy", bytes_of("\x93NUMPY\x01\x00\x12\x00{'colour': 'red'}\n"), "unexpected key 'colour'"},
      {"x.npy", npy("<f8", "(4, 1, 2, 2)", std::vector<double>(16)), "uint8 or float32, got float64"},
      {"x.npy", npy(">f4", "(4, 1, 2, 2)", std::vector<float>(16)), "big-endian"},
      {"x.npy", npy("|u1", "(4, 1, 2, 2)", x.data(), x.size(), "True"), "Fortran order"},
      {"x.npy", npy("|u1", "(4, 2, 2)", x), "shape (N, C, H, W), got 3 dimensions"},
      {"x.npy", npy("|u1", "(4, 0, 2, 2)", x.data(), 0), "every size >= 1"},
      {"x.npy", good_x.substr(0, good_x.size() - 3), "truncated: its shape and dtype need 16 bytes of data, the file holds 13"},
      {"x.npy", good_x + "xx", "2 bytes after the data"},
      {"x.npy", npy("<U4", "(4, 1, 2, 2)", std::vector<char>(64)), "uint8 or float32"},
      {"y.npy", npy("<f4", "(4,)", std::vector<float>(4)), "labels must be integers, got dtype float32"},
      {"y.npy", npy("<i8", "(4, 1)", std::vector<int64_t>(4)), "shape (N,)"},
      {"y.npy", npy("|i1", "(4,)", std::vector<int8_t>{0, 1, -1, 2}), "label -1 at index 2 is negative"},
      {"y.npy", npy("<i8", "(3,)", std::vector<int64_t>{0, 1, 2}), "holds 3 labels, but"},
      {"y.npy", npy("<u8", "(4,)", std::vector<uint64_t>{0, 1, uint64_t(1) << 40, 1}),
       "label 1099511627776 at index 2 would make 1099511627777 classes (the largest label + 1), more than the "
       "2147483647"},
      // The largest int32 label: its class count does not fit an int (it once wrapped to "every label is 0").
      {"y.npy", npy("<i4", "(4,)", std::vector<int32_t>{0, 1, INT32_MAX, 1}),
       "label 2147483647 at index 2 would make 2147483648 classes"},
      {"y.npy", npy("<i8", "(4,)", std::vector<int64_t>(4, 0)), "at least 2 classes"},
      {"y_test.npy", npy("<i2", "(4,)", std::vector<int16_t>{0, 3, 1, 1}), "label 3 at index 1 is not below the 3 classes"},
      {"x_test.npy", npy("|u1", "(4, 1, 4, 1)", x), "images are 1x4x1 but those of"},
      {"x_test.npy", npy("<f4", "(4, 1, 2, 2)", std::vector<float>(16)), "its dtype differs"},
  };
  for (const Case& c : cases) {
    write("x.npy", good_x);
    write("y.npy", good_y);
    fs::remove(dir_ / "x_test.npy");
    fs::remove(dir_ / "y_test.npy");
    if (std::string(c.file) == "y_test.npy") write("x_test.npy", good_x);
    if (std::string(c.file) == "x_test.npy") write("y_test.npy", good_y);
    write(c.file, c.bytes);
    const std::string msg = test::error_of([&] {
      Dataset train, test;
      load_npy_dir(dir_.string(), train, test);
    });
    EXPECT_NE(msg.find(path(c.file)), std::string::npos) << c.says << ": " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // A test set needs both files; a missing folder says which file it looked for.
  write("x.npy", good_x);
  write("y.npy", good_y);
  write("x_test.npy", good_x);
  fs::remove(dir_ / "y_test.npy");
  Dataset train, test;
  EXPECT_NE(test::error_of([&] { load_npy_dir(dir_.string(), train, test); }).find("a test set needs both"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { load_npy_dir(path("nowhere"), train, test); }).find(path("nowhere/x.npy") + ": not found"),
            std::string::npos);
}

// A header that misplaces the data for in-place reads of float32 (not at a multiple of 4 bytes).
TEST_F(NpyFiles, MisalignedDataIsAnError) {
  std::string bytes = npy("<f4", "(1, 1, 1, 1)", std::vector<float>{1.f});
  const std::size_t header_len = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  bytes.insert(10 + header_len - 1, " ");  // one more space before the newline
  bytes[8] = static_cast<char>((header_len + 1) & 255);
  const std::string msg = test::error_of([&] {
    parse_npy(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "a.npy");
  });
  EXPECT_NE(msg.find("a.npy: the data starts at byte 129, not a multiple of its 4-byte elements"), std::string::npos)
      << msg;
}

// A data file truncated while the loader reads it (numpy.save over a file in use) is one error in the
// caller's thread, naming the file, where the worker's read used to end the process with SIGBUS; so is
// one rewritten in place. The loader then needs start_epoch(), and keeps failing while the map is stale.
TEST_F(NpyFiles, AFileTruncatedWhileLoadingIsOneErrorNotASigbus) {
  // Images of 64 KiB each, so that most of them lie on pages past the truncated file's end.
  const int count = 40, sample = 1 << 16;
  write("x.npy", npy("|u1", "(40, 1, 256, 256)", std::vector<uint8_t>(std::size_t(count) * sample, 7)));
  std::vector<uint8_t> y(count);
  for (int i = 0; i < count; ++i) y[i] = i % 2;
  write("y.npy", npy("|u1", "(40,)", y));
  // An old modification time, so that the rewrite below gives another whatever the clock's resolution.
  fs::last_write_time(path("x.npy"), fs::last_write_time(path("x.npy")) - std::chrono::hours(1));
  Dataset train, test;
  load_npy_dir(dir_.string(), train, test);
  Loader loader(train, 12, kNpyU8Norm, LoaderOptions::shuffled(0));
  loader.set_micro_batch(4);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  fs::resize_file(path("x.npy"), 4096);
  // The worker may have assembled the next micro-batch before the truncation: at most that one passes.
  std::string msg = "no error";
  for (int i = 0; i < 3 && msg == "no error"; ++i)
    msg = test::error_of([&] { loader.next(); });
  EXPECT_EQ(msg.rfind(path("x.npy") + " was truncated while training (", 0), 0u) << msg;
  EXPECT_NE(msg.find("rename it over the old"), std::string::npos) << msg;
  EXPECT_NE(test::error_of([&] { loader.next(b); }).find("call start_epoch() before next()"), std::string::npos);
  loader.start_epoch(0);
  EXPECT_NE(test::error_of([&] { loader.next(b); }).find("was truncated while training"), std::string::npos);
  // Restored in place: the map still shows another file than the one loaded.
  write("x.npy", npy("|u1", "(40, 1, 256, 256)", std::vector<uint8_t>(std::size_t(count) * sample, 7)));
  loader.start_epoch(0);
  EXPECT_NE(test::error_of([&] { loader.next(b); }).find(path("x.npy") + " changed while training"), std::string::npos);
}

// A mapped data set trains to the same weights as the same samples held in memory.
TEST_F(NpyFiles, TrainsLikeTheSameDataInMemory) {
  const Dataset& ds = synthetic_dataset();
  std::vector<int64_t> labels(ds.labels.begin(), ds.labels.end());
  const std::string shape = "(" + std::to_string(ds.count) + ", 1, 16, 16)";
  write("x.npy", npy("|u1", shape, ds.pixels));
  write("y.npy", npy("<i8", "(" + std::to_string(ds.count) + ",)", labels));
  write("x_test.npy", npy("|u1", "(1, 1, 16, 16)", ds.pixels.data(), 256));
  write("y_test.npy", npy("<i8", "(1,)", labels.data(), 8));
  Dataset train, test;
  load_npy_dir(dir_.string(), train, test);
  ASSERT_EQ(train.count, ds.count);
  std::vector<char> weights[2];
  for (int i = 0; i < 2; ++i) {
    data::DataSplit split;
    split.train = i == 0 ? train : ds;
    split.test = test;
    split.norm = kNpyU8Norm;
    TrainConfig c;
    c.model = "lenet5";
    c.device = Device::CPU;
    c.batch = 48;
    c.micro_batch = 16;
    c.seed = 2;
    Trainer t(c, std::make_shared<const data::DataSplit>(std::move(split)));
    t.fit();
    const char* w = static_cast<const char*>(t.params().data_block());
    weights[i].assign(w, w + t.params().bytes());
  }
  EXPECT_TRUE(weights[0] == weights[1]) << "the mapped data set trained to other weights";
}

// Where python3 and numpy are installed, what numpy.save writes reads back.
TEST_F(NpyFiles, ReadsWhatNumpyWrites) {
  if (std::system("python3 -c 'import numpy' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3 with numpy";
  const std::string script =
      "import numpy as np; d='" + dir_.string() +
      "'; np.save(d + '/x.npy', np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5) / 7); "
      "np.save(d + '/y.npy', np.array([1, 0], dtype=np.int16)); "
      "np.save(d + '/x_test.npy', np.ones((1, 3, 4, 5), dtype=np.float32)); "
      "np.save(d + '/y_test.npy', np.array([1], dtype=np.uint32))";
  ASSERT_EQ(std::system(("python3 -c \"" + script + "\"").c_str()), 0);
  Dataset train, test;
  load_npy_dir(dir_.string(), train, test);
  EXPECT_EQ(train.count, 2);
  EXPECT_EQ(train.channels * 100 + train.height * 10 + train.width, 345);
  EXPECT_EQ(train.labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(static_cast<const float*>(train.samples())[119], 119.f / 7);
  EXPECT_EQ(test.labels, std::vector<int32_t>{1});
}

}  // namespace
}  // namespace crumb::data
