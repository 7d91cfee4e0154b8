// The Trainer's state_dict, load_state_dict and save, which count for their caller: one run's weights and
// running statistics load into another exactly; a wrong tensor is one error naming it and writes nothing;
// a save records where the run stands after the steps it took.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/train/trainer.h"
#include "tests/small_run.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

std::vector<std::vector<unsigned char>> bytes_of(const std::vector<NamedTensor>& tensors) {
  std::vector<std::vector<unsigned char>> out;
  for (const NamedTensor& t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    out.emplace_back(p, p + dims_count(t.dims) * dtype_size(t.dtype));
  }
  return out;
}

TEST(StateDict, LoadsAnotherRunsStateExactlyAndChecksEveryTensor) {
  TrainConfig c = test::small_run();
  c.epochs = 1;
  const auto data = test::synthetic_data(c);
  Trainer a(c, data);
  a.fit();
  c.seed = 7;  // other initial weights
  Trainer b(c, data);
  b.prepare();
  const std::vector<NamedTensor> from_a = a.state_dict();
  ASSERT_FALSE(from_a.empty());
  EXPECT_NE(bytes_of(b.state_dict()), bytes_of(from_a));
  b.load_state_dict(from_a);
  EXPECT_EQ(bytes_of(b.state_dict()), bytes_of(from_a));

  std::vector<NamedTensor> wrong = a.state_dict();
  const auto before = bytes_of(b.state_dict());
  wrong.back().dims.push_back(1);
  EXPECT_NE(test::error_of([&] { b.load_state_dict(wrong); }).find("load_state_dict: '" + wrong.back().name +
                                                                      "' has shape"),
            std::string::npos);
  wrong = a.state_dict();
  wrong.pop_back();
  EXPECT_NE(test::error_of([&] { b.load_state_dict(wrong); }).find("is missing"), std::string::npos);
  wrong = a.state_dict();
  wrong.push_back(wrong.front());
  EXPECT_NE(test::error_of([&] { b.load_state_dict(wrong); }).find("is given twice"), std::string::npos);
  EXPECT_EQ(bytes_of(b.state_dict()), before) << "a refused load wrote something";
}

TEST(StateDict, SaveRecordsWhereTheRunStands) {
  const TrainConfig c = test::small_run();  // 2 epochs
  Trainer t(c, test::synthetic_data(c));
  t.fit();
  EXPECT_EQ(t.at_epoch(), 2);
  EXPECT_EQ(t.at_batch(), 0);
  const std::string path = ::testing::TempDir() + "state_dict_save.safetensors";
  t.save(path);
  EXPECT_EQ(recorded_value(checkpoint_metadata(path), "train.epoch", path), "2");
  EXPECT_EQ(recorded_value(checkpoint_metadata(path), "train.batch", path), "0");
}

}  // namespace
}  // namespace crumb
