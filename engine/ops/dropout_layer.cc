// dropout as a layer a user can name (engine/ops/layer.h): torch.nn.Dropout, and F.dropout as `training`
// says when traced (dropped in evaluation).
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/dropout.h"
#include "engine/ops/layer.h"

namespace crumb {

CRUMB_ON_LOAD {
  add_layer(Layer("dropout")
                .with_field(LayerField::number("p", 0.5))
                .with_check([](const LayerAttrs& a, const std::string& where) {
                  const double p = a.number("p");
                  CRUMB_CHECK(p >= 0 && p < 1, where, ": p must be in [0, 1), got ", p);
                })
                .with_build([](const LayerBuild& b) { return nn::dropout(b.g, b.in[0], b.attrs.number("p"), b.name); })
                .with_python("Dropout", "dropout", "p=0.5, inplace=False")
                .with_torch("Dropout", {"F.dropout"}));
}

}  // namespace crumb
