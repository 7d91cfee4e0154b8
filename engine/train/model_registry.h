// Models by name: each model registers its builder where it is defined (models/*.cc, CRUMB_ON_LOAD), and
// the Trainer, train and the tests build them by name. The reference models' layer names follow
// nn.Sequential indices of the same PyTorch model, so parameter names equal the PyTorch state_dict keys
// ("0.weight", "0.bias", ...).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/ops/norm.h"

namespace crumb::models {

// The normalisation layers of the models that have them (ResNets, VGG-BN): BatchNorm over groups of
// bn.group samples (0: the whole micro-batch), or GroupNorm (--norm gn) with up to gn_groups groups (the
// largest count that divides the channels).
struct NormSpec {
  enum class Kind { Batch, Group };
  Kind kind = Kind::Batch;
  BatchNormAttrs bn;
  int gn_groups = 32;
};

// What a builder needs: the input shape and class count (from the data), the normalisation choice and
// the dropout probability of the models that have dropout (vgg11_bn; torchvision's default 0.5).
struct ModelSpec {
  ModelSpec(int c = 1, int h = 28, int w = 28, int k = 10, NormSpec n = {}, double p = 0.5)
      : channels(c), height(h), width(w), classes(k), norm(n), dropout(p) {}
  int channels, height, width, classes;
  NormSpec norm;
  double dropout;
};

// Builds the forward graph with inputs "x" [batch, c, h, w] and "y" [batch] (int32) and the loss,
// with the exact rewrites of optimize_graph applied.
// dtype F64 builds the same model in double precision (gradient checks).
Graph build(const std::string& name, ModelSpec in = {}, DType dtype = DType::F32);
// Builds a graph as build() does, with `layers` adding the layers from the input x to the loss on the
// labels y.
Graph build_graph(const std::function<void(Graph& g, ValueId x, ValueId y)>& layers, const ModelSpec& in,
                  DType dtype);
// Registered names, sorted.
std::vector<std::string> names();
// The smallest image height and width the model takes (build refuses smaller ones with an error naming
// the size and what to use instead): 32 for vgg11_bn, 1 for the others.
int min_image_size(const std::string& name);

// A model's builder: adds the layers from input x [batch, c, h, w] to the loss on labels y [batch].
using ModelBuilder = void (*)(Graph& g, ValueId x, ValueId y, const ModelSpec& in);
struct ModelEntry {
  const char* name;
  ModelBuilder build;
  int min_size = 1;          // the smallest image height and width it can take
  bool has_norm = false;     // takes --norm and --bn-group
  bool has_dropout = false;  // takes --dropout
};
// At load time (CRUMB_ON_LOAD); a name registered twice is an error.
void register_model(const ModelEntry& entry);

// Whether the model has normalisation layers (and so takes --norm and --bn-group).
bool has_norm(const std::string& name);
// Whether the model has dropout layers (and so takes --dropout).
bool has_dropout(const std::string& name);

}  // namespace crumb::models
