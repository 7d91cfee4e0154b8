// The train binary as a user meets it: bad input gives one clear error line and a non-zero exit,
// and a short run on real Fashion-MNIST learns and prints a JSON summary.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <string>

#include "engine/device/backend.h"
#include "engine/data/idx.h"
#include "engine/io/checkpoint.h"
#include "engine/train/options.h"
#include "engine/train/trainer.h"
#include "kernels/bf16_dot.h"
#include "tests/alloc_counter.h"
#include "tests/cifar_files.h"
#include "tests/npy_files.h"

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

// prefix: put before the binary (e.g. "timeout 10 ").
Result run_train(const std::string& args, const std::string& prefix = "") {
  // One file per test and process: ctest runs the tests of this file in parallel.
  const std::string err_file = (std::filesystem::temp_directory_path() /
                                ("crumb_cli_err_" + std::to_string(getpid()) + "_" +
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".txt"))
                                   .string();
  const std::string cmd = prefix + CRUMB_TRAIN_BIN + " " + args + " 2>" + err_file;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  std::filesystem::remove(err_file);
  return r;
}

// A non-zero exit without a crash, and stderr ending in exactly one error line ("train: error: ...")
// that contains `what` (progress lines may come before it).
void expect_one_error_line(const Result& r, const std::string& what) {
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.code, 128) << "crashed: " << r.err;
  ASSERT_FALSE(r.err.empty());
  const size_t start = r.err.rfind('\n', r.err.size() - 2);
  const std::string last = r.err.substr(start == std::string::npos ? 0 : start + 1);
  EXPECT_EQ(last.rfind("train: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("train: error: "), r.err.rfind("train: error: ")) << "more than one error line: " << r.err;
  EXPECT_NE(last.find(what), std::string::npos) << r.err;
}

// train's own default (honours $CRUMB_DATA), so the data-dependent tests run wherever train finds data.
const std::string kData = crumb::data::default_data_dir();

// --help is the option table's: a line for every option with its help and default, at most 100 columns.
TEST(TrainCli, Help) {
  const Result r = run_train("--help");
  EXPECT_EQ(r.code, 0);
  std::istringstream lines(r.out);
  std::string flat;  // the text with its line breaks and indentation as single spaces
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    std::istringstream words(line);
    for (std::string w; words >> w;) flat += w + " ";
  }
  auto first_words = [](const std::string& text, int n) {
    std::istringstream in(text);
    std::string out, w;
    for (int i = 0; i < n && in >> w; ++i) out += w + " ";
    return out;
  };
  for (const crumb::Option& o : crumb::run_options()) {
    SCOPED_TRACE(o.name);
    const std::string head = "\n  --" + o.name + (o.metavar.empty() ? "" : " " + o.metavar);
    EXPECT_NE(r.out.find(head), std::string::npos);
    EXPECT_NE(flat.find(first_words(o.help, 6)), std::string::npos);
    EXPECT_NE(flat.find(first_words(o.default_text(), 8)), std::string::npos);
  }
  for (const char* own : {"--model-file FILE", "--explain ", "--explain-csv FILE", "--report FILE.html",
                          "--report-dir DIR", "--sweep M1,M2,...", "--help "})
    EXPECT_NE(r.out.find(std::string("\n  ") + own), std::string::npos) << own;
  EXPECT_NE(r.out.find("(default 64)"), std::string::npos);
  EXPECT_NE(r.out.find("\nData-parallel training: mpirun -np N train ..."), std::string::npos);
  EXPECT_NE(r.out.find("\nNo output (--save, --log,"), std::string::npos);
  // --help answers whatever else is given, but not a misspelt flag, which names the nearest.
  EXPECT_EQ(run_train("--help --resume /nonexistent.st").code, 0);
  expect_one_error_line(run_train("--help --micro-bach 8"), "unknown flag --micro-bach (did you mean --micro-batch?)");
}

TEST(TrainCli, BadFlags) {
  expect_one_error_line(run_train("--bogus 1"), "unknown flag --bogus");
  expect_one_error_line(run_train("--batch zero"), "--batch");
  expect_one_error_line(run_train("--batch 0"), "out of range");
  expect_one_error_line(run_train("--lr nan"), "--lr");
  expect_one_error_line(run_train("--threads"), "needs a value");
  expect_one_error_line(run_train("--batch 8 --micro-batch 9"), "--micro-batch");
  expect_one_error_line(run_train("lenet5"), "unexpected argument");
  expect_one_error_line(run_train("--device gpu"), "--device must be cpu or cuda");
  expect_one_error_line(run_train("--cuda-graphs maybe"), "--cuda-graphs must be on or off, got 'maybe'");
  expect_one_error_line(run_train("--tf32=1"), "--tf32 takes no value");
  expect_one_error_line(run_train("--deterministic=on"), "--deterministic takes no value");
  // Fashion-MNIST's 28x28 would leave vgg11_bn's fifth pool nothing to pool.
  expect_one_error_line(run_train("--model vgg11_bn"),
                        "model vgg11_bn needs images of at least 32x32, got 1x28x28: use --dataset cifar10, or "
                        "--dataset synthetic --input 1x32x32");
  expect_one_error_line(run_train("--model resnet18 --dropout 0.2"), "--dropout needs a model with dropout");
  expect_one_error_line(run_train("--model vgg11_bn --dropout 1"), "--dropout: 1 is out of range");
}

double json_number(const std::string& out, const std::string& key) {
  const std::string last = out.substr(out.rfind('{'));
  const size_t at = last.find("\"" + key + "\":");
  EXPECT_NE(at, std::string::npos) << key << " in " << last;
  return at == std::string::npos ? NAN : std::stod(last.substr(at + key.size() + 3));
}

// Every value is checked as written: no sign, space or hex in numbers, no empty values, no repeats.
TEST(TrainCli, StrictFlagValues) {
  expect_one_error_line(run_train("--epochs +2"), "--epochs: '+2' is not an integer");
  expect_one_error_line(run_train("'--batch= 8'"), "--batch: ' 8' is not an integer");
  expect_one_error_line(run_train("--lr 0x1p-3"), "--lr: '0x1p-3' is not a number");
  expect_one_error_line(run_train("--lr +0.1"), "--lr: '+0.1' is not a number");
  expect_one_error_line(run_train("--epochs 2 --epochs 3"), "--epochs is given twice");
  expect_one_error_line(run_train("--save="), "--save needs a value, got an empty one");
  expect_one_error_line(run_train("--model=''"), "--model needs a value, got an empty one");
  expect_one_error_line(run_train("--explain=0"), "--explain takes no value");
  expect_one_error_line(run_train("--epochs 0"), "--epochs 0 evaluates a checkpoint: it needs --load");
}

// What cannot be read or written is one error line, never a hang or a silent success: a FIFO where a
// data file or checkpoint should be, a symlink loop, stdout on a full disk.
TEST(TrainCli, SpecialFilesAndFailedOutput) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_special_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_symlink(fifo, dir / "train-images-idx3-ubyte");
  std::filesystem::create_symlink(fifo, dir / "train-labels-idx1-ubyte");
  expect_one_error_line(run_train("--data " + dir.string()), "': not a regular file (a FIFO)");
  expect_one_error_line(run_train("--load " + fifo), "not a regular file");
  std::filesystem::create_symlink(dir / "loop_b", dir / "loop_a");
  std::filesystem::create_symlink(dir / "loop_a", dir / "loop_b");
  expect_one_error_line(run_train("--load " + (dir / "loop_a").string()), "Too many levels of symbolic links");
  std::filesystem::remove_all(dir);
  if (std::filesystem::exists("/dev/full")) {
    expect_one_error_line(run_train("--model mlp --explain >/dev/full"), "cannot write to stdout");
    expect_one_error_line(run_train("--help >/dev/full"), "cannot write to stdout");
  }
}

// Report paths are checked before any data loads or any plan is made; a write that fails (a full disk) is
// one error line too.
TEST(TrainCli, BadReportPaths) {
  expect_one_error_line(run_train("--explain --report /nonexistent/crumb/r.html"),
                        "--report: cannot write /nonexistent/crumb/r.html: No such file or directory");
  expect_one_error_line(run_train("--model mlp --dataset synthetic --report /nonexistent/crumb/r.html"),
                        "--report: cannot write /nonexistent/crumb/r.html");
  expect_one_error_line(run_train("--explain --report-dir /dev/null/pictures"), "--report-dir: cannot create folder");
  if (std::filesystem::exists("/dev/full"))
    expect_one_error_line(run_train("--explain --model mlp --report /dev/full"),
                          "--report: /dev/full is not a regular file");
}

TEST(TrainCli, BadSweep) {
  expect_one_error_line(run_train("--sweep 0"), "--sweep: 0 is out of range");
  expect_one_error_line(run_train("--sweep 8,abc"), "--sweep: 'abc' is not an integer");
  expect_one_error_line(run_train("--sweep 8,,16"), "--sweep: '' is not an integer");
  expect_one_error_line(run_train("--sweep 16,"), "--sweep: '' is not an integer");
  expect_one_error_line(run_train("--batch 64 --sweep 16,128"), "--sweep: micro-batch 128 is larger than --batch 64");
  expect_one_error_line(run_train("--explain --sweep 16"), "--sweep measures training steps: drop --explain");
  expect_one_error_line(run_train("--model resnet20 --dataset synthetic --input 3x16x16 --limit-train 128 "
                                  "--limit-test 32 --batch 64 --sweep 48"),
                        "--sweep: micro-batch 48 is not a multiple of the BatchNorm group of 32");
  expect_one_error_line(run_train("--model lenet5 --dataset synthetic --limit-train 128 --limit-test 32 --batch 64 "
                                  "--memory-budget 2.5MiB --sweep 64"),
                        "exceeds --memory-budget");
}

TEST(TrainCli, BadOptimizerFlags) {
  expect_one_error_line(run_train("--optimizer adam"), "--optimizer must be sgd or adamw, got 'adam'");
  expect_one_error_line(run_train("--optimizer adamw --beta1 1"), "--beta1: 1 is out of range");
  expect_one_error_line(run_train("--optimizer adamw --beta2 -0.5"), "--beta2: -0.5 is out of range");
  expect_one_error_line(run_train("--optimizer adamw --eps 0"), "--eps: 0 is out of range");
  expect_one_error_line(run_train("--optimizer adamw --eps x"), "--eps: 'x' is not a number");
  expect_one_error_line(run_train("--beta1 0.9"), "--beta1 needs --optimizer adamw");
  expect_one_error_line(run_train("--optimizer adamw --momentum 0.9"), "--momentum needs --optimizer sgd");
  expect_one_error_line(run_train("--optimizer adamw --nesterov"), "--nesterov needs --optimizer sgd");
  expect_one_error_line(run_train("--momentum 0 --nesterov"), "--nesterov needs --momentum > 0");
  expect_one_error_line(run_train("--nesterov=1"), "--nesterov takes no value");
  expect_one_error_line(run_train("--lr-schedule linear"), "--lr-schedule must be constant, step or cosine");
  expect_one_error_line(run_train("--warmup-steps -1"), "--warmup-steps: -1 is out of range");
  expect_one_error_line(run_train("--lr-schedule step --lr-step-size 0"), "--lr-step-size: 0 is out of range");
  expect_one_error_line(run_train("--lr-schedule step --lr-gamma 0"), "--lr-gamma: 0 is out of range");
  expect_one_error_line(run_train("--lr-gamma 0.5"), "--lr-gamma needs --lr-schedule step");
  expect_one_error_line(run_train("--lr-schedule cosine --lr-step-size 3"), "--lr-step-size needs --lr-schedule step");
}

