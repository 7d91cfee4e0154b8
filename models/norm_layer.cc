#include "models/norm_layer.h"

#include <algorithm>

#include "engine/base/error.h"
#include "engine/ops/norm.h"

namespace crumb::models {

ValueId norm_layer(Graph& g, ValueId x, const std::string& name, const NormSpec& spec) {
  if (spec.kind == NormSpec::Kind::Batch) return nn::batch_norm2d(g, x, name, spec.bn);
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 3, "layer '", name, "' (group_norm): input must be [batch, channels, height, width]");
  CRUMB_CHECK(spec.gn_groups >= 1, "layer '", name, "' (group_norm): the group count must be >= 1");
  const int c = static_cast<int>(xv.dims[0]);
  int groups = std::min(spec.gn_groups, c);
  while (c % groups != 0) --groups;
  return nn::group_norm(g, x, groups, name);
}

}  // namespace crumb::models
