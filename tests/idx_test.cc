#include "engine/data/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/base/error.h"

namespace crumb::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& payload, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes pattern(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("crumb_idx_") + info->name() + "_" +
                                                 std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_plain(const std::string& name, const Bytes& b) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
    return path;
  }
  std::string write_gz(const std::string& name, const Bytes& b) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!b.empty()) {
      EXPECT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), int(b.size()));
    }
    gzclose(f);
    return path;
  }
  static Bytes slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }

  // Expects read_idx(path) to throw crumb::Error whose message names the file and contains `what`.
  static void expect_error(const std::string& path, const std::string& what) {
    try {
      read_idx(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  // Writes a split's image and label files, gzip-compressed like the Debian package.
  void write_split(const std::string& split, const Bytes& images, const Bytes& labels) {
    write_gz(split + "-images-idx3-ubyte.gz", images);
    write_gz(split + "-labels-idx1-ubyte.gz", labels);
  }
  static void expect_split_error(const std::string& dir, const std::string& file,
                                 const std::string& what) {
    try {
      load_mnist_split(dir, "train");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }

  fs::path dir_;
};

TEST_F(IdxTest, RoundTripPlainAndGzip) {
  const Bytes payload = pattern(3 * 4 * 5);
  const Bytes file = idx_bytes({3, 4, 5}, payload);
  for (const std::string& path : {write_plain("a.idx", file), write_gz("a.idx.gz", file)}) {
    const IdxArray a = read_idx(path);
    EXPECT_EQ(a.dims, (std::vector<int>{3, 4, 5})) << path;
    EXPECT_EQ(a.bytes, payload) << path;
  }
}

TEST_F(IdxTest, MissingFileNamesPathAndRemedy) {
  const std::string path = (dir_ / "nope.gz").string();
  expect_error(path, "apt-get install dataset-fashion-mnist");
  expect_error(path, "--data DIR");
}

TEST_F(IdxTest, CorruptGzip) {
  const Bytes good = idx_bytes({1000}, pattern(1000));
  Bytes gz = slurp(write_gz("good.gz", good));
  ASSERT_GT(gz.size(), 30u);

  Bytes flipped = gz;
  for (size_t i = 12; i < flipped.size() - 8; ++i) flipped[i] ^= 0x5A;
  expect_error(write_plain("flipped.gz", flipped), "gzip");

  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 1;  // the CRC32 field of the gzip trailer
  expect_error(write_plain("crc.gz", bad_crc), "gzip");

  const Bytes cut(gz.begin(), gz.begin() + gz.size() / 2);
  expect_error(write_plain("cut.gz", cut), "gzip");

  expect_error(write_plain("garbage.gz", {0x1f, 0x8b, 0xff, 0xff, 0xff, 0xff}), "gzip");
}

TEST_F(IdxTest, WrongMagic) {
  Bytes b = idx_bytes({4}, pattern(4));
  b[1] = 0x03;
  expect_error(write_plain("magic.idx", b), "magic");
}

TEST_F(IdxTest, UnsupportedTypeIsNamed) {
  expect_error(write_plain("float.idx", idx_bytes({2}, Bytes(8), 0x0D)), "0x0D");
}

TEST_F(IdxTest, BadDims) {
  expect_error(write_plain("nodims.idx", idx_bytes({}, {})), "0 dimensions");
  expect_error(write_plain("zero.idx", idx_bytes({3, 0, 2}, {})), "dimension 1 is 0");
  // Each product overflows 2^31 bytes; none must be allocated.
  expect_error(write_plain("big.idx", idx_bytes({65536, 65536}, {})), "limit");
  expect_error(write_plain("huge.idx", idx_bytes({0xFFFFFFFF}, {})), "limit");
  expect_error(write_plain("wrap.idx", idx_bytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 2}, {})),
               "limit");
  // Within the byte limit but not a count an int holds.
  expect_error(write_plain("int.idx", idx_bytes({0x80000000u}, {})), "dimension 0 = 2147483648 exceeds 2^31 - 1");
}

TEST_F(IdxTest, TruncatedHeaderAndPayload) {
  expect_error(write_plain("head.idx", {0, 0, 8}), "truncated header");
  Bytes dims = idx_bytes({5, 5}, {});
  dims.resize(dims.size() - 2);
  expect_error(write_plain("dims.idx", dims), "truncated header");
  expect_error(write_plain("short.idx", idx_bytes({10}, pattern(7))), "expected 10 bytes, got 7");
  expect_error(write_gz("short.gz", idx_bytes({10}, pattern(7))), "expected 10 bytes, got 7");
}

TEST_F(IdxTest, TrailingBytes) {
  expect_error(write_plain("long.idx", idx_bytes({10}, pattern(13))), "3 trailing bytes");
  expect_error(write_gz("long.gz", idx_bytes({10}, pattern(13))), "3 trailing bytes");
}

TEST_F(IdxTest, EmptyFile) {
  expect_error(write_plain("empty.idx", {}), "truncated header");
  expect_error(write_gz("empty.gz", {}), "truncated header");
}

// Random damage to valid files must only ever produce crumb::Error (the sanitizer builds check
// that nothing is read or written out of bounds on the way).
TEST_F(IdxTest, MutatedFilesNeverCrash) {
  const Bytes good = idx_bytes({4, 3, 3}, pattern(36));
  const Bytes good_gz = slurp(write_gz("seed.gz", good));
  uint64_t s = 12345;
  auto next = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int iter = 0; iter < 300; ++iter) {
    Bytes b = iter % 2 ? good : good_gz;
    const int edits = 1 + int(next() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (next() % 3) {
        case 0: b[next() % b.size()] = static_cast<uint8_t>(next()); break;
        case 1: b.resize(next() % (b.size() + 1)); break;
        default: b.push_back(static_cast<uint8_t>(next())); break;
      }
      if (b.empty()) b.push_back(0);
    }
    const std::string path = write_plain("m" + std::to_string(iter), b);
    try {
      const IdxArray a = read_idx(path);
      size_t n = 1;
      for (int d : a.dims) n *= size_t(d);
      EXPECT_EQ(a.bytes.size(), n);
    } catch (const Error&) {
    }
  }
}

