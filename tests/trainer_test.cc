// The Trainer in-process: fit with callbacks, exact resume (at an epoch's end and from a stop in the middle
// of one), and data parallelism over ranks that are threads of this process (a communicator over shared
// memory stands in for MPI; tests/mpirun_test.cc runs the real thing end to end).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/train/trainer.h"
#include "tests/alloc_counter.h"
#include "tests/npy_files.h"
#include "tests/small_run.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

using test::small_run;
using test::synthetic_data;

std::vector<char> weights(Trainer& t) {
  const char* p = static_cast<const char*>(t.params().data_block());
  return {p, p + t.params().bytes()};
}

std::string temp_path(const std::string& name) { return test::temp_path("trainer", name); }

// Counts what fit calls back, and asks for a stop after `stop_after` steps (0: never).
class Counter : public Callback {
 public:
  explicit Counter(int stop_after = 0) : stop_after_(stop_after) {}
  void on_fit_begin(Trainer&) override { ++begins; }
  void on_step(Trainer& t, const StepInfo& s) override {
    ++steps;
    last = s;
    if (stop_after_ && steps == stop_after_) t.request_stop();
  }
  void on_epoch_end(Trainer&, const EpochInfo& e) override { epochs.push_back(e); }
  void on_fit_end(Trainer&, bool s, int) override { stopped = s; }
  int begins = 0, steps = 0;
  bool stopped = false;
  StepInfo last;
  std::vector<EpochInfo> epochs;

 private:
  int stop_after_;
};

TEST(Trainer, FitCallsBackPerStepAndEpoch) {
  const TrainConfig c = small_run();
  Trainer t(c, synthetic_data(c));
  Counter counter;
  const FitResult r = t.fit({&counter});
  EXPECT_EQ(t.batches_per_epoch(), 6);  // 90 samples in batches of 16: the last one holds 10
  EXPECT_EQ(counter.begins, 1);
  EXPECT_EQ(counter.steps, 12);
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.samples, 180);
  EXPECT_EQ(counter.last.samples, 10);
  EXPECT_EQ(counter.last.step, 12);
  ASSERT_EQ(counter.epochs.size(), 2u);
  EXPECT_EQ(counter.epochs[1].test.accuracy, r.test.accuracy);
  EXPECT_FALSE(counter.stopped);
  EXPECT_TRUE(std::isfinite(r.last_loss));
}

// shuffle off (PyTorch's DataLoader(shuffle=False)): the first batch is the data's first samples, so its
// loss is that of a run on those samples alone; shuffled, it is another draw.
TEST(Trainer, UnshuffledBatchesKeepTheDataOrder) {
  TrainConfig c = small_run();
  c.augment = false;
  c.epochs = 1;
  const auto data = synthetic_data(c);
  auto first = std::make_shared<data::DataSplit>(*data);
  first->train.keep_first(c.batch);
  auto first_loss = [&](bool shuffle, std::shared_ptr<const data::DataSplit> d) {
    TrainConfig run = c;
    run.shuffle = shuffle;
    Trainer t(run, std::move(d));
    t.prepare();
    t.start_epoch(0);
    StepInfo step;
    EXPECT_TRUE(t.train_batch(step));
    return step.loss;
  };
  const double alone = first_loss(false, first);
  EXPECT_EQ(first_loss(false, data), alone);
  EXPECT_NE(first_loss(true, data), alone);
}

// A plan the caller made (plan_run's, as the Trainer makes it) trains as the Trainer's own does; one for
// another batch or micro-batch is an error naming both.
TEST(Trainer, RunsThePlanItIsGiven) {
  TrainConfig c = small_run();
  const auto data = synthetic_data(c);
  const data::DataShape shape{1, 12, 12, 4};
  Trainer own(c, data), given(c, plan_run(c, shape, c.batch, Device::CPU), data);
  own.fit();
  given.fit();
  EXPECT_EQ(given.micro_batch(), own.micro_batch());
  EXPECT_TRUE(weights(given) == weights(own));
  EXPECT_EQ(test::error_of([&] { Trainer(c, plan_run(c, shape, 8, Device::CPU), data); }),
            "the plan given to the Trainer is for batches of 8 samples but the run's are 16 (per rank): plan it for "
            "those");
  TrainConfig m = c;
  m.micro_batch = 8;
  const std::string msg = test::error_of([&] { Trainer(m, plan_run(c, shape, c.batch, Device::CPU), data); });
  EXPECT_NE(msg.find("--micro-batch 8 but the plan given to the Trainer runs micro-batches of 16"), std::string::npos)
      << msg;
}

