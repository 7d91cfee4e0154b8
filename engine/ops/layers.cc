#include "engine/ops/layers.h"

#include "engine/base/error.h"
#include "engine/graph/op.h"

namespace crumb::nn {

ValueId linear(Graph& g, ValueId x, int out_features, const std::string& name, bool bias) {
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 1, "layer '", name, "' (linear): input '", xv.name, "' must be [batch, features], got ",
              "per-sample ", dims_str(xv.dims), " (insert a flatten)");
  CRUMB_CHECK(out_features > 0, "layer '", name, "' (linear): out_features must be > 0");
  const int64_t in = xv.dims[0];
  std::vector<ValueId> ins{x, g.param(name + ".weight", {out_features, in}, {in})};
  if (bias) ins.push_back(g.param(name + ".bias", {out_features}, {in}));
  return g.apply(kLinear, ins, name);
}

ValueId conv2d(Graph& g, ValueId x, int out_channels, int kernel, int stride, int pad, const std::string& name,
               bool bias) {
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 3, "layer '", name, "' (conv2d): input '", xv.name,
              "' must be [batch, channels, height, width], got per-sample ", dims_str(xv.dims));
  CRUMB_CHECK(out_channels > 0 && kernel > 0, "layer '", name, "' (conv2d): channels and kernel must be > 0");
  const int64_t c_in = xv.dims[0], fan_in = c_in * kernel * kernel;
  std::vector<ValueId> ins{x, g.param(name + ".weight", {out_channels, c_in, kernel, kernel}, {fan_in})};
  if (bias) ins.push_back(g.param(name + ".bias", {out_channels}, {fan_in}));
  return g.apply(kConv2d, ins, name, WindowAttrs{kernel, kernel, stride, stride, pad, pad});
}

namespace {
// The channel count of an NCHW input, checked, for a normalisation layer's parameters.
int64_t channels_of(const Graph& g, ValueId x, const std::string& name, const char* op) {
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 3, "layer '", name, "' (", op, "): input '", xv.name,
              "' must be [batch, channels, height, width], got per-sample ", dims_str(xv.dims));
  return xv.dims[0];
}
}  // namespace

ValueId batch_norm2d(Graph& g, ValueId x, const std::string& name, const BatchNormAttrs& attrs) {
  const int64_t c = channels_of(g, x, name, "batch_norm");
  const ValueId w = g.param(name + ".weight", {c}, ParamInit::constant(1));
  const ValueId b = g.param(name + ".bias", {c}, ParamInit::constant(0));
  const ValueId mean = g.state(name + ".running_mean", {c}, 0.0);
  const ValueId var = g.state(name + ".running_var", {c}, 1.0);
  const ValueId tracked = g.state(name + ".num_batches_tracked", {}, 0.0, DType::I64);
  return g.apply(kBatchNorm, {x, w, b, mean, var, tracked}, name, attrs);
}

ValueId group_norm(Graph& g, ValueId x, int groups, const std::string& name, double eps) {
  const int64_t c = channels_of(g, x, name, "group_norm");
  const ValueId w = g.param(name + ".weight", {c}, ParamInit::constant(1));
  const ValueId b = g.param(name + ".bias", {c}, ParamInit::constant(0));
  return g.apply(kGroupNorm, {x, w, b}, name, GroupNormAttrs{groups, eps});
}

ValueId relu(Graph& g, ValueId x, const std::string& name) { return g.apply(kRelu, {x}, name); }

namespace {
WindowAttrs window(int kernel, int stride, int pad) { return {kernel, kernel, stride, stride, pad, pad}; }
}  // namespace

ValueId max_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad) {
  return g.apply(kMaxPool2d, {x}, name, window(kernel, stride, pad));
}

ValueId avg_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad) {
  return g.apply(kAvgPool2d, {x}, name, window(kernel, stride, pad));
}

ValueId global_avg_pool(Graph& g, ValueId x, const std::string& name) { return g.apply(kGlobalAvgPool, {x}, name); }

ValueId adaptive_avg_pool2d(Graph& g, ValueId x, int h_out, int w_out, const std::string& name) {
  return g.apply(kAdaptiveAvgPool2d, {x}, name, AdaptivePoolAttrs{h_out, w_out});
}

ValueId dropout(Graph& g, ValueId x, double p, const std::string& name) {
  uint64_t layer = 0xcbf29ce484222325ULL;  // FNV-1a: a stable hash, unlike std::hash
  for (unsigned char ch : name) layer = (layer ^ ch) * 0x100000001b3ULL;
  return g.apply(kDropout, {x}, name, DropoutAttrs{p, layer});
}

ValueId flatten(Graph& g, ValueId x, const std::string& name) {
  return g.apply(kReshape, {x}, name, ReshapeAttrs{{dims_count(g.value(x).dims)}});
}

ValueId add(Graph& g, ValueId a, ValueId b, const std::string& name) { return g.apply(kAdd, {a, b}, name); }

ValueId softmax_cross_entropy(Graph& g, ValueId logits, ValueId labels, const std::string& name) {
  const ValueId probs = g.apply(kSoftmaxXent, {logits, labels}, name);
  g.set_loss(probs);
  return probs;
}

}  // namespace crumb::nn