// AdamW with warmup and a cosine schedule trains, and the summary names the optimizer and the lr of the
// last step (cosine over 2 x 63 steps: lr * (1 + cos(pi * 125 / 126)) / 2).
TEST(TrainCli, AdamWWithCosineSchedule) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const Result r = run_train("--model lenet5 --optimizer adamw --lr 0.002 --lr-schedule cosine --warmup-steps 10 "
                             "--epochs 2 --batch 32 --limit-train 2000 --limit-test 500 --seed 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"optimizer\":\"adamw\",\"lr_schedule\":\"cosine\""), std::string::npos) << r.out;
  EXPECT_NEAR(json_number(r.out, "final_lr"), 0.002 * (1 + std::cos(M_PI * 125 / 126)) / 2, 1e-12);
  EXPECT_GT(json_number(r.out, "test_accuracy"), 0.6);
}

// --deterministic reaches the run (its CUDA effect: CudaEngine.DeterministicRunsRepeatTheirBits) and the
// summary says so; the CPU's result does not change with it.
TEST(TrainCli, DeterministicIsRecorded) {
  const std::string common = "--model mlp --dataset synthetic --device cpu --epochs 1 --batch 16 --limit-train 64 "
                             "--limit-test 16 --seed 3";
  const Result plain = run_train(common), det = run_train(common + " --deterministic");
  ASSERT_EQ(det.code, 0) << det.err;
  EXPECT_NE(det.out.find("\"deterministic\":true"), std::string::npos) << det.out;
  EXPECT_NE(plain.out.find("\"deterministic\":false"), std::string::npos) << plain.out;
  EXPECT_EQ(json_number(det.out, "final_loss"), json_number(plain.out, "final_loss"));
}

TEST(TrainCli, MissingDataset) {
  expect_one_error_line(run_train("--data /nonexistent/crumb"), "/nonexistent/crumb");
}

TEST(TrainCli, CorruptDataset) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_corrupt_data_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                        "t10k-labels-idx1-ubyte"}) {
    std::ofstream(dir / f) << "this is not an IDX file";
  }
  expect_one_error_line(run_train("--data " + dir.string()), "train-images-idx3-ubyte");
  std::filesystem::remove_all(dir);
}

TEST(TrainCli, UnknownModel) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  expect_one_error_line(run_train("--model resnet999"), "unknown model 'resnet999'");
}

TEST(TrainCli, DivergenceIsAnError) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  expect_one_error_line(run_train("--model mlp --lr 1e5 --limit-train 2048 --limit-test 100"), "diverged");
}

TEST(TrainCli, LearnsOnRealDataSlice) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const Result r = run_train("--model lenet5 --epochs 2 --batch 32 --limit-train 4000 --limit-test 1000 --seed 1");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('{'));
  EXPECT_NE(last.find("\"model\":\"lenet5\""), std::string::npos) << last;
  const size_t at = last.find("\"test_accuracy\":");
  ASSERT_NE(at, std::string::npos) << last;
  const double acc = std::stod(last.substr(at + 16));
  EXPECT_GT(acc, 0.6) << "4000 samples x 2 epochs should reach well above chance (0.1)";
  EXPECT_NE(r.err.find("epoch 2/2: train loss"), std::string::npos) << r.err;
}

// Without a GPU, --device cuda is one error line; with one, it trains like the CPU (same seed, same
// data order; float rounding differs, so the results agree closely but not bitwise). 20 steps: there the
// two agree to every printed digit (H200, 29 November 2026: loss 2.254892 both); over 47 steps, as the
// loss falls fastest, the rounding grows to 0.0104 (1.824931 against 1.835335).
TEST(TrainCli, DeviceCuda) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const std::string args = "--model lenet5 --batch 64 --limit-train 1280 --limit-test 1000 --seed 2 ";
  const Result gpu = run_train(args + "--device cuda");
  if (!crumb::device_available(crumb::Device::CUDA)) {
    expect_one_error_line(gpu, "--device cpu");
    return;
  }
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  EXPECT_NE(gpu.out.find("\"device\":\"cuda\""), std::string::npos) << gpu.out;
  const Result cpu = run_train(args + "--device cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  EXPECT_NEAR(json_number(gpu.out, "final_loss"), json_number(cpu.out, "final_loss"), 0.01);
  EXPECT_NEAR(json_number(gpu.out, "test_accuracy"), json_number(cpu.out, "test_accuracy"), 0.02);
}

}  // namespace

namespace {

// The tensor bytes of a safetensors file (its data section), without the header and its metadata.
std::string tensor_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (bytes.size() < 8) return {};
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return 8 + n <= bytes.size() ? bytes.substr(8 + n) : std::string();
}

// Runs `shell` (a command line whose stderr goes to $ERR) in the background of a job-controlled shell,
// waits until it trains (its first progress line; at most 60 s), waits `seconds` more and runs `signal`
// ($PID: the job, the leader of its own process group); returns the job's exit code and its stderr.
Result run_signalled(const std::string& shell, double seconds, const std::string& signal) {
  const std::string err_file = (std::filesystem::temp_directory_path() /
                                ("crumb_int_err_" + std::to_string(getpid()) + ".txt")).string();
  const std::string script = "set -m; ERR=" + err_file + "; " + shell + " & PID=$!; i=0; "
                             "while ! grep -q \" batch \" $ERR 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; "
                             "sleep " + std::to_string(seconds) + "; " + signal + "; wait $PID";
  const std::string script_file = err_file + ".sh";
  std::ofstream(script_file) << script << "\n";
  const int status = std::system(("sh " + script_file).c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  std::filesystem::remove(err_file);
  std::filesystem::remove(script_file);
  return r;
}

// Runs `train args` in the background and sends SIGINT `seconds` after it started training.
Result run_interrupted(const std::string& args, double seconds) {
  return run_signalled(std::string(CRUMB_TRAIN_BIN) + " " + args + " >/dev/null 2>$ERR", seconds, "kill -INT $PID");
}

// --resume continues a run exactly: 2 epochs in one run, and 1 epoch + --resume for the second, give
// byte-identical weights and optimizer state (augmented data, a step schedule); so does a run stopped
// by SIGINT in the middle of an epoch and resumed with its original command line (cosine schedule).
// Settings that change the result cannot change on resume.
TEST(TrainCli, ResumeIsExact) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_resume_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string a = (dir / "a.safetensors").string(), b = (dir / "b.safetensors").string();
  const std::string args = "--model cnn --limit-train 640 --limit-test 64 --batch 64 --augment crop-flip "
                           "--lr-schedule step --lr-step-size 7 ";
  ASSERT_EQ(run_train(args + "--epochs 2 --save " + a).code, 0);
  ASSERT_EQ(run_train(args + "--epochs 1 --save " + b).code, 0);
  const Result resumed = run_train("--resume " + b + " --epochs 2 --save " + b);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming " + b + " at epoch 2, batch 1 (optimizer step 10)"), std::string::npos)
      << resumed.err;
  EXPECT_EQ(tensor_bytes(a), tensor_bytes(b));
  EXPECT_EQ(tensor_bytes(a + ".optimizer"), tensor_bytes(b + ".optimizer"));

  const std::string mid = "--model cnn --batch 64 --epochs 2 --lr-schedule cosine --limit-train 1280 --limit-test 64 ";
  ASSERT_EQ(run_train(mid + "--save " + a).code, 0);
  const Result stopped = run_interrupted(mid + "--save " + b, 0.7);
  ASSERT_TRUE(stopped.code == 130 || stopped.code == 0) << stopped.err;  // 0: it finished before the signal
  if (stopped.code == 130) {
    // The original command line with --resume added. A signal after the last step (during the final
    // evaluation) leaves a finished run, which a resume refuses with one line and leaves unchanged.
    const Result rest = run_train(mid + "--save " + b + " --resume " + b);
    const bool finished = rest.err.find(b + " finished its 2 epoch(s)") != std::string::npos;
    ASSERT_TRUE(rest.code == 0 || (rest.code == 1 && finished)) << rest.err;
  }
  EXPECT_EQ(tensor_bytes(a), tensor_bytes(b)) << stopped.err;

  expect_one_error_line(run_train("--resume " + b + " --lr 0.1"),
                        "--lr cannot change when resuming: the run recorded its default, given 0.1");
  std::string other_batch = mid;
  other_batch.replace(other_batch.find("--batch 64"), 10, "--batch 32");
  expect_one_error_line(run_train(other_batch + "--resume " + b),
                        "--batch cannot change when resuming: the run recorded 64, given 32");
  expect_one_error_line(run_train("--resume " + b + " --load " + a), "drop --load");
  std::filesystem::remove_all(dir);
}

// SIGINT finishes the step in progress, saves --save and exits 130 with one line saying so; the checkpoint
// loads. --save destinations are checked before any training.
TEST(TrainCli, InterruptSavesAndExits) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const auto path = std::filesystem::temp_directory_path() / ("crumb_int_" + std::to_string(getpid()) + ".safetensors");
  const Result r = run_interrupted("--model cnn --batch 32 --save " + path.string(), 2.0);
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_NE(r.err.find("train: interrupted by SIGINT after optimizer step"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("saved " + path.string()), std::string::npos) << r.err;
  const Result loaded = run_train("--model cnn --epochs 0 --limit-test 100 --load " + path.string());
  EXPECT_EQ(loaded.code, 0) << loaded.err;
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + ".optimizer");
  expect_one_error_line(run_train("--model mlp --save /nonexistent/dir/m.safetensors"), "folder /nonexistent/dir");
  expect_one_error_line(run_train("--model mlp --save " + std::filesystem::temp_directory_path().string()),
                        "is a folder; it is never replaced");
  expect_one_error_line(run_train("--model mlp --save " + std::string(300, 'a')), "the file name is too long");
  expect_one_error_line(run_train("--model mlp --save-every 10"), "--save-every needs --save");
}

