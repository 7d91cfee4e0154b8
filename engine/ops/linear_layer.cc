// linear as a layer a user can name (engine/ops/layer.h): torch.nn.Linear over [features].
#include "engine/base/registry.h"
#include "engine/ops/layer.h"
#include "engine/ops/linear.h"

namespace crumb {

CRUMB_ON_LOAD {
  using F = LayerField;
  add_layer(Layer("linear")
                .with_field(F::integer("in_features", 1, 0).stated_size())
                .with_field(F::integer("out_features", 1, 0).needed())
                .with_field(F::boolean("bias", true).from_torch("present:bias"))
                .with_build([](const LayerBuild& b) {
                  check_stated_size(b, "in_features", 1);
                  return nn::linear(b.g, b.in[0], b.attrs.integer("out_features"), b.name, b.attrs.flag("bias"));
                })
                .with_python("Linear", "fc", "in_features, out_features, bias=True")
                .with_torch("Linear", {}));
}

}  // namespace crumb
