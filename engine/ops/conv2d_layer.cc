// conv2d as a layer a user can name (engine/ops/layer.h): torch.nn.Conv2d with square windows.
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/layer.h"

namespace crumb {

CRUMB_ON_LOAD {
  using F = LayerField;
  add_layer(
      Layer("conv2d")
          .with_field(F::integer("in_channels", 1, 0).stated_size())
          .with_field(F::integer("out_channels", 1, 0).needed())
          .with_field(F::integer("kernel_size", 1, 0).needed().square_window())
          .with_field(F::integer("stride", 1, 1).square_window())
          .with_field(F::integer("padding", 0, 0).square_window().or_same())
          .with_field(F::boolean("bias", true).from_torch("present:bias"))
          .with_field(F::integer("groups", 1, 1).quiet_at_default())
          .with_check([](const LayerAttrs& a, const std::string& where) {
            const int groups = a.integer("groups"), out = a.integer("out_channels");
            const int in = a.given("in_channels") ? a.integer("in_channels") : 0;
            CRUMB_CHECK(out % groups == 0 && in % groups == 0, where, ": groups ", groups, " must divide ",
                        in ? "in_channels " + std::to_string(in) + " and " : std::string(), "out_channels ", out);
          })
          .with_build([](const LayerBuild& b) {
            check_stated_size(b, "in_channels", 3);
            const Value& x = b.g.value(b.in[0]);
            const int groups = b.attrs.integer("groups");
            CRUMB_CHECK(x.dims[0] % groups == 0, b.where, ": groups ", groups, " does not divide the ", x.dims[0],
                        " channels of its input '", x.name, "'");
            return nn::conv2d(b.g, b.in[0], b.attrs.integer("out_channels"), b.attrs.integer("kernel_size"), b.name,
                              nn::ConvOptions()
                                  .with_stride(b.attrs.integer("stride"))
                                  .with_pad(b.attrs.integer("padding"))
                                  .with_bias(b.attrs.flag("bias"))
                                  .with_groups(groups));
          })
          .with_python("Conv2d", "conv",
                       "in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, groups=1",
                       "torch.nn.Conv2d's arguments: padding an integer, \"valid\" (0) or \"same\" (stride 1, odd "
                       "kernels); groups\n    divides both channel counts (groups=in_channels: depthwise).")
          .with_torch("Conv2d", {}, {{"dilation", "==", "1", ""}, {"padding_mode", "==", "'zeros'", "(zeros only)"}}));
}

}  // namespace crumb