// A signal during --epochs 0's evaluation cuts it short: the run says it was interrupted and exits 130, where
// it printed the figures of the part it had evaluated as the test set's (resnet20: accuracy 0.0029 for 0.09) and
// exited 0. (A run that ends before the signal has the whole set's figures.)
TEST(TrainCli, InterruptedEvaluationReportsNoFigures) {
  const auto path = std::filesystem::temp_directory_path() / ("crumb_eval_" + std::to_string(getpid()) + ".st");
  const std::string model = "--model cnn --dataset synthetic --batch 64 ";
  ASSERT_EQ(run_train(model + "--epochs 1 --limit-train 64 --limit-test 16 --save " + path.string()).code, 0);
  const std::string evaluate = model + "--epochs 0 --limit-test 4000 --load " + path.string();
  const Result whole = run_train(evaluate);
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::string out = path.string() + ".out";
  const Result r = run_signalled(std::string(CRUMB_TRAIN_BIN) + " " + evaluate + " >" + out + " 2>$ERR", 0.3,
                                 "kill -INT $PID");
  std::ifstream f(out);
  const std::string cut{std::istreambuf_iterator<char>(f), {}};
  if (r.code == 0) {  // it finished before the signal: the figures must be the whole test set's
    EXPECT_EQ(json_number(cut, "test_accuracy"), json_number(whole.out, "test_accuracy")) << cut;
    EXPECT_EQ(json_number(cut, "test_loss"), json_number(whole.out, "test_loss")) << cut;
  } else {
    EXPECT_EQ(r.code, 130) << r.err;
    EXPECT_NE(r.err.find("train: interrupted by SIGINT"), std::string::npos) << r.err;
    EXPECT_EQ(cut.find("test_accuracy"), std::string::npos) << cut;
  }
  for (const std::string& p : {path.string(), path.string() + ".optimizer", out}) std::filesystem::remove(p);
}

// A save that fails mid-run (its folder removed) rescues the weights under $TMPDIR, says where, and the
// rescued checkpoint loads.
TEST(TrainCli, FailedSaveRescuesTheWeights) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const auto base = std::filesystem::temp_directory_path() / ("crumb_rescue_" + std::to_string(getpid()));
  const auto gone = base / "gone", tmp = base / "tmp";
  std::filesystem::create_directories(gone);
  std::filesystem::create_directories(tmp);
  const std::string err_file = (base / "err.txt").string();
  const std::string cmd = "sh -c 'TMPDIR=" + tmp.string() + " " + std::string(CRUMB_TRAIN_BIN) +
                          " --model cnn --batch 64 --limit-train 3200 --limit-test 64 --epochs 2 --save " +
                          (gone / "m.safetensors").string() + " >/dev/null 2>" + err_file +
                          // Removed once training runs (after the --save check), before the first epoch ends.
                          " & pid=$!; for i in $(seq 200); do grep -q \"epoch 1/2 batch\" " + err_file +
                          " && break; sleep 0.05; done; rm -rf " + gone.string() + "; wait $pid'";
  const int status = std::system(cmd.c_str());
  std::ifstream f(err_file);
  const std::string err{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << err;
  const std::size_t at = err.find("the weights were saved to ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string rescued = err.substr(at + 26, err.find(" instead", at) - at - 26);
  EXPECT_EQ(rescued.rfind(tmp.string(), 0), 0u) << rescued;
  const Result loaded = run_train("--model cnn --epochs 0 --limit-test 64 --load " + rescued);
  EXPECT_EQ(loaded.code, 0) << loaded.err;
  std::filesystem::remove_all(base);
}

TEST(TrainCli, SaveThenLoadCheckpoint) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const auto path = std::filesystem::temp_directory_path() / ("crumb_cli_" + std::to_string(getpid()) + ".safetensors");
  const Result saved = run_train("--model mlp --limit-train 1000 --limit-test 200 --save " + path.string());
  ASSERT_EQ(saved.code, 0) << saved.err;
  EXPECT_TRUE(std::filesystem::exists(path));
  for (const auto& e : std::filesystem::directory_iterator(path.parent_path()))
    EXPECT_EQ(e.path().filename().string().rfind(path.filename().string() + ".tmp", 0), std::string::npos)
        << "temporary file left: " << e.path();
  const Result loaded = run_train("--model mlp --limit-train 1000 --limit-test 200 --load " + path.string());
  EXPECT_EQ(loaded.code, 0) << loaded.err;
  expect_one_error_line(run_train("--model lenet5 --limit-train 100 --load " + path.string()), "'0.weight'");
  EXPECT_TRUE(std::filesystem::exists(path.string() + ".optimizer"));
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + ".optimizer");
}

}  // namespace

namespace {

TEST(TrainCli, ExplainPicksMicroBatchForBudgetWithoutData) {
  const auto csv = std::filesystem::temp_directory_path() / ("crumb_cli_" + std::to_string(getpid()) + ".csv");
  // --data points nowhere: --explain must not need the dataset.
  // --device cpu: on a GPU machine the default device is cuda, whose runtime alone (cuBLAS workspace)
  // exceeds this budget.
  const Result r = run_train("--model lenet5 --batch 8192 --memory-budget 80MiB --device cpu --data /nonexistent "
                             "--explain-csv " + csv.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("batch 8192 in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(largest that fits the budget)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("conv2d_backward_weight"), std::string::npos) << r.out;
  std::ifstream f(csv);
  std::string header;
  std::getline(f, header);
  EXPECT_EQ(header, "step,pass,layer,op,live_bytes,workspace_bytes,dtype");
  std::filesystem::remove(csv);
}

// ResNets train with BatchNorm groups in micro-batches, and every normalisation flag is checked.
TEST(TrainCli, ResNetNormalisationFlags) {
  const std::string data = "--dataset synthetic --input 3x16x16 --classes 4 --limit-train 32 --limit-test 16 ";
  const Result r = run_train("--model resnet20 " + data + "--batch 16 --bn-group 8 --micro-batch 8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json_number(r.out, "micro_batch"), 8);
  const Result gn = run_train("--model resnet20 " + data + "--batch 16 --norm gn --micro-batch 3");
  ASSERT_EQ(gn.code, 0) << gn.err;
  expect_one_error_line(run_train("--model resnet20 --norm ln"), "--norm must be bn or gn, got 'ln'");
  expect_one_error_line(run_train("--model lenet5 --norm gn"), "--norm needs a model with normalisation layers");
  expect_one_error_line(run_train("--model resnet20 --norm gn --bn-group 4"), "--bn-group needs --norm bn");
  expect_one_error_line(run_train("--model resnet20 --bn-stats sometimes"), "--bn-stats must be deferred or per-group");
  expect_one_error_line(run_train("--model resnet20 --bn-group 0"), "--bn-group: 0 is out of range");
  expect_one_error_line(run_train("--model resnet20 --batch 16 --bn-group 32 --explain"),
                        "--bn-group 32 is larger than the batch of 16 samples");
  expect_one_error_line(run_train("--model resnet20 --batch 32 --micro-batch 12 --bn-group 8 --explain"),
                        "micro-batch 12 is not a multiple of the BatchNorm group of 8 samples");
  expect_one_error_line(run_train("--model resnet20 --batch 32 --micro-batch 8 --bn-group batch --explain"),
                        "needs the batch of 32 as one micro-batch");
  expect_one_error_line(run_train("--model resnet20 --batch 64 --bn-group batch --memory-budget 8MiB --explain"),
                        "the whole batch of 64 as one micro-batch");
  expect_one_error_line(run_train("--model resnet20 --dataset synthetic --input 3x32"), "--input must be CxHxW");
}

// --log writes one JSON object per optimizer step and per epoch, and an unwritable path fails at once.
TEST(TrainCli, LogHasALinePerStepAndPerEpoch) {
  const auto path = std::filesystem::temp_directory_path() / ("crumb_log_" + std::to_string(getpid()) + ".jsonl");
  const Result r = run_train("--model mlp --dataset synthetic --input 1x8x8 --classes 3 --limit-train 96 "
                             "--limit-test 32 --batch 32 --epochs 2 --lr-schedule cosine --log " + path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u);  // 3 steps + 1 epoch, twice
  EXPECT_EQ(lines[0].rfind("{\"event\":\"step\",\"step\":1,\"epoch\":1,\"batch\":1,\"loss\":", 0), 0u) << lines[0];
  EXPECT_NE(lines[2].find("\"micro_batch\":32,"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3].rfind("{\"event\":\"epoch\",\"epoch\":1,\"train_loss\":", 0), 0u) << lines[3];
  EXPECT_EQ(lines[6].rfind("{\"event\":\"step\",\"step\":6,\"epoch\":2,\"batch\":3,", 0), 0u) << lines[6];
  EXPECT_NE(lines[7].find("\"test_accuracy\":"), std::string::npos) << lines[7];
  for (const std::string& line : lines) EXPECT_EQ(line.back(), '}') << line;
  std::filesystem::remove(path);
  expect_one_error_line(run_train("--model mlp --log /nonexistent/dir/log.jsonl"), "--log: cannot write");
  expect_one_error_line(run_train("--model mlp --log="), "--log needs a value, got an empty one");
}

TEST(TrainCli, BudgetTooSmall) {
  expect_one_error_line(run_train("--model cnn --memory-budget 64KiB --explain"), "raise --memory-budget");
  // cnn's peak is its first convolution, before anything is saved: swapping and recomputing cannot help.
  expect_one_error_line(run_train("--model cnn --batch 1024 --memory-budget 16MiB --micro-batch 512 --explain"),
                        "cannot hold --micro-batch 512 with any strategy; the least each needs: in memory");
  expect_one_error_line(
      run_train("--model cnn --batch 1024 --memory-budget 16MiB --micro-batch 512 --strategy none --explain"),
      "--strategy none runs the batch of 1024 as one micro-batch in memory, but --micro-batch is 512");
  expect_one_error_line(run_train("--model cnn --batch 1024 --memory-budget 16MiB --strategy none --explain"),
                        "exceeds --memory-budget");
  expect_one_error_line(run_train("--memory-budget lots"), "--memory-budget");
}

// Under a budget the forced micro-batch does not fit in memory, --explain shows what is swapped and
// recomputed and the predicted cost; training then reports measured against predicted, and the loss is the
// same as in memory.
TEST(TrainCli, StrategySwapsAndRecomputesToFit) {
  const std::string run = "--model resnet20 --dataset synthetic --input 3x16x16 --classes 4 --limit-train 32 "
                          "--limit-test 16 --batch 16 --bn-group 8 --micro-batch 16 ";
  const Result plan = run_train(run + "--memory-budget 9MiB --explain");
  ASSERT_EQ(plan.code, 0) << plan.err;
  for (const char* part : {"(--micro-batch; ", " to fit)", "strategy auto: ", "predicted step ", "host pool"})
    EXPECT_NE(plan.out.find(part), std::string::npos) << part << " in:\n" << plan.out;
  const Result recompute = run_train(run + "--memory-budget 10MiB --strategy recompute --explain");
  ASSERT_EQ(recompute.code, 0) << recompute.err;
  EXPECT_NE(recompute.out.find("\n  recompute "), std::string::npos) << recompute.out;
  EXPECT_EQ(recompute.out.find("\n  swap "), std::string::npos) << recompute.out;
  const Result frontier = run_train(run + "--memory-budget 10MiB --strategy recompute --frontier");
  ASSERT_EQ(frontier.code, 0) << frontier.err;
  for (const char* part : {"memory-time frontier at micro-batch 16 (--strategy recompute", "in memory ", "<- the budget's"})
    EXPECT_NE(frontier.out.find(part), std::string::npos) << part << " in:\n" << frontier.out;

  const Result in_memory = run_train(run + "--epochs 1");
  const Result swapped = run_train(run + "--epochs 1 --memory-budget 9MiB");
  ASSERT_EQ(in_memory.code, 0) << in_memory.err;
  ASSERT_EQ(swapped.code, 0) << swapped.err;
  EXPECT_EQ(json_number(swapped.out, "final_loss"), json_number(in_memory.out, "final_loss"));
  EXPECT_EQ(json_number(swapped.out, "test_loss"), json_number(in_memory.out, "test_loss"));
  EXPECT_GT(json_number(swapped.out, "swapped") + json_number(swapped.out, "recomputed"), 0);
  EXPECT_GT(json_number(swapped.out, "predicted_step_s"), 0);
  EXPECT_GT(json_number(swapped.out, "measured_step_s"), 0);
  EXPECT_EQ(json_number(in_memory.out, "swapped"), 0);
  expect_one_error_line(run_train("--strategy offload"),
                        "--strategy must be auto, micro-batch, swap, recompute or none, got 'offload'");
}

}  // namespace

namespace {

// Writes an uncompressed IDX file of unsigned bytes with the given dims (pixel/label values = i % 10).
void write_idx(const std::filesystem::path& path, const std::vector<uint32_t>& dims) {
  std::ofstream f(path, std::ios::binary);
  const char magic[4] = {0, 0, 8, static_cast<char>(dims.size())};
  f.write(magic, 4);
  size_t count = 1;
  for (uint32_t d : dims) {
    const char be[4] = {char(d >> 24), char(d >> 16), char(d >> 8), char(d)};
    f.write(be, 4);
    count *= d;
  }
  for (size_t i = 0; i < count; ++i) f.put(static_cast<char>(i % 10));
}

// --explain plans for the images --data holds (read from the IDX header only), 28x28 without data.
TEST(TrainCli, ExplainPlansTheShapeOfTheData) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_shape_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  write_idx(dir / "train-images-idx3-ubyte", {4, 32, 32});
  write_idx(dir / "train-labels-idx1-ubyte", {4});
  const Result big = run_train("--model mlp --batch 8 --explain --data " + dir.string());
  const Result none = run_train("--model mlp --batch 8 --explain --data /nonexistent");
  ASSERT_EQ(big.code, 0) << big.err;
  ASSERT_EQ(none.code, 0) << none.err;
  // mlp's first layer has 256 x (h * w) + 256 parameters: 1.13 MiB of them at 32x32, 918.56 KiB at 28x28.
  EXPECT_NE(big.out.find("parameters                            1.13 MiB"), std::string::npos) << big.out;
  EXPECT_NE(none.out.find("parameters                          918.56 KiB"), std::string::npos) << none.out;
  std::filesystem::remove_all(dir);
}

// --fuse on (the default) plans fused steps, and --explain, its CSV and the report name them after their
// chain; --fuse off plans the ops one by one.
TEST(TrainCli, FuseNamesTheFusedSteps) {
  const auto csv = std::filesystem::temp_directory_path() / ("crumb_fuse_" + std::to_string(getpid()) + ".csv");
  const auto html = std::filesystem::temp_directory_path() / ("crumb_fuse_" + std::to_string(getpid()) + ".html");
  const std::string run = "--model resnet20 --dataset synthetic --input 3x16x16 --classes 4 --batch 32 --explain ";
  const Result fused = run_train(run + "--explain-csv " + csv.string() + " --report " + html.string());
  ASSERT_EQ(fused.code, 0) << fused.err;
  for (const char* step : {"layer1.0.bn2+add+relu ", "batch_norm_add_relu_backward", "layer1.0.bn1+relu "})
    EXPECT_NE(fused.out.find(step), std::string::npos) << step << "\n" << fused.out;
  EXPECT_EQ(fused.out.find("layer1.0.relu2 "), std::string::npos) << fused.out;
  for (const auto& file : {csv, html}) {
    std::ifstream f(file);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("layer1.0.bn2+add+relu"), std::string::npos) << file;
    std::filesystem::remove(file);
  }
  const Result plain = run_train(run + "--fuse off");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.out.find("layer1.0.relu2 "), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("+relu"), std::string::npos) << plain.out;
  expect_one_error_line(run_train(run + "--fuse maybe"), "--fuse must be on or off, got 'maybe'");
}

TEST(TrainCli, TestImagesOfAnotherSizeAreAnError) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_mismatch_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  write_idx(dir / "train-images-idx3-ubyte", {8, 28, 28});
  write_idx(dir / "train-labels-idx1-ubyte", {8});
  write_idx(dir / "t10k-images-idx3-ubyte", {3, 2, 2});
  write_idx(dir / "t10k-labels-idx1-ubyte", {3});
  expect_one_error_line(run_train("--model mlp --batch 4 --data " + dir.string()), "test images are 1x2x2");
  std::filesystem::remove_all(dir);
}

