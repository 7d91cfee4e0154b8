// max_pool2d, avg_pool2d and adaptive_avg_pool2d as layers a user can name (engine/ops/layer.h): torch.nn's
// pools with square windows, average pooling counting the padding (torch's default).
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/layer.h"
#include "engine/ops/pool.h"

namespace crumb {
namespace {

using F = LayerField;

// A pool over square windows: stride defaults to the kernel, as in torch.
Layer window_pool(const std::string& name, const std::string& cls, const std::string& node,
                  decltype(&nn::max_pool2d) pool, std::vector<std::string> functions,
                  std::vector<TorchRequirement> needs, std::string doc = "") {
  return Layer(name)
      .with_field(F::integer("kernel_size", 1, 0).needed().square_window())
      .with_field(F::integer("stride", 1, 0).square_window().defaults_to("kernel_size"))
      .with_field(F::integer("padding", 0, 0).square_window())
      .with_build([pool](const LayerBuild& b) {
        return pool(b.g, b.in[0], b.attrs.integer("kernel_size"), b.attrs.integer("stride"), b.name,
                    b.attrs.integer("padding"));
      })
      .with_python(cls, node, "kernel_size, stride=None, padding=0", std::move(doc))
      .with_torch(cls, std::move(functions), std::move(needs));
}

}  // namespace

CRUMB_ON_LOAD {
  add_layer(window_pool("max_pool2d", "MaxPool2d", "maxpool", nn::max_pool2d, {"F.max_pool2d", "torch.max_pool2d"},
                        {{"ceil_mode", "==", "False", ""}, {"dilation", "==", "1", ""},
                         {"return_indices", "==", "False", ""}}));
  add_layer(window_pool("avg_pool2d", "AvgPool2d", "avgpool", nn::avg_pool2d, {"F.avg_pool2d"},
                        {{"ceil_mode", "==", "False", ""}, {"count_include_pad", "==", "True", ""},
                         {"divisor_override", "==", "None", ""}},
                        "Average pooling with PyTorch's defaults (count_include_pad=True)."));
  add_layer(Layer("adaptive_avg_pool2d")
                .with_field(F::of("output_size", F::Kind::Size2).needed())
                .with_build([](const LayerBuild& b) {
                  check_stated_size(b, nullptr, 3);
                  const int h = b.attrs.ints("output_size")[0], w = b.attrs.ints("output_size")[1];
                  if (h != 1 || w != 1) return nn::adaptive_avg_pool2d(b.g, b.in[0], h, w, b.name);
                  // The global mean (ResNet's avgpool), kept [channels, 1, 1] as PyTorch's output is.
                  const int64_t c = b.g.value(b.in[0]).dims[0];
                  return nn::reshape(b.g, nn::global_avg_pool(b.g, b.in[0], b.name), {c, 1, 1}, b.name + ".view");
                })
                .with_python("AdaptiveAvgPool2d", "avgpool", "output_size")
                .with_torch("AdaptiveAvgPool2d", {"F.adaptive_avg_pool2d"}));
}

}  // namespace crumb
