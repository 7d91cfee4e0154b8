// The description ops that converted PyTorch CNNs need (docs/networks.md): grouped and depthwise
// convolutions, leaky_relu, relu6, hardtanh and reshape build the engine's ops with their attributes,
// round-trip through the canonical form, train to the same weights in micro-batches as in whole
// batches, and every mistake in them is one error naming the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/error.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/window.h"
#include "engine/train/network.h"
#include "tests/small_run.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// MobileNetV2's inverted residual on 1x12x12 images: expand, depthwise, project, then the new
// activations and a reshape to [features] and back.
const char* kMobile = R"({"name": "mobile", "nodes": [
  {"name": "stem", "op": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
  {"name": "stem.act", "op": "relu6"},
  {"name": "dw", "op": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "groups": 8, "bias": false},
  {"name": "dw.bn", "op": "batch_norm2d", "group": 4},
  {"name": "dw.act", "op": "hardtanh", "min_val": 0, "max_val": 6},
  {"name": "pw", "op": "conv2d", "out_channels": 8, "kernel_size": 1, "groups": 2},
  {"name": "sum", "op": "add", "inputs": ["pw", "stem.act"]},
  {"name": "act", "op": "leaky_relu", "negative_slope": 0.2},
  {"name": "pool", "op": "max_pool2d", "kernel_size": 3},
  {"name": "flat", "op": "reshape", "shape": [128]},
  {"name": "back", "op": "reshape", "shape": [8, 4, 4]},
  {"name": "gap", "op": "adaptive_avg_pool2d", "output_size": 1},
  {"name": "f", "op": "flatten"},
  {"name": "fc", "op": "linear", "out_features": 4}]})";

const Node& node_named(const Graph& g, const std::string& name) {
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).name == name) return g.node(i);
  throw Error("no node " + name);
}

TEST(NetworkOps, BuildTheEngineOpsWithTheirAttributes) {
  const Graph g = build_network(kMobile, {1, 12, 12, 4});
  EXPECT_EQ(node_named(g, "dw").def, &kConv2d);
  EXPECT_EQ(std::any_cast<WindowAttrs>(node_named(g, "dw").attrs).groups, 8);
  EXPECT_EQ(g.value(g.find_value("dw.weight")).dims, (Dims{8, 1, 3, 3}));
  EXPECT_EQ(g.value(g.find_value("pw.weight")).dims, (Dims{8, 4, 1, 1}));
  const Node& relu6 = node_named(g, "stem.act");
  EXPECT_EQ(relu6.def, &kHardtanh);
  EXPECT_EQ(std::any_cast<HardtanhAttrs>(relu6.attrs).min_val, 0);
  EXPECT_EQ(std::any_cast<HardtanhAttrs>(relu6.attrs).max_val, 6);
  EXPECT_EQ(std::any_cast<LeakyReluAttrs>(node_named(g, "act").attrs).negative_slope, 0.2);
  EXPECT_EQ(node_named(g, "back").def, &kReshape);
  EXPECT_EQ(g.value(node_named(g, "back").out[0]).dims, (Dims{8, 4, 4}));

  // Defaults are written out in the canonical form, which parses back to itself.
  const std::string canonical = network_json(parse_network(kMobile, "t"));
  EXPECT_EQ(network_json(parse_network(canonical, "t")), canonical);
  for (const char* part : {"\"groups\":8", "\"bias\":false,\"groups\":1}", "\"op\":\"relu6\"",
                           "\"negative_slope\":0.20000000000000001", "\"min_val\":0.0,\"max_val\":6.0",
                           "\"shape\":[8,4,4]"})
    EXPECT_NE(canonical.find(part), std::string::npos) << part << " in " << canonical;
  const std::string defaults = network_json(parse_network(
      R"({"nodes": [{"name": "a", "op": "leaky_relu"}, {"name": "b", "op": "hardtanh"}]})", "t"));
  EXPECT_NE(defaults.find("\"negative_slope\":0.01"), std::string::npos) << defaults;
  EXPECT_NE(defaults.find("\"min_val\":-1.0,\"max_val\":1.0"), std::string::npos) << defaults;
}

// BatchNorm over groups of 4, so micro-batches of 4 compute what whole batches of 16 do.
TEST(NetworkOps, MicroBatchingIsExact) {
  const auto [micro, whole] = test::micro_and_whole(kMobile, 4);
  EXPECT_LE(test::relative_error(micro, whole), 1e-5);
}

std::string with_nodes(const std::string& nodes) {
  return "{\"name\": \"bad\", \"nodes\": [" + nodes +
         R"(, {"name": "f", "op": "flatten"}, {"name": "fc", "op": "linear", "out_features": 4}]})";
}

void expect_error(const std::string& text, const std::string& what, bool build) {
  const std::string msg = test::error_of([&] {
    if (build) {
      build_network(text, {6, 12, 12, 4});
    } else {
      parse_network(text, "desc");
    }
  });
  EXPECT_NE(msg.find(what), std::string::npos) << msg << " (for " << text << ")";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(NetworkOps, EveryMistakeIsOneErrorNamingTheNode) {
  const std::vector<std::pair<std::string, std::string>> parsed = {
      {R"({"name": "c", "op": "conv2d", "out_channels": 4, "kernel_size": 3, "groups": 3})",
       "node 'c' (conv2d): groups 3 must divide out_channels 4"},
      {R"({"name": "c", "op": "conv2d", "out_channels": 4, "kernel_size": 3, "groups": 0})", "\"groups\" is 0, outside [1, "},
      {R"({"name": "l", "op": "leaky_relu", "negative_slope": -0.1})",
       "node 'l' (leaky_relu): negative_slope must be a finite number >= 0, got -0.1"},
      {R"({"name": "h", "op": "hardtanh", "min_val": 1, "max_val": 1})",
       "node 'h' (hardtanh): min_val must be below max_val, got 1 and 1"},
      {R"({"name": "r", "op": "relu6", "max_val": 5})", "node 'r' (relu6): unknown attribute \"max_val\" (relu6 takes: none)"},
      {R"({"name": "s", "op": "reshape"})", "node 's' (reshape): \"shape\" is missing"},
      {R"({"name": "s", "op": "reshape", "shape": [2, 0]})", "\"shape\" must hold positive integers"},
      {R"({"name": "s", "op": "reshape", "shape": [1, 2, 3, 4]})", "\"shape\" must be the per-sample dims, an array of 1 to 3"},
      {R"({"name": "s", "op": "reshape", "shape": [16777216, 16777216, 16777216]})", "more than 2^31 elements per sample"},
  };
  for (const auto& [node, what] : parsed) expect_error(with_nodes(node), what, false);
  const std::vector<std::pair<std::string, std::string>> built = {
      {R"({"name": "c", "op": "conv2d", "out_channels": 8, "kernel_size": 3, "groups": 4})",
       "node 'c' (conv2d): groups 4 does not divide the 6 channels of its input 'x'"},
      {R"({"name": "s", "op": "reshape", "shape": [6, 100]})",
       "node 's' (reshape): cannot reshape its input 'x' [6, 12, 12] to [6, 100]"},
  };
  for (const auto& [node, what] : built) expect_error(with_nodes(node), what, true);
}

}  // namespace
}  // namespace crumb