// CIFAR-10 from a folder of binary batches: 3x32x32 inputs with per-channel normalisation, and clear errors
// for a missing --data, an unknown dataset and a folder without the files.
TEST(TrainCli, Cifar10) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("crumb_cli_cifar_" + std::to_string(getpid()));
  crumb::test::write_cifar_dir(dir, {8, 8, 4, 8, 4}, 6);
  const Result r = run_train("--dataset cifar10 --data " + dir.string() + " --model lenet5 --batch 8 --seed 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"dataset\":\"cifar10\""), std::string::npos) << r.out;
  EXPECT_TRUE(std::isfinite(json_number(r.out, "final_loss")));
  const Result plan = run_train("--dataset cifar10 --data " + dir.string() + " --model cnn --batch 8 --explain");
  ASSERT_EQ(plan.code, 0) << plan.err;
  expect_one_error_line(run_train("--dataset cifar10"), "--dataset cifar10 needs --data DIR");
  expect_one_error_line(run_train("--dataset imagenet"), "--dataset must be fashion-mnist, cifar10, synthetic or npy");
  std::filesystem::remove(dir / "test_batch.bin");
  expect_one_error_line(run_train("--dataset cifar10 --data " + dir.string()), "test_batch.bin': not found");
  std::filesystem::remove_all(dir);
}

// Synthetic data of any shape and class count: train and test share the class prototypes (so a model
// learns it), nothing is read from disk, and the shape flags are checked.
TEST(TrainCli, SyntheticData) {
  const Result r = run_train("--dataset synthetic --input 3x16x16 --classes 4 --model cnn --epochs 2 --batch 32 "
                             "--limit-train 512 --limit-test 256 --seed 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"dataset\":\"synthetic\""), std::string::npos) << r.out;
  EXPECT_GT(json_number(r.out, "test_accuracy"), 0.5);  // 4 classes: chance is 0.25
  const Result plan = run_train("--dataset synthetic --input 3x224x224 --classes 1000 --model lenet5 --explain");
  ASSERT_EQ(plan.code, 0) << plan.err;
  EXPECT_NE(plan.out.find("micro-batch"), std::string::npos) << plan.out;
  expect_one_error_line(run_train("--dataset synthetic --input 3x224"), "--input must be CxHxW");
  expect_one_error_line(run_train("--dataset synthetic --input 0x8x8"), "--input channels: 0 is out of range");
  expect_one_error_line(run_train("--input 3x8x8"), "--input needs --dataset synthetic");
  expect_one_error_line(run_train("--classes 3"), "--classes needs --dataset synthetic");
  expect_one_error_line(run_train("--dataset synthetic --classes 1"), "--classes: 1 is out of range");
  expect_one_error_line(run_train("--dataset synthetic --data /tmp"), "reads no files");
  const Result aug = run_train("--dataset synthetic --input 3x16x16 --classes 4 --model cnn --epochs 2 --batch 32 "
                               "--limit-train 512 --limit-test 256 --seed 3 --augment crop-flip");
  ASSERT_EQ(aug.code, 0) << aug.err;
  EXPECT_NE(json_number(aug.out, "final_loss"), json_number(r.out, "final_loss"));  // the augmented run differs
  expect_one_error_line(run_train("--augment flip-crop"), "--augment must be none or crop-flip");
}

TEST(TrainCli, BatchLargerThanTheDatasetIsTheWholeDataset) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const Result r = run_train("--model mlp --batch 16777216 --limit-train 100 --limit-test 50");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"batch\":100,\"micro_batch\":100"), std::string::npos) << r.out;
}

}  // namespace

// A batch far larger than the budget could hold whole streams through the loader's micro-batch slots.
TEST(TrainCli, LargeBatchUnderASmallBudget) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const Result r = run_train("--model lenet5 --batch 4096 --memory-budget 16MiB --limit-train 4096 --limit-test 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"batch\":4096"), std::string::npos) << r.out;
  EXPECT_GT(json_number(r.out, "micro_batch"), 64);
}

namespace {

// A .npy file of dtype descr and shape (a tuple's text) holding data, in dir.
void write_npy(const std::filesystem::path& dir, const std::string& name, const std::string& descr,
               const std::string& shape, const std::string& data) {
  std::ofstream(dir / name, std::ios::binary) << crumb::test::npy(descr, shape, data.data(), data.size());
}

template <class T> std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The peak resident memory of the largest child process waited for so far (train, run through the shell).
std::size_t children_peak_rss() {
  struct rusage u;
  return ::getrusage(RUSAGE_CHILDREN, &u) == 0 ? static_cast<std::size_t>(u.ru_maxrss) * 1024 : 0;
}

// What planning may add to a child's resident memory over a small run's: 96 MiB, or 512 MiB under the
// sanitizers, whose quarantine of freed blocks holds up to 256 MiB (ASan's default) of the search's graph
// copies (126 MiB more than the small run in the CI's sanitizer build; 4 MiB with
// ASAN_OPTIONS=quarantine_size_mb=0). Either is far below the gigabytes these tests guard against (kernel
// timings with buffers of the model's size).
std::size_t planning_rss_margin() { return (crumb::alloc_counter_enabled() ? std::size_t{96} : std::size_t{512}) << 20; }

}  // namespace

// --dataset npy: a folder of .npy files trains; a bad one is one error line naming the file.
TEST(TrainCli, NpyData) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("crumb_cli_npy_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& descr, const std::string& shape, const std::string& data) {
    write_npy(dir, name, descr, shape, data);
  };
  // 200 images of 1x8x8 whose class (of 3) is their brightness.
  std::string x, y;
  for (int i = 0; i < 200; ++i) {
    y += char(i % 3);
    x += std::string(64, char(40 + 80 * (i % 3) + i % 7));
  }
  write("x.npy", "|u1", "(200, 1, 8, 8)", x);
  write("y.npy", "|u1", "(200,)", y);
  const Result r = run_train("--model mlp --dataset npy --data " + dir.string() + " --epochs 3 --batch 20 --lr 0.1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"dataset\":\"npy\""), std::string::npos) << r.out;
  EXPECT_GT(json_number(r.out, "test_accuracy"), 0.9);  // the last 20 images, held out
  expect_one_error_line(run_train("--dataset npy"), "--dataset npy needs --data DIR");
  y[5] = 7;
  y[6] = char(-1);
  write("y.npy", "|i1", "(200,)", y);
  expect_one_error_line(run_train("--model mlp --dataset npy --data " + dir.string()),
                        (dir / "y.npy").string() + ": label -1 at index 6 is negative");
  std::filesystem::remove_all(dir);
}

