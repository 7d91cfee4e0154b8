// `mpirun -np 2 train` as a user runs it: two ranks train the same weights as one process (a ragged
// batch included), and a rank that fails or falls behind stops the job with an error instead of hanging.
// Skipped where the build has no MPI or the machine has no Fashion-MNIST.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/io/checkpoint.h"
#include "engine/data/idx.h"
#include "engine/train/model_registry.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

#ifdef CRUMB_MPIEXEC
constexpr bool kHaveMpi = true;
// Shared memory only, so it runs in containers without a network; as root too (CI). Under the sanitizer
// build, ranks check memory errors but not leaks: Open MPI unloads its plugins (dlclose) before
// LeakSanitizer reports what they kept, so their frames are "<unknown module>", which no suppression
// can name.
const std::string kMpirun = "ASAN_OPTIONS=detect_leaks=0 " + std::string(CRUMB_MPIEXEC) +
                            " --allow-run-as-root --oversubscribe --mca btl self,vader"
                            " --mca btl_vader_single_copy_mechanism none";
#else
constexpr bool kHaveMpi = false;
const std::string kMpirun;
#endif

struct Outcome {
  int code = -1;
  std::string err;
  double seconds = 0;
};

// Runs a shell command line, stdout discarded, stderr kept.
Outcome shell(const std::string& cmd, const std::string& tag) {
  const std::string err_file =
      (std::filesystem::temp_directory_path() / ("crumb_mpirun_" + std::to_string(getpid()) + "_" + tag + ".txt")).string();
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system((cmd + " >/dev/null 2>" + err_file).c_str());
  Outcome r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  std::filesystem::remove(err_file);
  return r;
}

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("crumb_mpirun_" + std::to_string(getpid()) + "_" + name)).string();
}

#define CRUMB_REQUIRE_MPI_AND_DATA()                                                                  \
  do {                                                                                                \
    if (!kHaveMpi) GTEST_SKIP() << "this build has no MPI";                                           \
    if (!data::mnist_split_exists(data::default_data_dir(), "train")) GTEST_SKIP() << "no Fashion-MNIST"; \
  } while (0)

// A few steps of cnn with a ragged batch (37 over 2 ranks: 19 + 18, micro-batches of 7).
// --device cpu: on a GPU machine the default would be CUDA, and N ranks would share its one device.
const std::string kCommon =
    " --device cpu --model cnn --batch 37 --micro-batch 7 --limit-test 64 --threads 1 --epochs 1";
const std::string kArgs = kCommon + " --limit-train 148";

std::vector<float> weights(const std::string& path) {
  Graph g = models::build("cnn", {1, 28, 28, 10});
  build_backward(g);
  ParamStore params(g);
  load_checkpoint(path, params, nullptr);
  const float* p = static_cast<const float*>(params.data_block());
  return {p, p + params.count()};
}

TEST(MpiRun, TwoRanksTrainTheWeightsOfOne) {
  CRUMB_REQUIRE_MPI_AND_DATA();
  const std::string one = tmp("one.safetensors"), two = tmp("two.safetensors");
  const Outcome a = shell(std::string(CRUMB_TRAIN_BIN) + kArgs + " --save " + one, "one");
  ASSERT_EQ(a.code, 0) << a.err;
  const Outcome b = shell(kMpirun + " -np 2 " + CRUMB_TRAIN_BIN + kArgs + " --save " + two, "two");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.err.find("data parallel: 2 ranks, shares of 18 to 19 samples"), std::string::npos) << b.err;
  const std::vector<float> w1 = weights(one), w2 = weights(two);
  EXPECT_LE(test::relative_error(w2, w1), 1e-6);
  // Training moved the weights: the comparison is not between two initialisations.
  Graph g = models::build("cnn", {1, 28, 28, 10});
  ParamStore init(g);
  init.init(0);
  const float* p = static_cast<const float*>(init.data_block());
  EXPECT_GT(test::relative_error(w1, std::vector<float>(p, p + init.count())), 1e-3);
  for (const std::string& f : {one, two, optimizer_path(one), optimizer_path(two)}) std::filesystem::remove(f);
}

