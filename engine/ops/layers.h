// The public graph-building API: each call adds a layer's parameters and node to a Graph. Parameter
// names follow PyTorch's state_dict keys: "<layer>.weight", "<layer>.bias".
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb::nn {

ValueId linear(Graph& g, ValueId x, int out_features, const std::string& name, bool bias = true);
ValueId conv2d(Graph& g, ValueId x, int out_channels, int kernel, int stride, int pad, const std::string& name,
               bool bias = true);
// BatchNorm2d with PyTorch's names and starting values: weight 1, bias 0, running_mean 0, running_var 1,
// num_batches_tracked 0 (I64).
ValueId batch_norm2d(Graph& g, ValueId x, const std::string& name, const BatchNormAttrs& attrs = {});
// GroupNorm(groups, channels): weight 1, bias 0.
ValueId group_norm(Graph& g, ValueId x, int groups, const std::string& name, double eps = 1e-5);
ValueId relu(Graph& g, ValueId x, const std::string& name);
ValueId max_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad = 0);
ValueId avg_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad = 0);
ValueId global_avg_pool(Graph& g, ValueId x, const std::string& name);
// AdaptiveAvgPool2d((h_out, w_out)): PyTorch's bins; a smaller input is upsampled (1x1 -> 7x7 repeats it).
ValueId adaptive_avg_pool2d(Graph& g, ValueId x, int h_out, int w_out, const std::string& name);
// Dropout(p) in training, the identity in evaluation. The layer's mask stream is keyed by its name, so
// every layer of a graph needs its own name (as every layer already does for its parameters).
ValueId dropout(Graph& g, ValueId x, double p, const std::string& name);
ValueId flatten(Graph& g, ValueId x, const std::string& name);
ValueId add(Graph& g, ValueId a, ValueId b, const std::string& name);
// Adds the loss and marks it as the graph's loss. Returns the probabilities value.
ValueId softmax_cross_entropy(Graph& g, ValueId logits, ValueId labels, const std::string& name);

}  // namespace crumb::nn