// Two epochs in one fit, and one epoch saved then resumed for the second, give the same bytes; so does a
// run stopped in the middle of an epoch (it saves) and resumed.
TEST(Trainer, ResumeIsExact) {
  TrainConfig c = small_run();
  const auto data = synthetic_data(c);
  Trainer whole(c, data);
  whole.fit();

  const std::string path = temp_path("resume.safetensors");
  TrainConfig first = c;
  first.epochs = 1;
  first.save = path;
  Trainer(first, data).fit();
  TrainConfig rest = c;
  rest.resume = path;
  Trainer resumed(rest, data);
  resumed.fit();
  EXPECT_EQ(resumed.start_epoch_index(), 1);
  EXPECT_EQ(weights(resumed), weights(whole));

  TrainConfig stopping = c;
  stopping.save = path;
  Trainer stopped(stopping, data);
  Counter stop_at(3);
  const FitResult r = stopped.fit({&stop_at});
  ASSERT_TRUE(r.stopped);
  EXPECT_EQ(r.steps, 3);
  Trainer continued(rest, data);
  continued.fit();
  EXPECT_EQ(continued.start_batch_index(), 3);
  EXPECT_EQ(weights(continued), weights(whole));
  std::filesystem::remove(path);
  std::filesystem::remove(optimizer_path(path));
}

// A run that started from another's weights (--load: its optimizer's steps) and was stopped within an epoch
// resumes with the schedule's horizon of the run it continues (its steps after the loaded ones), and its
// epoch's loss and accuracy are the whole epoch's, the batches before the stop included.
TEST(Trainer, ResumeKeepsALoadedRunsScheduleAndTheEpochsTotals) {
  const auto data = synthetic_data(small_run());
  const std::string loaded = temp_path("loaded.safetensors"), path = temp_path("resume_loaded.safetensors");
  TrainConfig base = small_run();
  base.epochs = 1;
  base.save = loaded;
  Trainer(base, data).fit();
  TrainConfig c = small_run();
  c.optimizer.schedule = LrSchedule{};
  c.optimizer.schedule.kind = LrSchedule::Kind::Cosine;
  c.load = loaded;
  Trainer whole(c, data);
  Counter whole_steps;
  whole.fit({&whole_steps});

  TrainConfig stopping = c;
  stopping.save = path;
  Counter stop_at(3);
  ASSERT_TRUE(Trainer(stopping, data).fit({&stop_at}).stopped);
  TrainConfig rest = c;
  rest.load.clear();
  rest.resume = path;
  Trainer continued(rest, data);
  Counter continued_steps;
  continued.fit({&continued_steps});
  EXPECT_EQ(continued.start_batch_index(), 3);
  EXPECT_EQ(continued_steps.last.lr, whole_steps.last.lr);
  EXPECT_TRUE(weights(continued) == weights(whole));
  ASSERT_EQ(continued_steps.epochs.size(), 2u);
  EXPECT_EQ(continued_steps.epochs[0].train_loss, whole_steps.epochs[0].train_loss);
  EXPECT_EQ(continued_steps.epochs[0].train_accuracy, whole_steps.epochs[0].train_accuracy);
  for (const std::string& p : {loaded, path}) {
    std::filesystem::remove(p);
    std::filesystem::remove(optimizer_path(p));
  }
}

// Each line of a run log, as (event, step or epoch, batch): what a resumed run's log must repeat.
std::vector<std::string> log_positions(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) {
    const std::size_t numbers = line.find(",\"loss\"") != std::string::npos ? line.find(",\"loss\"")
                                                                             : line.find(",\"train_loss\"");
    out.push_back(line.substr(0, numbers));
  }
  return out;
}