// Data whose defect shows late (a NaN pixel, a stray label) is reported as what it is: the pixel, not
// divergence; the label, not "every label is 0" or a run out of host memory.
TEST(TrainCli, NpyDataDefectsNameTheirCause) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("crumb_cli_npy_defects_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string args = "--model mlp --dataset npy --data " + dir.string() + " --epochs 1 --batch 16";
  std::vector<float> x(200 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) / 97.f;
  std::vector<int64_t> y(200);
  for (int i = 0; i < 200; ++i) y[i] = i % 3;
  x[123 * 64 + 9] = std::nanf("");
  write_npy(dir, "x.npy", "<f4", "(200, 1, 8, 8)", bytes_of(x));
  write_npy(dir, "y.npy", "<i8", "(200,)", bytes_of(y));
  const Result nan = run_train(args);
  expect_one_error_line(nan, "sample 123 (image 123 of " + (dir / "x.npy").string() +
                                 ") holds nan at element 9 (channel 0, row 1, column 1): the images must be finite");
  EXPECT_EQ(nan.err.find("diverged"), std::string::npos) << nan.err;
  x[123 * 64 + 9] = 0.5f;
  write_npy(dir, "x.npy", "<f4", "(200, 1, 8, 8)", bytes_of(x));
  y[17] = INT32_MAX;
  write_npy(dir, "y.npy", "<i8", "(200,)", bytes_of(y));
  expect_one_error_line(run_train(args), "label 2147483647 at index 17 would make 2147483648 classes");
  y[17] = 0;
  write_npy(dir, "y.npy", "<i8", "(200,)", bytes_of(std::vector<int64_t>(200, 0)));
  expect_one_error_line(run_train(args), "every label is 0; training needs at least 2 classes");
  // A stray label of 10^8: 10^8 + 1 classes, which planning refuses from sizes, at once and within the
  // budget, naming the layer they make too large (it once planned 10 GB into "out of host memory").
  y[17] = 100000000;
  write_npy(dir, "y.npy", "<i8", "(200,)", bytes_of(y));
  const Result small = run_train(args + " --explain --memory-budget 64MiB --limit-train 1");
  const std::size_t before = children_peak_rss();
  for (const char* strategy : {"auto", "micro-batch", "recompute"})
    expect_one_error_line(run_train(args + " --explain --memory-budget 64MiB --strategy " + strategy),
                          "the largest parameter is '5.weight' [100000001, 128]");
  EXPECT_LT(children_peak_rss(), before + planning_rss_margin()) << "before: " << before << ", " << small.err;
  std::filesystem::remove_all(dir);
}

// Planning never takes more than the budget: a model whose parameters alone exceed it fails with the
// budget error before anything is measured or allocated, --explain and --strategy auto included.
TEST(TrainCli, PlanningStaysWithinTheBudget) {
  const Result small = run_train("--model lenet5 --dataset synthetic --explain --memory-budget 64MiB");
  ASSERT_EQ(small.code, 0) << small.err;
  const std::size_t before = children_peak_rss();
  const auto start = std::chrono::steady_clock::now();
  for (const char* strategy : {"auto", "swap", "recompute", "micro-batch"})
    for (const char* explain : {"--explain", "--epochs 1 --limit-train 2 --limit-test 1"})
      expect_one_error_line(run_train(std::string("--model lenet5 --dataset synthetic --input 1x2048x2048 ") + explain +
                                      " --memory-budget 64MiB --strategy " + strategy),
                            "memory budget 64.00 MiB cannot hold");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  // 4.3 GB resident, once, for --explain --strategy auto.
  EXPECT_LT(children_peak_rss(), before + planning_rss_margin()) << "before: " << before;
}

// A layer whose output is too large to index is refused by name, with its shapes, when the network is built.
TEST(TrainCli, ShapeOverflowNamesTheLayer) {
  expect_one_error_line(
      run_train(R"(--dataset synthetic --explain --network '{"nodes": [{"name": "c", "op": "conv2d", "out_channels": 1,
                   "kernel_size": 1, "padding": 16777216}, {"name": "f", "op": "flatten"},
                   {"name": "fc", "op": "linear", "out_features": 10}]}')"),
      "layer 'c' (conv2d): output 'c' would be per-sample [1, 33554460, 33554460]");
  expect_one_error_line(run_train("--dataset synthetic --explain --network '{\"nodes\": [{\"name\": \"f\xff\", \"op\": "
                                  "\"flatten\"}, {\"name\": \"fc\", \"op\": \"linear\", \"out_features\": 10}]}'"),
                        "a string that is not UTF-8 (byte 0xff)");
}

namespace {

TEST(TrainCli, PrecisionFlags) {
  expect_one_error_line(run_train("--precision fp8"), "--precision must be fp32, tf32, bf16, fp16 or fp64, got 'fp8'");
  // Refused before the data is read or a GPU is looked for, with or without one.
  expect_one_error_line(run_train("--precision fp64 --device cuda"), "--precision fp64 runs on the CPU only");
  expect_one_error_line(run_train("--precision bf16 --loss-scale 1024"), "--loss-scale needs --precision fp16");
  expect_one_error_line(run_train("--loss-scale-growth-interval 10"),
                        "--loss-scale-growth-interval needs --precision fp16");
  expect_one_error_line(run_train("--precision fp16 --loss-scale 1000"), "power of two");
  expect_one_error_line(run_train("--tf32 --precision bf16"), "--tf32 is --precision tf32");
  expect_one_error_line(run_train("--channels-last yes"), "--channels-last must be on, off or auto, got 'yes'");
  // --explain says when the plan is channels-last (auto: not on the CPU).
  for (const char* flag : {"auto", "on"}) {
    const Result r = run_train(std::string("--model cnn --precision bf16 --explain --channels-last ") + flag);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("in bf16, channels-last,") != std::string::npos, std::string(flag) == "on") << r.out;
  }
}

// fp16 with a scale far too large: the first steps overflow and are skipped, which the progress, the log
// and the summary say; the run goes on and trains.
TEST(TrainCli, Fp16ReportsItsLossScale) {
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("crumb_cli_fp16_" + std::to_string(getpid()) + ".jsonl")).string();
  const Result r = run_train("--model lenet5 --dataset synthetic --limit-train 1024 --limit-test 64 --batch 32 "
                             "--precision fp16 --loss-scale 1073741824 --log " + log);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"precision\":\"fp16\""), std::string::npos) << r.out;
  const std::size_t at = r.out.find("\"skipped_steps\":");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::stoi(r.out.substr(at + 16)), 0) << r.out;
  EXPECT_NE(r.out.find("\"loss_scale\":"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find(" scale "), std::string::npos) << r.err;
  std::ifstream f(log);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(text.find("\"skipped\":true"), std::string::npos);
  EXPECT_NE(text.find("\"skipped\":false"), std::string::npos);
  std::filesystem::remove(log);
}

// --precision fp64 trains every model on the CPU (vgg11_bn, the largest, in TorchParity), the device
// chosen for it; the summary says fp64.
TEST(TrainCli, Fp64TrainsEveryModel) {
  for (const char* model : {"mlp", "cnn", "lenet5", "resnet18", "resnet20", "resnet50"}) {
    const bool norm = std::string(model).rfind("resnet", 0) == 0;
    const Result r = run_train(std::string("--model ") + model + " --dataset synthetic --input 3x32x32 --limit-train 8 " +
                               "--limit-test 4 --batch 4 --precision fp64" + (norm ? " --bn-group 2" : ""));
    ASSERT_EQ(r.code, 0) << model << ": " << r.err;
    EXPECT_NE(r.out.find("\"precision\":\"fp64\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"device\":\"cpu\""), std::string::npos) << r.out;
    EXPECT_TRUE(std::isfinite(json_number(r.out, "final_loss"))) << r.out;
  }
}

// A CPU run's summary says what its kernels run on: the vector instructions of the kernel library loaded,
// and in bf16 how the layers multiply, as this process finds the CPU (CRUMB_CPU_AMX=off: vdpbf16ps).
TEST(TrainCli, SummaryNamesWhatTheCpuKernelsRunOn) {
  const std::string args = "--model lenet5 --dataset synthetic --limit-train 64 --limit-test 16 --batch 32";
  const Result fp32 = run_train(args);
  ASSERT_EQ(fp32.code, 0) << fp32.err;
#if defined(__AVX512F__)  // a native build: the kernels are compiled as this test is
  EXPECT_NE(fp32.out.find("\"cpu_kernels\":\"avx512\""), std::string::npos) << fp32.out;
#elif defined(__AVX2__)
  EXPECT_NE(fp32.out.find("\"cpu_kernels\":\"avx2\""), std::string::npos) << fp32.out;
#endif
  EXPECT_NE(fp32.out.find("\"cpu_kernels\":\""), std::string::npos) << fp32.out;
  EXPECT_EQ(fp32.out.find("cpu_bf16"), std::string::npos) << "float32 has no bf16 path: " << fp32.out;
  const char* dot = crumb::cpu::has_bf16_dot() ? "avx512_bf16" : "float32";
  const Result by_default = run_train(args + " --precision bf16");
  ASSERT_EQ(by_default.code, 0) << by_default.err;
  EXPECT_NE(by_default.out.find(std::string("\"cpu_bf16\":\"") + (crumb::cpu::has_amx() ? "amx" : dot) + "\""),
            std::string::npos) << by_default.out;
  const Result off = run_train(args + " --precision bf16", "CRUMB_CPU_AMX=off ");
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.out.find(std::string("\"cpu_bf16\":\"") + dot + "\""), std::string::npos) << off.out;
}

TEST(TrainCli, Bf16Trains) {
  const Result r = run_train("--model cnn --dataset synthetic --limit-train 256 --limit-test 64 --batch 32 "
                             "--precision bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"precision\":\"bf16\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("skipped_steps"), std::string::npos) << "bf16 has no loss scale: " << r.out;
  // Channels-last on the CPU computes the same numbers (engine/plan/layout.h).
  const Result nhwc = run_train("--model cnn --dataset synthetic --limit-train 256 --limit-test 64 --batch 32 "
                                "--precision bf16 --channels-last on");
  ASSERT_EQ(nhwc.code, 0) << nhwc.err;
  for (const char* field : {"\"final_loss\":", "\"test_loss\":", "\"test_accuracy\":"}) {
    auto value = [&](const std::string& out) {
      const std::size_t at = out.find(field);
      return at == std::string::npos ? std::string("absent") : out.substr(at, out.find_first_of(",}", at) - at);
    };
    EXPECT_EQ(value(nhwc.out), value(r.out));
  }
}

}  // namespace

