// The layers a user can name (engine/ops/layer.h), exported to the Python module: crumb.nn and from_torch
// build their classes and their mapping from these descriptions, and crumb.nn checks a layer's attributes
// with the engine's own checks.
#pragma once
#include <nanobind/nanobind.h>

namespace crumb::python {

// Adds layers() (every layer's description, as dicts) and check_layer(op, attrs_json, where) to `m`.
void add_layers(nanobind::module_& m);

}  // namespace crumb::python
