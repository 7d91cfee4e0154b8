// VGG-11 (torchvision's vgg11, configuration "A" of Simonyan & Zisserman, no BatchNorm) for the kernel
// benchmarks. It lives here until models/ has a VGG: then the benchmarks take it from the registry and
// this file goes.
#pragma once
#include "engine/graph.h"
#include "models/registry.h"

namespace crumb::bench {

// torchvision's layer names ("features.0", "classifier.6"). Crumb has no adaptive pool and no dropout:
// the classifier takes the flattened features as they are, 512 x 7 x 7 at 224x224 (torchvision's exact
// shapes) and 512 at 32x32; dropout runs no kernel worth timing.
Graph build_vgg11(const models::ModelSpec& spec);

}  // namespace crumb::bench