namespace {

// A resume never moves a run backwards or loses its optimizer, and continues the run's own files from
// any folder.
TEST(TrainCli, ResumeNeverMovesBackwards) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_backwards_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "elsewhere");
  const std::string ck = (dir / "ck.st").string();
  const std::string data = "--model cnn --dataset synthetic --limit-train 128 --limit-test 32 --batch 32 ";
  ASSERT_EQ(run_train(data + "--epochs 2 --save " + ck).code, 0);
  const std::string before = tensor_bytes(ck);
  expect_one_error_line(run_train("--resume " + ck + " --epochs 1"), "--epochs 1 would move it backwards");
  expect_one_error_line(run_train("--resume " + ck), "finished its 2 epoch(s)");
  EXPECT_EQ(tensor_bytes(ck), before) << "a refused resume rewrote the checkpoint";

  std::filesystem::rename(ck + ".optimizer", (dir / "kept").string());
  expect_one_error_line(run_train("--resume " + ck + " --epochs 3"), ".optimizer is missing");
  expect_one_error_line(run_train(data + "--fresh-optimizer"), "--fresh-optimizer needs --resume");
  const Result fresh = run_train("--resume " + ck + " --epochs 3 --fresh-optimizer");
  EXPECT_EQ(fresh.code, 0) << fresh.err;
  std::filesystem::remove_all(dir);
}

// A flag that cannot change on resume is accepted as the run recorded it, checked against the run's
// settings, not train's defaults (issue 37: --loss-scale of an fp16 run said "needs --precision fp16");
// one that would change the run names both values.
TEST(TrainCli, ResumeAcceptsFlagsAsRecorded) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_resume_flags_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string ck = (dir / "ck.st").string();
  const std::string run = "--model mlp --dataset synthetic --input 1x8x8 --classes 3 --limit-train 128 "
                          "--limit-test 32 --batch 32 --precision fp16 --loss-scale 1024 --threads 1 ";
  ASSERT_EQ(run_train(run + "--epochs 1 --save " + ck).code, 0);
  const Result r = run_train("--resume " + ck + " --epochs 2 --loss-scale 1024 --micro-batch 16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json_number(r.out, "micro_batch"), 16);
  expect_one_error_line(run_train("--resume " + ck + " --epochs 3 --loss-scale 2048"),
                        "--loss-scale cannot change when resuming: the run recorded 1024, given 2048 (a resumed run "
                        "continues with its recorded settings; it may set --epochs, --micro-batch");
  expect_one_error_line(run_train("--resume " + ck + " --epochs 3 --precision bf16"),
                        "--precision cannot change when resuming: the run recorded fp16, given bf16");
  expect_one_error_line(run_train("--resume " + ck + " --epochs 3 --micro-batch 64"),
                        "--micro-batch 64 is larger than --batch 32");
  std::filesystem::remove_all(dir);
}

// The recorded --save is absolute: resumed from another folder, the run goes on in its own checkpoint, and
// ends with the bytes of an uninterrupted run.
TEST(TrainCli, ResumeFromAnotherFolderIsExact) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_folders_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "run");
  std::filesystem::create_directories(dir / "elsewhere");
  const std::string data = "--model cnn --dataset synthetic --limit-train 128 --limit-test 32 --batch 32 ";
  const std::string train = std::string(CRUMB_TRAIN_BIN);
  ASSERT_EQ(run_train(data + "--epochs 2 --save " + (dir / "whole.st").string()).code, 0);
  ASSERT_EQ(std::system(("cd " + (dir / "run").string() + " && " + train + " " + data +
                         "--epochs 1 --save ck.st >/dev/null 2>&1").c_str()),
            0);
  ASSERT_EQ(std::system(("cd " + (dir / "elsewhere").string() + " && " + train +
                         " --resume ../run/ck.st --epochs 2 >/dev/null 2>&1").c_str()),
            0);
  EXPECT_FALSE(std::filesystem::exists(dir / "elsewhere" / "ck.st"));
  EXPECT_EQ(tensor_bytes((dir / "run" / "ck.st").string()), tensor_bytes((dir / "whole.st").string()));
  std::filesystem::remove_all(dir);
}

// CRUMB_CPU_AMX is on or off (or unset); anything else is refused before any work, not taken for on.
TEST(TrainCli, CpuAmxSettingIsOnOrOff) {
  const std::string args = "--model mlp --dataset synthetic --batch 8 --explain";
  for (const char* bad : {"0", "false", "OFF", "no"})
    expect_one_error_line(run_train(args, std::string("CRUMB_CPU_AMX=") + bad + " "),
                          std::string("CRUMB_CPU_AMX=") + bad + " is neither on nor off");
  for (const char* good : {"on", "off", ""}) {
    const Result r = run_train(args, std::string("CRUMB_CPU_AMX=") + good + " ");
    EXPECT_EQ(r.code, 0) << good << ": " << r.err;
  }
}

TEST(TrainCli, SizesAreParsedStrictly) {
  expect_one_error_line(run_train("--dataset synthetic --input 1x4294967297x28"), "--input height");
  expect_one_error_line(run_train("--dataset synthetic --input 1x28x28x1"), "--input must be CxHxW");
  expect_one_error_line(run_train("--dataset synthetic --input 1x-28x28"), "--input height");
  for (const char* bad : {"' 64MiB'", "0x40", "-1", "inf", "1..5GiB", ".5GiB"})
    expect_one_error_line(run_train(std::string("--memory-budget ") + bad), "is not a size");
  expect_one_error_line(run_train("--memory-budget 1e3"), "unknown unit 'e3'");
}

}  // namespace

