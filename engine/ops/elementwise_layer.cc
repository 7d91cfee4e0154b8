// The element-wise and shape layers a user can name (engine/ops/layer.h): relu, leaky_relu, relu6,
// hardtanh (torch.nn's activations and their functions), flatten, reshape and add (a residual sum).
#include <cmath>

#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/layer.h"

namespace crumb {

CRUMB_ON_LOAD {
  using F = LayerField;
  add_layer(Layer("relu")
                .with_build([](const LayerBuild& b) { return nn::relu(b.g, b.in[0], b.name); })
                .with_python("ReLU", "relu", "inplace=False")
                .with_torch("ReLU", {"F.relu", "F.relu_", "torch.relu", "torch.relu_", "Tensor.relu", "Tensor.relu_"}));
  add_layer(Layer("leaky_relu")
                .with_field(F::number("negative_slope", 0.01))
                .with_check([](const LayerAttrs& a, const std::string& where) {
                  const double s = a.number("negative_slope");
                  CRUMB_CHECK(s >= 0 && std::isfinite(s), where, ": negative_slope must be a finite number >= 0, got ",
                              s);
                })
                .with_build([](const LayerBuild& b) {
                  return nn::leaky_relu(b.g, b.in[0], b.attrs.number("negative_slope"), b.name);
                })
                .with_python("LeakyReLU", "relu", "negative_slope=0.01, inplace=False")
                .with_torch("LeakyReLU", {"F.leaky_relu", "F.leaky_relu_"}, {{"negative_slope", ">=", "0", ""}}));
  add_layer(Layer("relu6")
                .with_build([](const LayerBuild& b) { return nn::hardtanh(b.g, b.in[0], 0, 6, b.name); })
                .with_python("ReLU6", "relu", "inplace=False", "min(max(x, 0), 6), as MobileNet uses.")
                .with_torch("ReLU6", {"F.relu6"}));
  add_layer(Layer("hardtanh")
                .with_field(F::number("min_val", -1))
                .with_field(F::number("max_val", 1))
                .with_check([](const LayerAttrs& a, const std::string& where) {
                  const double lo = a.number("min_val"), hi = a.number("max_val");
                  CRUMB_CHECK(lo < hi && std::isfinite(lo) && std::isfinite(hi), where,
                              ": min_val must be below max_val, got ", lo, " and ", hi);
                })
                .with_build([](const LayerBuild& b) {
                  return nn::hardtanh(b.g, b.in[0], b.attrs.number("min_val"), b.attrs.number("max_val"), b.name);
                })
                .with_python("Hardtanh", "hardtanh", "min_val=-1.0, max_val=1.0, inplace=False",
                             "min(max(x, min_val), max_val).")
                .with_torch("Hardtanh", {"F.hardtanh", "F.hardtanh_"}));
  // flatten and reshape: from_torch makes them of every view that keeps the batch first, by shape.
  add_layer(Layer("flatten")
                .with_build([](const LayerBuild& b) { return nn::flatten(b.g, b.in[0], b.name); })
                .with_python("Flatten", "flatten", "",
                             "torch.nn.Flatten() with its defaults (start_dim=1): [batch, ...] -> [batch, features]."));
  add_layer(Layer("reshape")
                .with_field(F::of("shape", F::Kind::Dims).needed())
                .with_build([](const LayerBuild& b) {
                  const std::vector<int>& shape = b.attrs.ints("shape");
                  const Dims to(shape.begin(), shape.end());
                  const Value& x = b.g.value(b.in[0]);
                  CRUMB_CHECK(dims_count(to) == dims_count(x.dims), b.where, ": cannot reshape its input '", x.name,
                              "' ", dims_str(x.dims), " to ", dims_str(to), " (", dims_count(x.dims),
                              " values per sample)");
                  return nn::reshape(b.g, b.in[0], to, b.name);
                }));
  // add: crumb.nn's Residual and from_torch's + make it.
  add_layer(Layer("add").with_inputs(2).with_build([](const LayerBuild& b) {
    const Value& x = b.g.value(b.in[0]);
    const Value& y = b.g.value(b.in[1]);
    CRUMB_CHECK(x.dims == y.dims, b.where, ": its inputs '", x.name, "' ", dims_str(x.dims), " and '", y.name, "' ",
                dims_str(y.dims), " differ in shape (both branches must give the same per-sample shape)");
    return nn::add(b.g, b.in[0], b.in[1], b.name);
  }));
}

}  // namespace crumb
