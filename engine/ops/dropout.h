// Dropout: zero each element with probability p in training, scale the kept ones by 1 / (1 - p) (PyTorch's
// inverted dropout); the identity in evaluation.
#pragma once
#include <cstdint>
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kDropout, kDropoutBwd;

struct DropoutAttrs {
  double p = 0.5;
  uint64_t layer = 0;  // tells the layers' masks apart: a hash of the layer's name (nn::dropout)
  // The kernels' form of p (kernels/dropout_mask.h): drop below p * 2^32, scale the rest by 1 / (1 - p).
  uint32_t threshold() const { return static_cast<uint32_t>(p * 4294967296.0); }
  double scale() const { return 1.0 / (1.0 - p); }
};

namespace nn {
// Dropout(p) in training, the identity in evaluation. The layer's mask stream is keyed by its name, so
// every layer of a graph needs its own name (as every layer already does for its parameters).
ValueId dropout(Graph& g, ValueId x, double p, const std::string& name);
}  // namespace nn

}  // namespace crumb