namespace {

// Copies of one signal that arrive together are one request to stop: the run saves and exits once. Here
// three at once, and a terminal's Ctrl-C with train under `timeout`, which signals the whole process
// group and then forwards the signal to train again.
TEST(TrainCli, SignalsArrivingTogetherStopOnce) {
  const auto path = std::filesystem::temp_directory_path() / ("crumb_sig_" + std::to_string(getpid()) + ".st");
  const std::string train = std::string(CRUMB_TRAIN_BIN) + " --model cnn --dataset synthetic --limit-train 60000 "
                            "--batch 32 --save " + path.string();
  Result r = run_signalled(train + " >/dev/null 2>$ERR", 0.2, "kill -TERM $PID; kill -TERM $PID; kill -INT $PID");
  // Signals pending at once are delivered lowest number first, so the SIGINT may be the one noted: the run
  // stops once, by whichever it noted, and exits with that signal's code.
  const std::size_t stop = r.err.find("train: interrupted by SIG");
  ASSERT_NE(stop, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("train: interrupted by", stop + 1), std::string::npos) << r.err;
  const bool by_int = r.err.compare(stop, 28, "train: interrupted by SIGINT") == 0;
  EXPECT_TRUE(by_int || r.err.compare(stop, 29, "train: interrupted by SIGTERM") == 0) << r.err;
  EXPECT_EQ(r.code, by_int ? 130 : 143) << r.err;
  EXPECT_NE(r.err.find("saved " + path.string()), std::string::npos) << r.err;
  std::filesystem::remove(path);
  r = run_signalled("timeout 600 " + train + " >/dev/null 2>$ERR", 0.2, "kill -INT -$PID");
  EXPECT_NE(r.err.find("train: interrupted by SIGINT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("saved " + path.string()), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + ".optimizer");
}

// Before training there is nothing to save: a signal while --explain plans (seconds for ResNet-50 at 224
// on the CPU) ends it at once.
TEST(TrainCli, SignalEndsPlanningAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(("sh -c '" + std::string(CRUMB_TRAIN_BIN) +
                                  " --model resnet50 --dataset synthetic --input 3x224x224 --classes 1000 --batch 512 "
                                  "--memory-budget 1GiB --explain >/dev/null 2>&1 & pid=$!; sleep 0.5; kill -INT $pid; "
                                  "wait $pid'")
                                     .c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_LT(seconds, 3.0);
}

}  // namespace

// Outputs never destroy inputs, and auxiliary outputs never cost the training (docs/reliability.md).
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("crumb_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A model small enough that a run takes a fraction of a second and its checkpoint ~140 KB.
const std::string kTiny = "--model mlp --dataset synthetic --input 1x2x2 --classes 2 --limit-test 16 --threads 1 ";

void expect_conflict(const Result& r, const std::string& writer, const std::string& other) {
  expect_one_error_line(r, "is the same file as");
  EXPECT_NE(r.err.find("error: " + writer + " "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" as " + other + " "), std::string::npos) << r.err;
}

TEST(TrainOutputs, NoOutputIsAnInput) {
  const auto dir = fresh_dir("input_clashes");
  const std::string d = dir.string() + "/", a = d + "a.st";
  ASSERT_EQ(run_train(kTiny + "--limit-train 64 --save " + a).code, 0);
  const std::string weights = read_text(a), state = read_text(a + ".optimizer");
  const std::string run = kTiny + "--limit-train 64 ";
  expect_conflict(run_train(run + "--load " + a + " --report " + a), "--report", "--load");
  expect_conflict(run_train(run + "--load " + a + " --save " + a), "--save", "--load");
  expect_conflict(run_train(run + "--load " + a + " --log " + a + ".optimizer"), "--log", "--load's optimizer file");
  // Links: a hard link is the same file; an input named through a symbolic link is its target.
  std::filesystem::create_hard_link(a, d + "hard.st");
  expect_conflict(run_train(run + "--load " + a + " --log " + d + "hard.st"), "--log", "--load");
  std::filesystem::create_symlink(a, d + "link.st");
  expect_conflict(run_train(run + "--load " + d + "link.st --report " + a), "--report", "--load");
  // An output is never written through a symbolic link, even to a file of its own.
  std::filesystem::create_symlink(d + "elsewhere.jsonl", d + "log_link.jsonl");
  expect_one_error_line(run_train(run + "--log " + d + "log_link.jsonl"),
                        "--log: " + d + "log_link.jsonl is a symbolic link");
  EXPECT_FALSE(std::filesystem::exists(d + "elsewhere.jsonl"));
  // The data files are inputs too.
  crumb::test::write_cifar_dir(dir / "cifar", {1, 1, 1, 1, 1}, 1);
  const std::string test_batch = read_text(dir / "cifar" / "test_batch.bin");
  expect_conflict(run_train("--model cnn --dataset cifar10 --data " + d + "cifar --log " + d + "cifar/test_batch.bin"),
                  "--log", "--data");
  EXPECT_EQ(read_text(dir / "cifar" / "test_batch.bin"), test_batch);
  EXPECT_EQ(read_text(a), weights);
  EXPECT_EQ(read_text(a + ".optimizer"), state);
  std::filesystem::remove_all(dir);
}

TEST(TrainOutputs, NoOutputIsAnotherOutput) {
  const auto dir = fresh_dir("output_clashes");
  const std::string d = dir.string() + "/", run = kTiny + "--limit-train 64 ";
  expect_conflict(run_train(run + "--save " + d + "b.st --report " + d + "./b.st"), "--report", "--save");
  expect_conflict(run_train(run + "--save " + d + "c.st --log " + dir.string() + "/../" + dir.filename().string() +
                            "/c.st"),
                  "--log", "--save");
  expect_conflict(run_train(run + "--save " + d + "e.st --log " + d + "e.st.optimizer"), "--log",
                  "--save's optimizer file");
  expect_conflict(run_train("--explain --model mlp --explain-csv " + d + "r.html --report " + d + "r.html"),
                  "--explain-csv", "--report");
  expect_conflict(run_train(run + "--report-dir " + d + "pictures --log " + d + "pictures/timeline.csv"), "--log",
                  "--report-dir");
  // Each was refused before anything was written.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 0);
  std::filesystem::remove_all(dir);
}

// A FIFO as an output is refused at once: it blocked the run (and SIGTERM with it) until a reader came.
TEST(TrainOutputs, FifoOutputsAreRefusedAtOnce) {
  const auto dir = fresh_dir("fifo_out");
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_one_error_line(run_train(kTiny + "--limit-train 64 --log " + fifo, "timeout 10 "),
                        "--log: " + fifo + " is not a regular file");
  expect_one_error_line(run_train(kTiny + "--limit-train 64 --report " + fifo, "timeout 10 "),
                        "--report: " + fifo + " is not a regular file");
  expect_one_error_line(run_train("--explain --model mlp --explain-csv " + fifo, "timeout 10 "),
                        "--explain-csv: " + fifo + " is not a regular file");
  std::filesystem::remove_all(dir);
}

// The files a process writes while RLIMIT_FSIZE is `bytes` (train ignores SIGXFSZ: a write past it fails).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit small = old_;
    small.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &old_); }

 private:
  rlimit old_;
};

// A --log write that fails mid-run (here a file-size limit) warns once; the run finishes and saves.
TEST(TrainOutputs, FailingLogWarnsAndTheRunGoesOn) {
  const auto dir = fresh_dir("log_limit");
  const std::string log = (dir / "run.jsonl").string(), save = (dir / "m.st").string();
  Result r;
  {
    // The checkpoint (~140 KB) fits; the log (~190 KB for 1200 steps) does not.
    const FileSizeLimit limit(150000);
    // lr 0.01: 1200 single-sample steps at the default 0.05 can diverge on some draws of the data.
    r = run_train(kTiny + "--limit-train 1200 --batch 1 --lr 0.01 --save " + save + " --log " + log);
  }
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string warning = "train: warning: --log: cannot write " + log + ": File too large";
  EXPECT_NE(r.err.find(warning), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << "warned more than once: " << r.err;
  EXPECT_NE(r.out.find("\"model\":\"mlp\""), std::string::npos) << r.out;
  EXPECT_GT(std::filesystem::file_size(log), 100000u);  // it logged until the limit
  const Result loaded = run_train(kTiny + "--limit-train 64 --epochs 0 --load " + save);
  EXPECT_EQ(loaded.code, 0) << loaded.err;
  std::filesystem::remove_all(dir);
}

// A resumed run adds to its log: the lines of the run it continues stay.
TEST(TrainOutputs, ResumedRunAppendsToItsLog) {
  const auto dir = fresh_dir("log_resume");
  const std::string log = (dir / "run.jsonl").string(), save = (dir / "m.st").string();
  const Result first = run_train(kTiny + "--limit-train 64 --batch 32 --save " + save + " --log " + log);
  ASSERT_EQ(first.code, 0) << first.err;
  const Result resumed = run_train("--resume " + save + " --epochs 2");  // --save and --log as recorded
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  std::istringstream text(read_text(log));
  std::vector<std::string> lines;
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u);  // 2 steps + 1 epoch, twice
  EXPECT_EQ(lines[0].rfind("{\"event\":\"step\",\"step\":1,", 0), 0u) << lines[0];
  EXPECT_EQ(lines[3].rfind("{\"event\":\"step\",\"step\":3,\"epoch\":2,", 0), 0u) << lines[3];
  std::filesystem::remove_all(dir);
}

// A report that cannot be written after training warns, leaves the previous report whole, and the run
// still ends with its summary and status 0.
TEST(TrainOutputs, FailingReportWarnsAndKeepsThePreviousOne) {
  const auto dir = fresh_dir("report_limit");
  const std::string report = (dir / "r.html").string();
  std::ofstream(report) << "previous report";
  Result r;
  {
    const FileSizeLimit limit(4096);  // the report is ~30 KB
    r = run_train(kTiny + "--limit-train 64 --report " + report);
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("train: warning: cannot write --report " + report + ": File too large"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("\"model\":\"mlp\""), std::string::npos) << r.out;
  EXPECT_EQ(read_text(report), "previous report");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << "a temporary file was left";
  std::filesystem::remove_all(dir);
}

// Sets an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// The message of a save to path that fails, and where it says the weights went ("" if nowhere).
std::pair<std::string, std::string> failed_save(crumb::Trainer& t, const std::string& path) {
  try {
    t.save(path);
  } catch (const crumb::Error& e) {
    const std::string m = e.what(), before = "the weights were saved to ";
    const std::size_t at = m.find(before);
    if (at == std::string::npos) return {m, ""};
    return {m, m.substr(at + before.size(), m.find(" instead", at) - at - before.size())};
  }
  ADD_FAILURE() << "saving to " << path << " did not fail";
  return {};
}

// A failed save's weights go to a file of a unique name in $TMPDIR, else in the save's folder, else in
// the current folder; the error says the save failed and names the file, or says they are lost.
TEST(TrainOutputs, RescueFilesAreUniqueAndFallBack) {
  const auto dir = fresh_dir("rescue_places");
  crumb::TrainConfig c;
  c.model = "mlp";
  c.data.dataset = "synthetic";
  c.data.height = c.data.width = 2;
  c.data.classes = 2;
  c.data.limit_train = 32;
  c.data.limit_test = 16;
  c.threads = 1;
  crumb::Trainer t(c, std::make_shared<const crumb::data::DataSplit>(crumb::data::load_data(c.data)));
  t.prepare();
  const std::string gone = (dir / "gone" / "m.st").string();
  std::filesystem::create_directories(dir / "tmp");
  {
    const ScopedEnv tmpdir("TMPDIR", (dir / "tmp").string());
    const auto [first, at1] = failed_save(t, gone);
    const auto [second, at2] = failed_save(t, gone);
    EXPECT_EQ(first.rfind("the save failed: cannot write checkpoint " + gone, 0), 0u) << first;
    EXPECT_EQ(at1.rfind((dir / "tmp" / "crumb-rescue-").string(), 0), 0u) << first;
    EXPECT_NE(at1, at2) << "two failed saves of one process share a rescue file";
    for (const std::string& f : {at1, at2}) {
      EXPECT_TRUE(std::filesystem::exists(f + ".optimizer")) << f;
      EXPECT_EQ(crumb::recorded_value(crumb::checkpoint_metadata(f), "train.epoch", f), "0");
    }
  }
  {
    // $TMPDIR unusable: the save's folder (the failure was the file's: it is a folder).
    const ScopedEnv tmpdir("TMPDIR", (dir / "missing").string());
    std::filesystem::create_directories(dir / "saves" / "folder.st");
    const auto [message, at] = failed_save(t, (dir / "saves" / "folder.st").string());
    EXPECT_EQ(message.rfind("the save failed: ", 0), 0u) << message;
    EXPECT_EQ(at.rfind((dir / "saves" / "crumb-rescue-").string(), 0), 0u) << message;
    // Nor the save's folder: the current folder.
    const auto cwd = std::filesystem::current_path();
    std::filesystem::create_directories(dir / "here");
    std::filesystem::current_path(dir / "here");
    const auto [message2, at2] = failed_save(t, gone);
    std::filesystem::current_path(cwd);
    EXPECT_EQ(at2.rfind((dir / "here" / "crumb-rescue-").string(), 0), 0u) << message2;
    EXPECT_TRUE(std::filesystem::exists(at2)) << message2;
  }
  {
    // No folder takes them (a file-size limit fails every copy): the error says so and where it tried,
    // and leaves no empty rescue file behind.
    const ScopedEnv tmpdir("TMPDIR", (dir / "tmp").string());
    const auto before = std::distance(std::filesystem::directory_iterator(dir / "tmp"), {});
    void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
    std::pair<std::string, std::string> lost;
    {
      const FileSizeLimit limit(1024);
      lost = failed_save(t, (dir / "m.st").string());
    }
    std::signal(SIGXFSZ, old_handler);
    EXPECT_EQ(lost.second, "");
    EXPECT_NE(lost.first.find("the weights are lost: no copy could be written in " + (dir / "tmp").string() + ", " +
                              dir.string()),
              std::string::npos)
        << lost.first;
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "tmp"), {}), before);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

// --model-file: a network of one's own trains like the registered model it describes, plans and reports
// like one, resumes exactly without its file, and every mistake with it is one error line.
namespace {

// The cnn model (models/cnn.cc) as a description, laid out over lines as a person would write it.
const char* kCnnFile = R"({"name": "cnn_file", "nodes": [
  {"name": "0", "op": "conv2d", "out_channels": 32, "kernel_size": 3, "padding": 1}, {"name": "1", "op": "relu"},
  {"name": "2", "op": "max_pool2d", "kernel_size": 2},
  {"name": "3", "op": "conv2d", "out_channels": 64, "kernel_size": 3, "padding": 1}, {"name": "4", "op": "relu"},
  {"name": "5", "op": "max_pool2d", "kernel_size": 2}, {"name": "6", "op": "flatten"},
  {"name": "7", "op": "linear", "out_features": 128}, {"name": "8", "op": "relu"},
  {"name": "9", "op": "linear", "out_features": 4}]}
)";

TEST(TrainCli, ModelFileTrainsPlansAndResumes) {
  const auto dir = fresh_dir("model_file");
  const std::string file = (dir / "cnn.json").string();
  std::ofstream(file) << kCnnFile;
  const std::string data = "--dataset synthetic --input 1x12x12 --classes 4 --limit-train 96 --limit-test 32 "
                           "--batch 32 --threads 1 ";
  const Result named = run_train(data + "--model cnn --epochs 2");
  const Result mine = run_train(data + "--model-file " + file + " --epochs 2");
  ASSERT_EQ(named.code, 0) << named.err;
  ASSERT_EQ(mine.code, 0) << mine.err;
  EXPECT_NE(mine.out.find("\"model\":\"cnn_file\""), std::string::npos) << mine.out;
  EXPECT_EQ(json_number(mine.out, "final_loss"), json_number(named.out, "final_loss"));
  EXPECT_EQ(json_number(mine.out, "test_loss"), json_number(named.out, "test_loss"));

  const std::string report = (dir / "plan.html").string();
  const Result plan = run_train(data + "--model-file " + file + " --explain --report " + report);
  ASSERT_EQ(plan.code, 0) << plan.err;
  EXPECT_EQ(plan.out.rfind("cnn_file on cpu in fp32, batch 32 in 1 micro-batch(es) of 32", 0), 0u) << plan.out;
  EXPECT_NE(read_text(report).find("cnn_file (1x12x12)"), std::string::npos);

  // One epoch saved, the file deleted, the second epoch resumed from the checkpoint alone.
  const std::string whole = (dir / "whole.st").string(), part = (dir / "part.st").string();
  ASSERT_EQ(run_train(data + "--model-file " + file + " --epochs 2 --save " + whole).code, 0);
  ASSERT_EQ(run_train(data + "--model-file " + file + " --epochs 1 --save " + part).code, 0);
  std::filesystem::copy_file(file, file + ".kept");
  std::filesystem::remove(file);
  const Result resumed = run_train("--resume " + part + " --epochs 2 --save " + part);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(tensor_bytes(whole), tensor_bytes(part));
  // The original command line with --resume added; a changed description is refused.
  std::filesystem::rename(file + ".kept", file);
  const Result again = run_train(data + "--model-file " + file + " --epochs 3 --save " + part + " --resume " + part);
  ASSERT_EQ(again.code, 0) << again.err;
  std::string other = kCnnFile;
  other.replace(other.find("\"out_channels\": 32"), 18, "\"out_channels\": 16");
  std::ofstream(file) << other;
  expect_one_error_line(run_train(data + "--model-file " + file + " --epochs 4 --resume " + part),
                        "--network cannot change when resuming: the run recorded network 'cnn_file' (another "
                        "description), given network 'cnn_file'");
  std::filesystem::remove_all(dir);
}

