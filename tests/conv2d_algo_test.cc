// The CPU convolutions' choice between the default kernels and Winograd (engine/ops/conv2d_algo.h): forced,
// measured once per process, recorded and taken back from a record.
#include <string>

#include <gtest/gtest.h>

#include "engine/base/error.h"
#include "engine/graph/autograd.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/conv2d_algo.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/softmax_xent.h"

namespace crumb {
namespace {

cpu::Conv2dShape same3x3(int c, int hw) { return {1, c, hw, hw, c, 3, 3, 1, 1, 1, 1, hw, hw}; }

TEST(ConvAlgo, ForcedWhereWinogradApplies) {
  Graph g;
  const cpu::Conv2dShape s = same3x3(8, 10);
  g.set_conv_algo(Graph::ConvAlgo::Winograd);
  EXPECT_TRUE(conv_runs_winograd(g, s, ConvAlgoPass::Forward));
  EXPECT_TRUE(conv_runs_winograd(g, s, ConvAlgoPass::Data));
  cpu::Conv2dShape strided = s;
  strided.stride_h = strided.stride_w = 2;
  strided.h_out = strided.w_out = 5;
  EXPECT_FALSE(conv_runs_winograd(g, strided, ConvAlgoPass::Forward));
  g.set_conv_algo(Graph::ConvAlgo::Direct);
  EXPECT_FALSE(conv_runs_winograd(g, s, ConvAlgoPass::Forward));
  EXPECT_EQ(conv_choices_text(g), "");  // forced choices need no record
}

// A graph's measured choices are recorded, and a graph given the record takes it whatever it would measure.
TEST(ConvAlgo, MeasuredOnceRecordedAndTakenBack) {
  Graph g;
  g.set_conv_algo(Graph::ConvAlgo::Measure);
  const ValueId x = g.input("x", {6, 9, 9});
  const ValueId y = g.input("y", {}, DType::I32);
  // Two layers of one shape: the second's data gradient flows into the first.
  const auto pad = nn::ConvOptions().with_pad(1);
  const ValueId h = nn::conv2d(g, nn::conv2d(g, x, 6, 3, "conv1", pad), 6, 3, "conv2", pad);
  nn::softmax_cross_entropy(g, nn::flatten(g, h, "flat"), y, "loss");
  build_backward(g);
  const cpu::Conv2dShape s{1, 6, 9, 9, 6, 3, 3, 1, 1, 1, 1, 9, 9};
  const bool fwd = conv_runs_winograd(g, s, ConvAlgoPass::Forward);
  const bool data = conv_runs_winograd(g, s, ConvAlgoPass::Data);
  // Measured once: later asks (another plan of the graph, another micro-batch size) get the same answer.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(conv_runs_winograd(g, s, ConvAlgoPass::Forward), fwd);
    EXPECT_EQ(conv_runs_winograd(g, s, ConvAlgoPass::Data), data);
  }
  const std::string text = conv_choices_text(g);
  const std::string fwd_entry = std::string("forward:6x9x9>6:p1x1:F32=") + (fwd ? "winograd" : "direct");
  const std::string data_entry = std::string("data:6x9x9>6:p1x1:F32=") + (data ? "winograd" : "direct");
  EXPECT_EQ(text, data_entry + ";" + fwd_entry);

  // The opposite record wins over this process's measurement.
  Graph resumed;
  resumed.set_conv_algo(Graph::ConvAlgo::Measure);
  set_conv_choices(resumed, std::string("forward:6x9x9>6:p1x1:F32=") + (fwd ? "direct" : "winograd"), "ckpt");
  EXPECT_EQ(conv_runs_winograd(resumed, s, ConvAlgoPass::Forward), !fwd);
  EXPECT_THROW(set_conv_choices(resumed, "forward:6x9x9>6:p1x1:F32=fast", "ckpt"), Error);
  EXPECT_THROW(set_conv_choices(resumed, "no-choice", "ckpt"), Error);
}

}  // namespace
}  // namespace crumb
