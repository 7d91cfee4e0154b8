// Inputs (engine/io/input_file.h): special files are refused at once, never read, whole reads are bounded;
// a file mapped for in-place reads (engine/io/mapped_file.h) that is truncated or rewritten under the run is
// one error, not a SIGBUS, on whichever thread reads it, and any other SIGBUS still ends the process.
#include "engine/io/input_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/error.h"
#include "engine/io/mapped_file.h"
#include "engine/io/mapped_read.h"
#include "engine/train/network_file.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

namespace fs = std::filesystem;

class Inputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("inputs_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  std::string fifo(const std::string& name) const {
    EXPECT_EQ(::mkfifo(path(name).c_str(), 0600), 0);
    return path(name);
  }
  fs::path dir_;
};

// The error f throws, within 5 s: f opens `fifo`, and an open that waits for a writer fails the test (the
// writer's end is then opened, so the test goes on instead of hanging).
template <class F>
std::string error_without_waiting(const std::string& fifo, F f) {
  auto result = std::async(std::launch::async, [&] { return test::error_of(f); });
  if (result.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    ADD_FAILURE() << "opening the FIFO " << fifo << " blocked";
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  return result.get();
}

TEST_F(Inputs, SpecialFilesAreRefusedAtOnce) {
  const std::string f = fifo("fifo");
  const std::string msg = error_without_waiting(f, [&] { InputFile(f, "the FIFO"); });
  EXPECT_EQ(msg, "the FIFO: not a regular file (a FIFO); inputs are read from regular files only");
  EXPECT_EQ(test::error_of([] { InputFile("/dev/zero", "zeros"); }),
            "zeros: not a regular file (a device); inputs are read from regular files only");
  EXPECT_EQ(test::error_of([&] { InputFile(dir_.string(), "the folder"); }),
            "the folder: not a regular file (a folder); inputs are read from regular files only");
  EXPECT_EQ(test::error_of([&] { InputFile(path("none"), "none", "make one"); }), "none: not found; make one");
  ::chmod(write("secret", "x").c_str(), 0);
  if (::geteuid() != 0) {
    EXPECT_EQ(test::error_of([&] { InputFile(path("secret"), "secret"); }), "secret: cannot open: Permission denied");
  }
}

TEST_F(Inputs, WholeReadsAreBounded) {
  const InputFile small(write("small", std::string(1000, 'a')), "small");
  EXPECT_EQ(small.size(), 1000u);
  EXPECT_EQ(small.read_all(1000, "a thing"), std::string(1000, 'a'));
  EXPECT_EQ(test::error_of([&] { small.read_all(999, "a thing"); }),
            "small: 1000 bytes, more than the 999 bytes a thing may hold");
  // A file that grows while it is read stops at the limit too.
  const InputFile growing(write("growing", std::string(10, 'a')), "growing");
  std::ofstream(path("growing"), std::ios::app) << std::string(5000, 'b');
  EXPECT_NE(test::error_of([&] { growing.read_all(4096, "a thing"); }).find("more than the 4096 bytes a thing may hold"),
            std::string::npos);
  // Reads at an offset find every byte the size promised, or say the file ended.
  char buf[8];
  small.read_at(buf, 8, 992);
  EXPECT_EQ(test::error_of([&] { small.read_at(buf, 8, 996); }),
            "small: ends at byte 1000 where 1004 were expected (was it truncated while being read?)");
}

TEST_F(Inputs, NetworkFilesAreRegularAndBounded) {
  const std::string f = fifo("net.json");
  EXPECT_NE(error_without_waiting(f, [&] { read_network_file(f); }).find("--model-file " + f + ": not a regular file"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { read_network_file("/dev/zero"); }).find("--model-file /dev/zero: not a regular file (a device)"),
            std::string::npos);
  // A sparse file: no disk space, only its size.
  const std::string big = write("big.json", "");
  fs::resize_file(big, kMaxNetworkFileBytes + 1);
  EXPECT_EQ(test::error_of([&] { read_network_file(big); }),
            "--model-file " + big + ": 33554433 bytes, more than the 32 MiB a network description may hold");
  EXPECT_EQ(read_network_file(write("ok.json", "{\"nodes\": []}")), "{\"nodes\": []}");
}

// A file of `pages` pages mapped whole, then truncated to `keep` bytes under the map.
std::unique_ptr<MappedFile> map_then_truncate(const std::string& path, int pages, off_t keep) {
  std::ofstream(path, std::ios::binary) << std::string(pages * ::getpagesize(), 'x');
  auto m = std::make_unique<MappedFile>(InputFile(path, path));
  EXPECT_EQ(::truncate(path.c_str(), keep), 0);
  return m;
}

// Reads every byte of m's map under its guard.
bool read_all_of(const MappedFile& m) {
  return read_mapped(m.data(), m.size(), [&] {
    volatile uint8_t sum = 0;
    for (std::size_t i = 0; i < m.size(); ++i) sum = sum + m.data()[i];
  });
}

TEST_F(Inputs, ATruncatedMapIsAnErrorNotASigbus) {
  const auto intact = map_then_truncate(path("intact"), 3, 3 * ::getpagesize());
  EXPECT_TRUE(read_all_of(*intact));
  const auto cut = map_then_truncate(path("cut"), 3, 0);
  EXPECT_FALSE(read_all_of(*cut));
  EXPECT_FALSE(read_all_of(*cut)) << "a second fault must be caught too (SIGBUS is not left blocked)";
  EXPECT_TRUE(read_all_of(*intact));
  const std::string msg = test::error_of([&] { cut->read([&] { read_all_of(*cut); }); });
  EXPECT_EQ(msg.rfind(path("cut") + " was truncated while training (to 0 of its ", 0), 0u) << msg;
  EXPECT_EQ(test::error_of([&] {
              cut->read([&] {
                volatile uint8_t v = cut->data()[0];
                (void)v;
              });
            }).rfind(path("cut") + " was truncated while training (a read out of its memory map failed): ", 0),
            0u);
}

TEST_F(Inputs, AMapRewrittenInPlaceIsAnError) {
  const std::string p = write("data", std::string(100, 'a'));
  // An old modification time, so that the rewrite's is another whatever the clock's resolution.
  const timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), old_times, 0), 0);
  const MappedFile m{InputFile(p, p)};
  EXPECT_NO_THROW(m.check_unchanged());
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f << "b";
  }
  EXPECT_EQ(test::error_of([&] { m.check_unchanged(); }).rfind(p + " changed while training (it was written to): ", 0),
            0u);
  std::ofstream(p, std::ios::app) << "more";
  EXPECT_EQ(test::error_of([&] { m.check_unchanged(); }).rfind(p + " changed while training (it grew from 100 to 104 "
                                                                   "bytes): ", 0),
            0u);
}