// `args` (a resnet20 in BatchNorm groups of 8, 4 classes, 3x16x16 inputs) trained by one process and by 2
// ranks, their weights loaded into `one` and `two`; the 2 ranks' outcome in `ranks` (their files removed).
void train_one_and_two_ranks(const std::string& args, const std::string& tag, ParamStore& one, ParamStore& two,
                             Outcome& ranks) {
  const std::string common = " --device cpu --model resnet20 --dataset synthetic --input 3x16x16 --classes 4 "
                             "--bn-group 8 --limit-test 16 --threads 1 --epochs 1" + args;
  const std::string a = tmp(tag + "_one.safetensors"), b = tmp(tag + "_two.safetensors");
  const Outcome alone = shell(std::string(CRUMB_TRAIN_BIN) + common + " --save " + a, tag + "_one");
  ASSERT_EQ(alone.code, 0) << alone.err;
  ranks = shell(kMpirun + " -np 2 " + CRUMB_TRAIN_BIN + common + " --save " + b, tag + "_two");
  ASSERT_EQ(ranks.code, 0) << ranks.err;
  load_checkpoint(a, one, nullptr);
  load_checkpoint(b, two, nullptr);
  for (const std::string& f : {a, b, optimizer_path(a), optimizer_path(b)}) std::filesystem::remove(f);
}

// That model's graph, with its backward pass (the parameter block checkpoints load into), in `dtype`.
Graph resnet20_in_groups_of_8(DType dtype) {
  models::NormSpec norm;
  norm.bn.group = 8;
  Graph g = models::build("resnet20", {3, 16, 16, 4, norm}, dtype);
  build_backward(g);
  return g;
}

// BatchNorm with deferred running statistics: each rank normalises whole groups of its share, and the
// ranks' moments are merged before the running statistics are updated, so weights, running statistics
// and num_batches_tracked equal one process's after a step (one step: over several, BatchNorm's near-zero
// bias gradients let float rounding grow past any fixed tolerance).
TEST(MpiRun, TwoRanksKeepTheRunningStatisticsOfOne) {
  if (!kHaveMpi) GTEST_SKIP() << "this build has no MPI";
  const Graph g = resnet20_in_groups_of_8(DType::F32);
  ParamStore p1(g), p2(g);
  Outcome ranks;
  ASSERT_NO_FATAL_FAILURE(train_one_and_two_ranks(" --limit-train 32 --batch 32 --micro-batch 8", "bn", p1, p2, ranks));
  auto floats = [](const void* p, std::size_t n) {
    const float* f = static_cast<const float*>(p);
    return std::vector<float>(f, f + n);
  };
  EXPECT_LE(test::relative_error(floats(p2.data_block(), p2.count()), floats(p1.data_block(), p1.count())), 1e-6);
  for (ValueId v : g.states()) {
    if (g.value(v).dtype == DType::I64) {
      EXPECT_EQ(*static_cast<const int64_t*>(p2.state(v)), 1) << g.value(v).name;
      EXPECT_EQ(*static_cast<const int64_t*>(p1.state(v)), 1) << g.value(v).name;
      continue;
    }
    const std::size_t n = static_cast<std::size_t>(g.value(v).count(1));
    EXPECT_LE(test::relative_error(floats(p2.state(v), n), floats(p1.state(v), n)), 1e-6) << g.value(v).name;
  }
}

