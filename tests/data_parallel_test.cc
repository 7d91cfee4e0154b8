// Data parallel without MPI: how a batch is shared over ranks, how the gradient block is cut into
// buckets, and when the buckets are summed. A recording communicator stands in for MPI: its sums do
// nothing, so each "rank" keeps its own share's gradients and the test adds them up itself.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/dist/batch_share.h"
#include "engine/data/loader.h"
#include "engine/dist/grad_reducer.h"
#include "tests/test_util.h"
#include "tests/trained_model.h"

namespace crumb {
namespace {

// Rank `rank` of `size`; records each sum's address and the bytes it held when it started, and the
// whole gradient block then.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(int rank, int size, const ParamStore& params)
      : Communicator(rank, size, 1.0), block_(static_cast<const char*>(params.grad_block())), bytes_(params.bytes()) {}
  void start_sum(void* p, std::size_t count, DType dtype) override {
    const char* c = static_cast<const char*>(p);
    started.push_back({c, std::vector<char>(c, c + count * dtype_size(dtype)), std::vector<char>(block_, block_ + bytes_)});
  }
  bool poll_sums() override { return true; }
  void finish_sums() override { ++finished; }
  void sum_host(double*, std::size_t) override {}
  void broadcast_host(void*, std::size_t) override {}
  [[noreturn]] void abort(int) override { std::abort(); }

  struct Sum {
    const char* at;
    std::vector<char> bytes, block;
  };
  std::vector<Sum> started;
  int finished = 0;

 private:
  const char* block_;
  std::size_t bytes_;
};

// The first batch of `batch` samples of the synthetic set.
data::Batch first_batch(data::Loader& loader) {
  loader.start_epoch(0);
  data::Batch b;
  EXPECT_TRUE(loader.next(b));
  return b;
}

std::vector<GradBucket> buckets_of(TrainedModel& r, std::size_t cap) { return plan_buckets(r.params, cap, cap); }

TEST(DataParallel, SharesDifferByAtMostOneSample) {
  for (int batch : {1, 5, 37, 64})
    for (int ranks : {1, 2, 3, 4, 7}) {
      int next = 0;
      for (int r = 0; r < ranks; ++r) {
        const BatchShare s = batch_share(batch, ranks, r);
        EXPECT_EQ(s.offset, next) << batch << " over " << ranks;
        EXPECT_TRUE(s.size == batch / ranks || s.size == batch / ranks + 1) << batch << " over " << ranks;
        EXPECT_GE(s.size, batch_share(batch, ranks, ranks - 1).size);  // the larger shares come first
        next += s.size;
      }
      EXPECT_EQ(next, batch) << batch << " over " << ranks;
    }
  EXPECT_EQ(batch_share(37, 2, 0).size, 19);
  EXPECT_EQ(batch_share(37, 2, 1).offset, 19);
}

// With BatchNorm groups of G samples, shares are runs of whole groups (the batch's last one short), the
// first ranks one group more: each group is the one a single process forms, and rank 0's share is the
// largest (each rank plans for it). G <= 0 (the whole batch one group): rank 0 holds it all.
TEST(DataParallel, SharesHoldWholeGroups) {
  for (int batch : {1, 5, 12, 20, 24, 37, 44, 96})
    for (int ranks : {1, 2, 3, 4, 7})
      for (int group : {1, 3, 8, 32}) {
        SCOPED_TRACE(::testing::Message() << batch << " over " << ranks << " in groups of " << group);
        const int groups = (batch + group - 1) / group;
        int next = 0;
        for (int r = 0; r < ranks; ++r) {
          const BatchShare s = batch_share(batch, ranks, r, group);
          EXPECT_EQ(s.offset, next);
          EXPECT_TRUE(s.size == 0 || s.offset % group == 0) << "share " << r << " starts inside a group";
          EXPECT_TRUE(s.size % group == 0 || s.offset + s.size == batch) << "share " << r << " splits a group";
          const int whole = (s.size + group - 1) / group;
          EXPECT_TRUE(whole == groups / ranks || whole == groups / ranks + 1) << "share " << r;
          EXPECT_LE(s.size, batch_share(batch, ranks, 0, group).size);
          next += s.size;
        }
        EXPECT_EQ(next, batch);
      }
  EXPECT_EQ(batch_share(24, 2, 0, 8).size, 16);
  EXPECT_EQ(batch_share(12, 2, 1, 8).offset, 8);
  EXPECT_EQ(batch_share(12, 2, 1, 8).size, 4);
  EXPECT_EQ(batch_share(40, 3, 0, 0).size, 40);
  EXPECT_EQ(batch_share(40, 3, 2, 0).size, 0);
}

TEST(DataParallel, BucketsCoverTheGradientBlockInReverseOrder) {
  TrainedModel r("cnn", 8, 1);
  const std::vector<ValueId>& ps = r.params.params();
  for (std::size_t cap : {std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20, std::size_t{1} << 40}) {
    const std::vector<GradBucket> b = plan_buckets(r.params, cap, std::min<std::size_t>(cap, 256));
    ASSERT_FALSE(b.empty());
    std::size_t end = r.params.bytes();
    int end_param = static_cast<int>(ps.size());
    for (std::size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i].offset + b[i].bytes, end) << "cap " << cap << " bucket " << i;
      EXPECT_EQ(b[i].end, end_param);
      ASSERT_LT(b[i].first, b[i].end);
      EXPECT_EQ(b[i].offset, r.params.byte_offset(ps[b[i].first]));
      if (i + 1 < b.size()) {
        EXPECT_GE(b[i].bytes, i == 0 ? std::min<std::size_t>(cap, 256) : cap);
      }
      end = b[i].offset;
      end_param = b[i].first;
    }
    EXPECT_EQ(end, 0u);
    EXPECT_EQ(end_param, 0);
    if (cap == 1) {
      EXPECT_EQ(b.size(), ps.size());  // one parameter each
    }
    if (cap == std::size_t{1} << 40) {
      EXPECT_EQ(b.size(), 2u);  // the first bucket's cap, then all the rest
    }
  }
  EXPECT_EQ(plan_buckets(r.params, std::size_t{1} << 40, std::size_t{1} << 40).size(), 1u);
}

