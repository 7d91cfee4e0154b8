// The throwaway layer clamp: a description names it, it builds hardtanh, its canonical form reads back.
#include <gtest/gtest.h>

#include <any>

#include "engine/ops/elementwise.h"
#include "engine/train/network.h"
#include "tests/test_util.h"

namespace crumb {

TEST(ClampLayer, BuildsHardtanhAndRoundTrips) {
  const std::string text = R"({"name": "n", "nodes": [{"name": "c", "op": "clamp", "min": -2, "max": 3},
    {"name": "f", "op": "flatten"}, {"name": "fc", "op": "linear", "out_features": 4}]})";
  const Graph g = build_network(text, {1, 4, 4, 4});
  bool found = false;
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).name == "c") {
      found = true;
      EXPECT_EQ(g.node(i).def, &kHardtanh);
      EXPECT_EQ(std::any_cast<HardtanhAttrs>(g.node(i).attrs).min_val, -2);
      EXPECT_EQ(std::any_cast<HardtanhAttrs>(g.node(i).attrs).max_val, 3);
    }
  EXPECT_TRUE(found);
  const std::string canonical = network_json(parse_network(text, "t"));
  EXPECT_NE(canonical.find("\"op\":\"clamp\",\"inputs\":[\"x\"],\"min\":-2.0,\"max\":3.0"), std::string::npos) << canonical;
  const std::string msg = test::error_of([] {
    parse_network(R"({"nodes": [{"name": "c", "op": "clamp", "min": 1, "max": 1}]})", "t");
  });
  EXPECT_NE(msg.find("node 'c' (clamp): min must be below max, got 1 and 1"), std::string::npos) << msg;
}

}  // namespace crumb