// Shares hold whole BatchNorm groups, the groups one process forms: a batch of 24 in groups of 8 goes to
// 2 ranks as 16 + 8 (halves of 12 would split a group), and the epoch's last batch of 12 as 8 + 4 (halves of
// 6 would split its two groups), so every step is one process's, to float64 rounding, over both batches.
TEST(MpiRun, SharesHoldWholeBatchNormGroups) {
  if (!kHaveMpi) GTEST_SKIP() << "this build has no MPI";
  const Graph g = resnet20_in_groups_of_8(DType::F64);
  ParamStore p1(g), p2(g);
  Outcome ranks;
  ASSERT_NO_FATAL_FAILURE(
      train_one_and_two_ranks(" --limit-train 36 --batch 24 --precision fp64", "groups", p1, p2, ranks));
  EXPECT_NE(ranks.err.find("data parallel: 2 ranks, shares of 8 to 16 samples"), std::string::npos) << ranks.err;
  auto doubles = [](const ParamStore& p) {
    const double* d = static_cast<const double*>(p.data_block());
    return std::vector<double>(d, d + p.count());
  };
  const std::vector<double> w1 = doubles(p1), w2 = doubles(p2);
  EXPECT_LE(test::relative_error(w2, w1), 1e-10);
  ParamStore init(g);
  init.init(0);
  EXPECT_GT(test::relative_error(w1, doubles(init)), 1e-3);
}

// BatchNorm over the whole batch cannot be split among ranks: a rank says so in one line, with what to give
// instead, and stops the job (it cannot know that the others found the same before they wait for it).
TEST(MpiRun, WholeBatchNormalisationIsRefusedOverRanks) {
  if (!kHaveMpi) GTEST_SKIP() << "this build has no MPI";
  const Outcome r = shell(kMpirun + " -np 2 " + CRUMB_TRAIN_BIN +
                              " --device cpu --model resnet20 --dataset synthetic --input 3x16x16 --limit-train 32 "
                              "--limit-test 16 --batch 16 --bn-group batch --threads 1 --epochs 1",
                          "bn_batch");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("train: error: --bn-group batch normalises over the whole batch, which one process holds, but "
                       "the run has 2 ranks: give --bn-group G"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 60) << r.err;
}

// Rank 1 cannot read its data: it says so, and the job ends at once (rank 0 is already waiting for it).
TEST(MpiRun, AFailingRankStopsTheOthers) {
  CRUMB_REQUIRE_MPI_AND_DATA();
  const Outcome r = shell(kMpirun + " -np 1 " + CRUMB_TRAIN_BIN + kArgs + " : -np 1 " + CRUMB_TRAIN_BIN + kArgs +
                          " --data /nonexistent-crumb-data",
                      "fail");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("train: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent-crumb-data"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 60) << r.err;
}

// Rank 1 stops first (fewer --epochs, which every rank need not share): rank 0's next gradient sum finds
// no partner and times out with an error naming the flag.
TEST(MpiRun, AMissingRankTimesOut) {
  CRUMB_REQUIRE_MPI_AND_DATA();
  std::string two_epochs = kArgs;
  two_epochs.replace(two_epochs.find("--epochs 1"), 10, "--epochs 2");
  const Outcome r = shell(kMpirun + " -np 1 " + CRUMB_TRAIN_BIN + two_epochs + " --dist-timeout 2 : -np 1 " +
                              CRUMB_TRAIN_BIN + kArgs + " --dist-timeout 2",
                      "timeout");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 0 of 2: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not finish in 2 s"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 60) << r.err;
}

// Ranks given different models stop before training: each says so in one line, the one that differs
// what differs, and the job ends cleanly (no crash, no MPI abort).
TEST(MpiRun, RanksGivenDifferentModelsSayWhatDiffers) {
  CRUMB_REQUIRE_MPI_AND_DATA();
  std::string mlp = kArgs;
  mlp.replace(mlp.find("--model cnn"), 11, "--model mlp");
  const Outcome r = shell(kMpirun + " -np 1 " + CRUMB_TRAIN_BIN + kArgs + " : -np 1 " + CRUMB_TRAIN_BIN + mlp, "models");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("train: error: rank 1 of 2 was started with other settings than rank 0: \"model\":\"mlp\" "
                       "where rank 0 has \"model\":\"cnn\""),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("train: error: 1 of 2 ranks were started with other settings than rank 0"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("MPI_ABORT"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 60) << r.err;
}

}  // namespace
}  // namespace crumb