TEST_F(IdxTest, LoadSplitGzipAndPlainNames) {
  const Bytes pixels = pattern(6 * 2 * 3);
  const Bytes labels = {0, 9, 3, 3, 1, 7};
  write_split("train", idx_bytes({6, 2, 3}, pixels), idx_bytes({6}, labels));
  write_plain("t10k-images-idx3-ubyte", idx_bytes({6, 2, 3}, pixels));
  write_plain("t10k-labels-idx1-ubyte", idx_bytes({6}, labels));
  for (const char* split : {"train", "t10k"}) {
    const Dataset ds = load_mnist_split(dir_.string(), split);
    EXPECT_EQ(ds.count, 6);
    EXPECT_EQ(ds.channels, 1);
    EXPECT_EQ(ds.height, 2);
    EXPECT_EQ(ds.width, 3);
    EXPECT_EQ(ds.num_classes, 10);
    EXPECT_EQ(ds.pixels, pixels);
    EXPECT_EQ(ds.labels, (std::vector<int32_t>{0, 9, 3, 3, 1, 7}));
  }
}

TEST_F(IdxTest, LoadSplitMissing) {
  expect_split_error(dir_.string(), "train-images-idx3-ubyte.gz",
                     "apt-get install dataset-fashion-mnist");
}

TEST_F(IdxTest, LoadSplitLabelOutOfRange) {
  write_split("train", idx_bytes({3, 2, 2}, pattern(12)), idx_bytes({3}, {1, 10, 2}));
  expect_split_error(dir_.string(), "train-labels-idx1-ubyte.gz", "label 10 at index 1");
}

TEST_F(IdxTest, LoadSplitCountMismatch) {
  write_split("train", idx_bytes({3, 2, 2}, pattern(12)), idx_bytes({4}, {1, 2, 3, 4}));
  expect_split_error(dir_.string(), "train-labels-idx1-ubyte.gz", "4 labels");
}

TEST_F(IdxTest, LoadSplitWrongRank) {
  write_split("train", idx_bytes({3, 4}, pattern(12)), idx_bytes({3}, {1, 2, 3}));
  expect_split_error(dir_.string(), "train-images-idx3-ubyte.gz", "3-D");
  write_split("train", idx_bytes({3, 2, 2}, pattern(12)), idx_bytes({3, 1}, {1, 2, 3}));
  expect_split_error(dir_.string(), "train-labels-idx1-ubyte.gz", "1-D");
}

TEST(IdxFashionMnist, RealFiles) {
  const std::string dir = default_data_dir();
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " absent (apt-get install dataset-fashion-mnist)";
  const Dataset train = load_mnist_split(dir, "train");
  const Dataset test = load_mnist_split(dir, "t10k");
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
  for (const Dataset* ds : {&train, &test}) {
    EXPECT_EQ(ds->height, 28);
    EXPECT_EQ(ds->width, 28);
    EXPECT_EQ(ds->pixels.size(), size_t(ds->count) * 28 * 28);
    std::vector<int> hist(10);
    for (int32_t y : ds->labels) ++hist[y];
    EXPECT_EQ(hist, std::vector<int>(10, ds->count / 10));
  }
}

}  // namespace
}  // namespace crumb::data