// A run killed after its last save had logged steps it never saved: resumed, it trains them again, and its
// log holds each step once, as the uninterrupted run's does (a line cut short goes too). An earlier run's
// lines in the same log (Python's trainers append) stay, the same steps though they are.
TEST(Trainer, AResumedRunsLogHoldsEachStepOnce) {
  TrainConfig c = small_run();  // 6 batches per epoch, 2 epochs
  c.log = temp_path("whole.jsonl");
  Trainer(c, synthetic_data(c)).fit();
  const std::vector<std::string> whole = log_positions(c.log);
  ASSERT_EQ(whole.size(), 14u);

  TrainConfig killed = c;
  killed.log = temp_path("resumed.jsonl");
  killed.save = temp_path("killed.safetensors");
  killed.save_every = 4;
  const std::string at_4 = temp_path("step4.safetensors");
  // At step 6 the last save is step 4's: kept aside as the checkpoint the kill leaves; the run goes on to
  // log step 8 (and epoch 1's line) before it stops.
  struct KeepAndStop : Callback {
    std::string from, to;
    void on_step(Trainer& t, const StepInfo& s) override {
      if (s.step == 6)
        for (const auto& [a, b] : {std::pair{from, to}, std::pair{optimizer_path(from), optimizer_path(to)}})
          std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
      if (s.step == 8) t.request_stop();
    }
  } keep;
  keep.from = killed.save;
  keep.to = at_4;
  std::filesystem::copy_file(c.log, killed.log, std::filesystem::copy_options::overwrite_existing);
  killed.log_append = true;
  Trainer(killed, synthetic_data(killed)).fit({&keep});
  std::ofstream(killed.log, std::ios::app) << "{\"event\":\"step\",\"step\":9,\"ep";  // a write cut short
  ASSERT_EQ(log_positions(killed.log).size(), 24u);

  TrainConfig resumed = c;
  resumed.log = killed.log;
  resumed.resume = at_4;
  Trainer(resumed, synthetic_data(resumed)).fit();
  std::vector<std::string> twice = whole;
  twice.insert(twice.end(), whole.begin(), whole.end());
  EXPECT_EQ(log_positions(resumed.log), twice);
  for (const std::string& p : {c.log, killed.log, killed.save, optimizer_path(killed.save), at_4, optimizer_path(at_4)})
    std::filesystem::remove(p);
}

// After the first, a Trainer's steps allocate nothing: loader, scheduler, optimizer and the step's bookkeeping
// (ragged micro-batches and a short last batch included).
TEST(Trainer, StepsDoNotAllocate) {
  if (!alloc_counter_enabled()) GTEST_SKIP() << "allocation counting is unavailable under sanitizers";
  TrainConfig c = small_run();
  c.micro_batch = 6;  // 16 = 6 + 6 + 4
  Trainer t(c, synthetic_data(c));
  t.start_epoch(0);
  StepInfo info;
  ASSERT_TRUE(t.train_batch(info));  // warm-up: lazy pointer resolution, thread pools
  const AllocCount before = alloc_count();
  int steps = 0;
  while (t.train_batch(info)) ++steps;
  const AllocCount after = alloc_count();
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(after.news, before.news) << "operator new called during training steps";
  EXPECT_EQ(after.mallocs, before.mallocs) << "malloc called during training steps";
}

// small_run's data as --dataset npy files in dir (x.npy and y.npy, x_test.npy and y_test.npy), and the
// config that trains on them.
TrainConfig npy_run(const std::filesystem::path& dir) {
  TrainConfig c = small_run();
  const auto data = synthetic_data(c);
  std::filesystem::create_directories(dir);
  for (const auto& [split, ds] : {std::pair<std::string, const data::Dataset*>{"", &data->train}, {"_test", &data->test}}) {
    const std::string n = std::to_string(ds->count);
    std::ofstream(dir / ("x" + split + ".npy"), std::ios::binary) << test::npy("|u1", "(" + n + ", 1, 12, 12)", ds->pixels);
    std::ofstream(dir / ("y" + split + ".npy"), std::ios::binary) << test::npy("<i4", "(" + n + ",)", ds->labels);
  }
  // The npy files give the shape and classes: the synthetic ones' settings go back to their defaults.
  const data::DataSpec defaults;
  c.data = {"npy", dir.string(), defaults.channels, defaults.height, defaults.width, defaults.classes,
            c.data.limit_train, c.data.limit_test, c.data.seed};
  return c;
}

// Truncates `file` after step `at` (what numpy.save over a file in use does).
class TruncateAfter : public Callback {
 public:
  TruncateAfter(long long at, std::string file) : at_(at), file_(std::move(file)) {}
  void on_step(Trainer&, const StepInfo& s) override {
    last = s;
    if (s.step == at_) std::filesystem::resize_file(file_, 1024);
  }
  StepInfo last;

 private:
  long long at_;
  std::string file_;
};