TEST(TrainCli, ModelFileMistakes) {
  const auto dir = fresh_dir("model_file_bad");
  const std::string file = (dir / "net.json").string();
  const std::string data = "--dataset synthetic --input 1x12x12 --classes 4 --limit-train 32 --limit-test 16 ";
  expect_one_error_line(run_train(data + "--model-file " + (dir / "none.json").string()),
                        "--model-file " + (dir / "none.json").string() + ": not found");
  std::ofstream(file) << "{\"nodes\": [\n{\"name\": \"r\", \"op\": \"relu\",}]}";
  expect_one_error_line(run_train(data + "--model-file " + file),
                        "--model-file " + file + ": invalid JSON at byte 39: expected a string key");
  std::ofstream(file) << kCnnFile;
  expect_one_error_line(run_train(data + "--model cnn --model-file " + file),
                        "--model and --model-file both give the model: give one of them");
  expect_one_error_line(run_train(data + "--model-file " + file + " --network {}"),
                        "--model-file and --network both give the network");
  expect_one_error_line(run_train(data + "--model-file " + file + " --norm gn"),
                        "--norm needs a named model: a network chooses its own layers");
  expect_one_error_line(run_train(data + "--model-file " + file + " --bn-group 4"),
                        "--bn-group needs a network with batch_norm2d nodes");
  expect_one_error_line(run_train("--dataset synthetic --model-file " + file),
                        "network 'cnn_file': the output '9' gives per-sample [4] but the loss needs [10]");
  // Inline, with a BatchNorm node: --bn-group applies, and the network's own errors name the node.
  const std::string bn = R"({"nodes": [{"name": "bn", "op": "batch_norm2d"}, {"name": "f", "op": "flatten"},
                                       {"name": "fc", "op": "linear", "out_features": 4}]})";
  const Result r = run_train(data + "--epochs 1 --batch 16 --bn-group 8 --network '" + bn + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  expect_one_error_line(run_train(data + "--batch 4 --network '" + bn + "'"),
                        "layer 'bn' normalises groups of 32 samples, more than the batch of 4");
  expect_one_error_line(run_train(data + "--network '{\"nodes\": [{\"name\": \"c\", \"op\": \"conv\"}]}'"),
                        "network 'network': node 'c': unknown op 'conv' (known: adaptive_avg_pool2d");
  std::filesystem::remove_all(dir);
}

// count images of 1x8x8 whose class (of 3) is their brightness, as DIR/x<split>.npy and DIR/y<split>.npy.
void write_npy_split(const std::filesystem::path& dir, const std::string& split, int count) {
  std::string x, y;
  for (int i = 0; i < count; ++i) {
    y += char(i % 3);
    x += std::string(64, char(40 + 80 * (i % 3) + i % 7));
  }
  const std::string n = std::to_string(count);
  std::ofstream(dir / ("x" + split + ".npy"), std::ios::binary) << crumb::test::npy("|u1", "(" + n + ", 1, 8, 8)", x.data(), x.size());
  std::ofstream(dir / ("y" + split + ".npy"), std::ios::binary) << crumb::test::npy("|u1", "(" + n + ",)", y.data(), y.size());
}

// Every input is opened without blocking and must be a regular file: a FIFO as a data file, a test label
// file (even for --explain, which reads the shapes), a network description or a checkpoint used to hang
// until killed, /dev/zero as --model-file to read until out of memory. Under a timeout, so that a
// regression fails instead of hanging.
TEST(TrainCli, SpecialInputsAreRefusedAtOnce) {
  const auto dir = fresh_dir("special_inputs");
  const std::string d = dir.string() + "/", fifo = d + "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string timeout = "timeout 10 ";
  std::filesystem::create_directories(dir / "npy");
  write_npy_split(dir / "npy", "", 40);
  std::filesystem::remove(dir / "npy" / "x.npy");
  ASSERT_EQ(mkfifo((d + "npy/x.npy").c_str(), 0600), 0);
  expect_one_error_line(run_train("--model mlp --dataset npy --data " + d + "npy", timeout),
                        d + "npy/x.npy: not a regular file (a FIFO)");
  std::filesystem::create_directories(dir / "npy_test");
  write_npy_split(dir / "npy_test", "", 40);
  write_npy_split(dir / "npy_test", "_test", 10);
  std::filesystem::remove(dir / "npy_test" / "y_test.npy");
  ASSERT_EQ(mkfifo((d + "npy_test/y_test.npy").c_str(), 0600), 0);
  expect_one_error_line(run_train("--model mlp --explain --dataset npy --data " + d + "npy_test", timeout),
                        d + "npy_test/y_test.npy: not a regular file (a FIFO)");
  expect_one_error_line(run_train("--model-file " + fifo, timeout), "--model-file " + fifo + ": not a regular file (a FIFO)");
  expect_one_error_line(run_train("--model-file /dev/zero", timeout),
                        "--model-file /dev/zero: not a regular file (a device)");
  std::ofstream(d + "big.json") << "{}";
  std::filesystem::resize_file(d + "big.json", std::uintmax_t{40} << 20);
  expect_one_error_line(run_train("--model-file " + d + "big.json", timeout),
                        "more than the 32 MiB a network description may hold");
  expect_one_error_line(run_train("--resume " + fifo, timeout), "checkpoint " + fifo + ": not a regular file (a FIFO)");
  crumb::test::write_cifar_dir(dir / "cifar", {1, 1, 1, 1, 1}, 1);
  std::filesystem::remove(dir / "cifar" / "data_batch_2.bin");
  ASSERT_EQ(mkfifo((d + "cifar/data_batch_2.bin").c_str(), 0600), 0);
  expect_one_error_line(run_train("--model cnn --dataset cifar10 --data " + d + "cifar", timeout),
                        "data_batch_2.bin': not a regular file (a FIFO)");
  std::filesystem::remove_all(dir);
}

// A data file truncated while train reads it (numpy.save over a file in use) used to end the process with
// SIGBUS: no error line, no save. Now: one error line naming the file, after the last good optimizer step
// is saved; restored, the file trains on from there.
TEST(TrainCli, ADataFileTruncatedMidRunIsOneErrorAfterASave) {
  const auto dir = fresh_dir("npy_truncated");
  const std::string d = dir.string() + "/", x = d + "x.npy", save = d + "run.st", log = d + "run.jsonl";
  write_npy_split(dir, "", 4000);
  write_npy_split(dir, "_test", 30);
  const std::string kept = read_text(x);
  const std::string run = "--model mlp --dataset npy --data " + dir.string() + " --batch 10 --threads 1 --save " + save;
  const std::string err = d + "err.txt";
  FILE* p = popen(("timeout 120 " CRUMB_TRAIN_BIN " " + run + " --epochs 100 --log " + log + " 2>" + err).c_str(), "r");
  ASSERT_TRUE(p);
  for (int i = 0; i < 1200 && read_text(log).find("\"step\"") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::filesystem::resize_file(x, 4096);
  char buf[4096];
  while (fread(buf, 1, sizeof buf, p) > 0) {
  }
  const int status = pclose(p);
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = read_text(err);
  expect_one_error_line(r, x + " was truncated while training (");
  std::string steps, epoch;
  for (const auto& [key, value] : crumb::checkpoint_metadata(save)) {
    if (key == "optimizer_steps") steps = value;
    if (key == "train.epoch") epoch = value;
  }
  // Saved at the failure, or already by the save of the step it came after (an epoch's end).
  const bool saved = r.err.find("; saved the last optimizer step (" + steps + ") in " + save + ": --resume " + save +
                                " continues the run\n") != std::string::npos;
  const bool held = r.err.find("; " + save + " holds the last optimizer step (" + steps + "): --resume " + save +
                               " continues the run\n") != std::string::npos;
  EXPECT_TRUE(saved || held) << r.err;
  // The last step logged is the one saved.
  const std::string logged = read_text(log);
  const std::size_t last = logged.rfind("\"step\":");
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(std::stoll(logged.substr(last + 7)), std::stoll(steps));
  std::ofstream(x, std::ios::binary) << kept;
  const Result resumed = run_train("--resume " + save + " --epochs " + std::to_string(std::stoi(epoch) + 1));
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  std::filesystem::remove_all(dir);
}

// Every input takes part in the check that no output replaces it: the network description, and every file
// the data set could read in its folder, existing or not (a --log written as DIR/x_test.npy would break
// every later run on DIR).
TEST(TrainOutputs, TheNetworkFileAndTheDataNamesAreInputs) {
  const auto dir = fresh_dir("more_inputs");
  const std::string d = dir.string() + "/", net = d + "net.json";
  std::ofstream(net) << kCnnFile;
  const std::string run = "--dataset synthetic --input 1x12x12 --classes 4 --limit-train 32 --limit-test 16 "
                          "--model-file " + net + " ";
  expect_conflict(run_train(run + "--save " + net), "--save", "--model-file");
  expect_conflict(run_train(run + "--log " + net), "--log", "--model-file");
  expect_conflict(run_train(run + "--report " + d + "./net.json"), "--report", "--model-file");
  expect_conflict(run_train(run + "--explain --explain-csv " + net), "--explain-csv", "--model-file");
  // Resuming with the file given again (it is read to compare with the recorded network).
  ASSERT_EQ(run_train(run + "--save " + d + "r.st").code, 0);
  expect_conflict(run_train(run + "--resume " + d + "r.st --epochs 2 --log " + net), "--log", "--model-file");
  EXPECT_EQ(read_text(net), kCnnFile);
  std::filesystem::create_directories(dir / "npy");
  write_npy_split(dir / "npy", "", 40);
  const std::string npy = "--model mlp --dataset npy --data " + d + "npy ";
  expect_conflict(run_train(npy + "--log " + d + "npy/x_test.npy"), "--log", "--data");
  expect_conflict(run_train(npy + "--save " + d + "npy/y_test.npy"), "--save", "--data");
  expect_conflict(run_train(npy + "--save " + d + "npy/y.npy"), "--save", "--data");
  EXPECT_FALSE(std::filesystem::exists(d + "npy/x_test.npy"));
  EXPECT_FALSE(std::filesystem::exists(d + "npy/y_test.npy"));
  std::filesystem::remove_all(dir);
}

}  // namespace
