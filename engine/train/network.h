// A user's network as data: a JSON description of a DAG of layers over Crumb's op set (docs/networks.md),
// built into a graph the way a registered model is. train reads it from --model-file, the Python module
// writes it from crumb.nn or from_torch. Layer names become parameter names as in PyTorch's state_dict
// ("<node>.weight", "<node>.running_mean", ...), so a torch model's weights load into its description.
//
//   {"name": "mynet",
//    "nodes": [{"name": "conv1", "op": "conv2d", "inputs": ["x"], "out_channels": 16, "kernel_size": 3,
//               "padding": 1},
//              {"name": "relu1", "op": "relu"},
//              ...
//              {"name": "fc", "op": "linear", "out_features": 10}],
//    "output": "fc"}
//
// "x" is the input image [channels, height, width]; a node's "inputs" default to the node before it (x for
// the first); "output" defaults to the last node. Softmax cross-entropy on the labels follows the output.
#pragma once
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/io/json.h"
#include "engine/ops/layer.h"
#include "engine/train/model_registry.h"

namespace crumb {

// One layer: its kind (registered by its op family, engine/ops/layer.h) and its attributes, checked.
struct NetworkNode {
  std::string name;
  const Layer* layer = nullptr;
  std::vector<int> inputs;  // -1: the input x; else the index of an earlier node
  LayerAttrs attrs;
};

struct Network {
  std::string name;
  std::vector<NetworkNode> nodes;  // in order: every input comes before its node
  int output = 0;                  // index of the node the loss follows
  bool has_batch_norm() const;
};

// Reads and checks the attributes of one node of `layer` (every member of `node` but name, op and inputs):
// an unknown or missing attribute, a wrong type or value is one error starting with `where`.
LayerAttrs read_layer_attrs(const Layer& layer, const json::Value& node, const std::string& where);

// Parses and checks a description: the JSON (errors name `source` and the byte), then every node (one
// error naming the node and what to do: an unknown op or attribute, a missing or wrongly typed attribute,
// a duplicate name, an input that is not x or an earlier node, a node the output does not use).
Network parse_network(const std::string& text, const std::string& source);

// The description in canonical form: compact, every node with its inputs and every attribute of its op
// (defaults written out), numbers exact. Equal networks give equal text, whatever their source's layout,
// and parse_network of it gives the same network back. What a run records and compares (--resume, ranks).
std::string network_json(const Network& net);

// Adds the network's layers from x [batch, c, h, w] to softmax cross-entropy on y, as a registered model's
// builder does: BatchNorm takes the spec's normalisation settings (group, statistics), a node's own group
// overriding. Shapes are checked layer by layer; a mismatch is an error naming the node.
void add_network(const Network& net, Graph& g, ValueId x, ValueId y, const models::ModelSpec& spec);

// parse_network + add_network into a graph, as models::build builds a registered model.
Graph build_network(const std::string& text, const models::ModelSpec& spec, DType dtype = DType::F32);

}  // namespace crumb