// Replacing the file by a rename leaves the mapped one as it was: no error.
TEST_F(Inputs, AMapOutlivesARenameOverItsFile) {
  const std::string p = write("data", std::string(100, 'a'));
  const MappedFile m{InputFile(p, p)};
  fs::rename(write("new", std::string(10, 'b')), p);
  EXPECT_NO_THROW(m.read([&] { EXPECT_EQ(m.data()[99], 'a'); }));
}

TEST_F(Inputs, EachThreadGuardsItsOwnReads) {
  const auto intact = map_then_truncate(path("intact"), 4, 4 * ::getpagesize());
  const auto cut = map_then_truncate(path("cut"), 4, ::getpagesize());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i)
        if (read_all_of(t % 2 ? *cut : *intact) != (t % 2 == 0)) ++wrong;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
}

void custom_sigbus(int, siginfo_t*, void*) {}

TEST_F(Inputs, ThePreviousSigbusHandlerIsRestored) {
  struct sigaction mine {}, before {}, after {};
  mine.sa_sigaction = custom_sigbus;
  mine.sa_flags = SA_SIGINFO;
  ASSERT_EQ(sigaction(SIGBUS, &mine, &before), 0);
  const auto cut = map_then_truncate(path("cut"), 2, 0);
  EXPECT_FALSE(read_all_of(*cut));
  EXPECT_TRUE(read_mapped(cut->data(), 0, [] {}));
  ASSERT_EQ(sigaction(SIGBUS, &before, &after), 0);
  EXPECT_EQ(after.sa_sigaction, &custom_sigbus);
}

// A SIGBUS outside the range a read guards is not swallowed: the process ends as it would have (killed by
// the signal, or a sanitizer's report and exit).
TEST_F(Inputs, OtherSigbusesStillEndTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto intact = map_then_truncate(path("intact"), 1, ::getpagesize());
  const auto cut = map_then_truncate(path("cut"), 1, 0);
  EXPECT_EXIT(
      {
        read_mapped(intact->data(), intact->size(), [&] {
          volatile uint8_t v = cut->data()[0];
          (void)v;
        });
        std::exit(0);
      },
      [](int status) { return WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS : WEXITSTATUS(status) != 0; }, "");
}

}  // namespace
}  // namespace crumb
