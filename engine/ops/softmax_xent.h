// Softmax cross-entropy: the loss op. Outputs the probabilities, and the summed loss and the correct
// count as metrics.
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kSoftmaxXent, kSoftmaxXentBwd;

struct ClassesGeometry {  // logits [n, k]
  int k = 0;
};

namespace nn {
// Adds the loss and marks it as the graph's loss. Returns the probabilities value.
ValueId softmax_cross_entropy(Graph& g, ValueId logits, ValueId labels, const std::string& name);
}  // namespace nn

}  // namespace crumb
