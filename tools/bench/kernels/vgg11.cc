#include "tools/bench/kernels/vgg11.h"

#include <string>

#include "engine/layers.h"
#include "engine/rewrite.h"

namespace crumb::bench {

Graph build_vgg11(const models::ModelSpec& spec) {
  constexpr int kPool = 0;  // "M" in torchvision's configuration
  const int config[] = {64, kPool, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool};
  Graph g;
  ValueId h = g.input("x", {spec.channels, spec.height, spec.width});
  const ValueId y = g.input("y", {}, DType::I32);
  int index = 0;
  for (int c : config) {
    const std::string name = "features." + std::to_string(index);
    if (c == kPool) {
      h = nn::max_pool2d(g, h, 2, 2, name);
      ++index;
    } else {
      h = nn::relu(g, nn::conv2d(g, h, c, 3, 1, 1, name), "features." + std::to_string(index + 1));
      index += 2;
    }
  }
  h = nn::flatten(g, h, "flatten");
  h = nn::relu(g, nn::linear(g, h, 4096, "classifier.0"), "classifier.1");
  h = nn::relu(g, nn::linear(g, h, 4096, "classifier.3"), "classifier.4");
  nn::softmax_cross_entropy(g, nn::linear(g, h, spec.classes, "classifier.6"), y, "loss");
  optimize_graph(g);
  return g;
}

}  // namespace crumb::bench
