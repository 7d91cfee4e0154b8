// The layout conversions of channels-last plans (engine/plan/layout.h): kToNhwc moves an NCHW image
// tensor (a batch of [C, H, W], or a [K, C, R, S] filter) to NHWC, kToNchw back. Each is the other's
// gradient. Their output keeps the input's dims and dtype; only Value::layout differs.
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kToNhwc, kToNchw;
// The conversion to layout `to`.
const OpDef& layout_conversion(Layout to);

namespace nn {
// x converted to layout `to` (x must be an image tensor in the other layout).
ValueId to_layout(Graph& g, ValueId x, Layout to, const std::string& name);
}  // namespace nn

}  // namespace crumb