// A data file truncated mid-run ends the fit with one error naming it, after the last good optimizer step
// is saved (as a stop saves it); the run resumed from that save, with the file restored, ends with the
// weights of the run left alone. Without --save the error says that nothing was saved.
TEST(Trainer, AFailureMidRunSavesTheLastGoodStep) {
  const std::filesystem::path dir = temp_path("npy_run");
  const TrainConfig c = npy_run(dir);
  const std::string x = (dir / "x.npy").string(), x_bytes = [&] {
    std::ifstream f(x, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  Trainer whole(c);
  whole.fit();

  const std::string path = (dir / "run.safetensors").string();
  TrainConfig saving = c;
  saving.save = path;
  TruncateAfter cut(4, x);
  const std::string msg = test::error_of([&] { Trainer(saving).fit({&cut}); });
  EXPECT_EQ(msg.rfind(x + " was truncated while training (", 0), 0u) << msg;
  const std::string saved = "; saved the last optimizer step (" + std::to_string(cut.last.step) + ") in " + path +
                            ": --resume " + path + " continues the run";
  EXPECT_NE(msg.find(saved), std::string::npos) << msg;
  EXPECT_GE(cut.last.step, 4);
  for (const auto& [key, value] : checkpoint_metadata(path)) {
    if (key == "optimizer_steps") {
      EXPECT_EQ(value, std::to_string(cut.last.step));
    }
  }

  std::ofstream(x, std::ios::binary) << x_bytes;
  TrainConfig rest = c;
  rest.resume = rest.save = path;
  Trainer resumed(rest);
  resumed.fit();
  EXPECT_EQ(resumed.start_batch_index(), cut.last.step);
  EXPECT_EQ(weights(resumed), weights(whole));

  TruncateAfter again(2, x);
  const std::string unsaved = test::error_of([&] { Trainer(c).fit({&again}); });
  EXPECT_NE(unsaved.find(" was truncated while training ("), std::string::npos) << unsaved;
  const std::string nothing = "; nothing was saved (no --save)";
  EXPECT_EQ(unsaved.substr(unsaved.size() - nothing.size()), nothing) << unsaved;
  std::filesystem::remove_all(dir);
}

// A run that diverged saves nothing: its weights are not worth keeping.
TEST(Trainer, ADivergedRunSavesNothing) {
  TrainConfig c = small_run();
  c.optimizer.lr = 1e12;
  c.save = temp_path("diverged.safetensors");
  const std::string msg = test::error_of([&] { Trainer(c, synthetic_data(c)).fit(); });
  EXPECT_NE(msg.find("diverged"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("saved the last"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(c.save));
}

// The Trainer refuses outputs that are its inputs for every client, not only for train.
TEST(Trainer, NoOutputIsAnInput) {
  TrainConfig c = small_run();
  const std::string a = temp_path("in.safetensors");
  c.save = a;
  Trainer(c, synthetic_data(c)).fit();
  const std::string before = [&] {
    std::ifstream f(a, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  TrainConfig both = c;
  both.load = a;
  EXPECT_EQ(test::error_of([&] { Trainer(both, synthetic_data(c)); }),
            "--save " + a + " is the same file as --load " + a + ", which the run reads: give --save a file of its own");
  TrainConfig named = small_run();
  named.files.push_back({"--model-file", a, false, ""});
  named.files.push_back({"--log", a, true, ""});
  EXPECT_EQ(test::error_of([&] { Trainer(named, synthetic_data(c)); }),
            "--log " + a + " is the same file as --model-file " + a + ", which the run reads: give --log a file of its own");
  std::ifstream f(a, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), before);
  std::filesystem::remove(a);
  std::filesystem::remove(optimizer_path(a));
}

// Ranks as threads: every collective waits for all ranks at a barrier, then rank 0 does the work in
// shared memory.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), at_(size) {}
  int size() const { return size_; }
  // Publishes p as this rank's, waits for every rank, runs work on rank 0, waits again.
  template <class Fn> void collective(int rank, void* p, Fn&& work) {
    at_[rank] = p;
    barrier();
    if (rank == 0) work(at_);
    barrier();
  }

 private:
  void barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const long long gen = generation_;
    if (++waiting_ == size_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }
  int size_;
  std::vector<void*> at_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  long long generation_ = 0;
};

template <class T> void sum_into_all(const std::vector<void*>& at, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    T s = 0;
    for (void* p : at) s += static_cast<T*>(p)[i];
    for (void* p : at) static_cast<T*>(p)[i] = s;
  }
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : Communicator(rank, group.size(), 60), group_(group) {}
  void start_sum(void* p, std::size_t count, DType dtype) override {
    group_.collective(rank(), p, [&](const std::vector<void*>& at) {
      if (dtype == DType::F64)
        sum_into_all<double>(at, count);
      else
        sum_into_all<float>(at, count);
    });
  }
  bool poll_sums() override { return true; }
  void finish_sums() override {}
  void sum_host(double* p, std::size_t count) override {
    group_.collective(rank(), p, [&](const std::vector<void*>& at) { sum_into_all<double>(at, count); });
  }
  void broadcast_host(void* p, std::size_t bytes) override {
    group_.collective(rank(), p, [&](const std::vector<void*>& at) {
      for (std::size_t r = 1; r < at.size(); ++r) std::memcpy(at[r], at[0], bytes);
    });
  }
  [[noreturn]] void abort(int) override { std::abort(); }

 private:
  ThreadGroup& group_;
};

// Two ranks train the weights of one process: each its share of every batch, gradients summed over the
// ranks; rank 0 alone evaluates.
TEST(Trainer, DataParallelRanksTrainTheWeightsOfOne) {
  TrainConfig c = small_run();
  c.augment = false;
  const auto data = synthetic_data(c);
  Trainer one(c, data);
  one.fit();

  ThreadGroup group(2);
  std::vector<std::vector<char>> ranks(2);
  std::vector<FitResult> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Trainer t(c, data, std::make_shared<ThreadCommunicator>(group, r));
      EXPECT_EQ(t.ranks(), 2);
      EXPECT_EQ(t.lead(), r == 0);
      results[r] = t.fit();
      ranks[r] = weights(t);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ranks[0], ranks[1]);
  const auto as_floats = [](const std::vector<char>& b) {
    std::vector<float> f(b.size() / sizeof(float));
    std::memcpy(f.data(), b.data(), b.size());
    return f;
  };
  const std::vector<float> w1 = as_floats(weights(one)), w2 = as_floats(ranks[0]);
  EXPECT_LE(test::relative_error(w2, w1), 1e-5);
  EXPECT_GT(results[0].test.accuracy, 0.0);
  EXPECT_EQ(results[1].test.accuracy, 0.0);  // rank 1 does not evaluate
}

// The other ranks leave a run only once the lead has saved its last step, whether the run ends or stops:
// a rank gone sooner could be ended by a forwarded copy of the stop's signal, and mpirun would then end the
// lead mid-save.
TEST(Trainer, RanksLeaveTheRunOnlyOnceTheLeadHasSaved) {
  for (const int stop_after : {0, 3}) {
    SCOPED_TRACE(stop_after ? "stopped" : "at its end");
    TrainConfig c = small_run();
    c.save = temp_path("ranks_leave.safetensors");
    std::filesystem::remove(c.save);
    ThreadGroup group(2);
    std::vector<std::thread> threads;
    long long steps[2] = {0, 0};
    std::string on_disk;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        Trainer t(c, synthetic_data(c), std::make_shared<ThreadCommunicator>(group, r));
        Counter stop(stop_after);
        steps[r] = t.fit({&stop}).steps;
        if (r == 1 && std::filesystem::exists(c.save))
          for (const auto& [key, value] : checkpoint_metadata(c.save))
            if (key == "optimizer_steps") on_disk = value;
      });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(steps[0], steps[1]);
    EXPECT_EQ(on_disk, std::to_string(steps[0])) << "rank 1 left before the lead's last save was on disk";
    std::filesystem::remove(c.save);
    std::filesystem::remove(optimizer_path(c.save));
  }
}