// Only the last micro-batch sums, each bucket in place (a view of the block), and each once its
// gradients are final: what a bucket held when its sum started is what the batch leaves there. The
// last layers' bucket starts while the first layers' gradients are still being written (overlap).
TEST(DataParallel, BucketsStartOnceTheirGradientsAreFinal) {
  data::Loader loader(synthetic_dataset(), 12, {0.5f, 0.25f}, data::LoaderOptions::shuffled(3));
  const data::Batch b = first_batch(loader);
  TrainedModel r("cnn", 4, 2);
  RecordingCommunicator comm(0, 1, r.params);
  GradientReducer reducer(comm, r.params, r.sched.train_executor().plan().order, buckets_of(r, 1));
  r.sched.set_data_parallel(&reducer);
  for (int batch = 0; batch < 2; ++batch) {
    comm.started.clear();
    EXPECT_EQ(r.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size).micro_batches, 3);
    EXPECT_EQ(comm.finished, batch + 1);
    ASSERT_EQ(comm.started.size(), reducer.buckets().size());
    const char* block = static_cast<const char*>(r.params.grad_block());
    std::vector<char> seen(reducer.buckets().size(), 0);
    for (const RecordingCommunicator::Sum& s : comm.started) {
      const std::size_t offset = s.at - block;
      std::size_t k = 0;
      while (k < reducer.buckets().size() && reducer.buckets()[k].offset != offset) ++k;
      ASSERT_LT(k, reducer.buckets().size()) << "a sum outside the bucket boundaries, at byte " << offset;
      EXPECT_EQ(s.bytes.size(), reducer.buckets()[k].bytes);
      EXPECT_FALSE(seen[k]++) << "bucket " << k << " summed twice";
      EXPECT_EQ(std::memcmp(s.bytes.data(), block + offset, s.bytes.size()), 0) << "bucket " << k << " changed after its sum started";
    }
    // The first sum starts while the first convolution's gradient (the last bucket) is still to be written.
    const GradBucket& first_layer = reducer.buckets().back();
    EXPECT_NE(std::memcmp(comm.started.front().block.data() + first_layer.offset, block + first_layer.offset,
                          first_layer.bytes),
              0);
  }
}

