// A ReLU fused into the op before it as an epilogue (as oneDNN's post-ops and cuDNN's fused
// convolution-bias-activation): the op's kernel clamps its output as it stores it, so the chain's
// intermediate value and the ReLU's pass over it are gone. The ops that take one (conv2d, linear) mark it in
// their attributes and register the rule from their own files (engine/graph/fusion.h).
#pragma once
#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

// Folds every forward ReLU whose input is an `op` node's first output, read by that ReLU alone, into that node:
// mark(node) sets its epilogue, the node computes the ReLU's output (under the name "<layer>+relu") and the
// ReLU node is removed. The backward nodes stay as autograd made them: ReLU's backward reads the output, the
// op's backward its inputs. Returns the chains fused.
int fuse_relu_epilogue(Graph& g, const OpDef& op, void (*mark)(Node& n));

}  // namespace crumb