// Ranks started with different settings (here the learning rate, then the model) stop before training, each
// with one error: the one that differs names what, the others how many differ.
TEST(Trainer, RanksThatDisagreeStopWithOneErrorEach) {
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant ? "model" : "lr");
    const TrainConfig c = small_run();
    TrainConfig other = c;
    if (variant) other.model = "lenet5";
    else other.optimizer.lr = 0.1;
    if (variant) other.data.height = other.data.width = 28;  // lenet5 needs 28x28 images
    ThreadGroup group(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        const TrainConfig& mine = r == 0 ? c : other;
        auto comm = std::make_shared<ThreadCommunicator>(group, r);
        try {
          Trainer t(mine, synthetic_data(mine), comm);
        } catch (const Error& e) {
          errors[r] = e.what();
        }
        EXPECT_TRUE(comm->failed_together());
      });
    for (std::thread& t : threads) t.join();
    EXPECT_NE(errors[0].find("1 of 2 ranks were started with other settings than rank 0"), std::string::npos)
        << errors[0];
    EXPECT_NE(errors[1].find("rank 1 of 2 was started with other settings than rank 0: "), std::string::npos)
        << errors[1];
    EXPECT_NE(errors[1].find(variant ? "\"model\":\"lenet5\" where rank 0 has \"model\":\"cnn\""
                                     : "\"lr\":\"0.1\" where rank 0 has \"lr\":\"0.05\""),
              std::string::npos)
        << errors[1];
  }
}

}  // namespace
}  // namespace crumb
