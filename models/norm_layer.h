// The normalisation layer a model's NormSpec chooses, for builders that take --norm.
#pragma once
#include <string>

#include "engine/train/model_registry.h"

namespace crumb::models {

// BatchNorm2d (spec.norm.bn) or GroupNorm with the largest group count <= gn_groups that divides the
// channels, named `name` either way (so "bn1.weight" is the layer's weight under both).
ValueId norm_layer(Graph& g, ValueId x, const std::string& name, const NormSpec& spec);

}  // namespace crumb::models