// Each rank's share, with the loss scaled by 1/B for the whole batch, adds up to one process's gradient,
// for a ragged batch and for BatchNorm when every share holds whole groups.
TEST(DataParallel, SharesAddUpToTheWholeBatchGradient) {
  struct Case {
    const char* model;
    int batch, ranks, micro_batch;  // resnet20: shares of one BatchNorm group of 32
  };
  for (const Case& c : {Case{"cnn", 13, 2, 4}, Case{"lenet5", 13, 3, 4}, Case{"resnet20", 64, 2, 32}}) {
    data::Loader loader(synthetic_dataset(), c.batch, {0.5f, 0.25f}, data::LoaderOptions::shuffled(7));
    const data::Batch b = first_batch(loader);
    TrainedModel whole(c.model, 32, 5);
    whole.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);
    std::vector<double> sum(whole.params.count(), 0.0);
    for (int rank = 0; rank < c.ranks; ++rank) {
      TrainedModel part(c.model, c.micro_batch, 5);
      RecordingCommunicator comm(rank, c.ranks, part.params);
      GradientReducer reducer(comm, part.params, part.sched.train_executor().plan().order, buckets_of(part, 4096));
      part.sched.set_data_parallel(&reducer);
      part.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);
      const std::vector<float> g = part.grads();
      for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
    const std::vector<float> want = whole.grads();
    EXPECT_LE(test::relative_error(std::vector<float>(sum.begin(), sum.end()), want), 1e-5) << c.model;
  }
}

// A rank with no samples (a batch smaller than the ranks) still sums, with zero gradients.
TEST(DataParallel, AnEmptyShareSumsZeros) {
  data::Loader loader(synthetic_dataset(), 1, {0.5f, 0.25f}, data::LoaderOptions::shuffled(7));
  const data::Batch b = first_batch(loader);
  TrainedModel r("lenet5", 4, 1);
  for (ValueId p : r.g.params()) std::fill_n(static_cast<float*>(r.params.grad(p)), r.g.value(p).count(1), 1.0f);
  RecordingCommunicator comm(1, 2, r.params);
  GradientReducer reducer(comm, r.params, r.sched.train_executor().plan().order, buckets_of(r, 4096));
  r.sched.set_data_parallel(&reducer);
  EXPECT_EQ(r.sched.train_batch({{"x", b.x}, {"y", b.y}}, 1).micro_batches, 0);
  EXPECT_EQ(comm.started.size(), reducer.buckets().size());
  EXPECT_EQ(comm.finished, 1);
  for (float v : r.grads()) ASSERT_EQ(v, 0.0f);
}

// Ranks match collectives by the order they start them, so a rank that trains and a rank with an empty
// share must start the buckets in the same order. resnet20's backward writes the fc and BatchNorm bias
// gradients before their weights', so starting each bucket the moment it is final would differ.
TEST(DataParallel, EveryRankStartsTheBucketsInOneOrder) {
  auto order = [](int rank) {  // a batch of 1 over 2 ranks: rank 0 trains on it, rank 1 has nothing
    data::Loader loader(synthetic_dataset(), 1, {0.5f, 0.25f}, data::LoaderOptions::shuffled(7));
    const data::Batch b = first_batch(loader);
    TrainedModel r("resnet20", 1, 1);
    RecordingCommunicator comm(rank, 2, r.params);
    GradientReducer reducer(comm, r.params, r.sched.train_executor().plan().order, buckets_of(r, 1));
    r.sched.set_data_parallel(&reducer);
    r.sched.train_batch({{"x", b.x}, {"y", b.y}}, 1);
    std::vector<std::ptrdiff_t> offsets;
    for (const RecordingCommunicator::Sum& sum : comm.started)
      offsets.push_back(sum.at - static_cast<const char*>(r.params.grad_block()));
    return offsets;
  };
  const std::vector<std::ptrdiff_t> busy = order(0), idle = order(1);
  EXPECT_GT(busy.size(), 60u);
  EXPECT_EQ(busy, idle);
}

}  // namespace
}  // namespace crumb
