#include "models/registry.h"

#include "engine/base/error.h"
#include "engine/ops/rewrite.h"

namespace crumb::models {
namespace {
struct Entry {
  const char* name;
  void (*build)(Graph&, ValueId, ValueId, const ModelSpec&);
  int min_size = 1;  // smallest image height and width the model can take
};
// vgg11_bn's five 2x2 max pools floor the size five times: below 32 pixels nothing is left (28 -> 0).
const Entry kModels[] = {{"mlp", build_mlp},           {"lenet5", build_lenet5},     {"cnn", build_cnn},
                         {"resnet20", build_resnet20}, {"resnet18", build_resnet18}, {"resnet50", build_resnet50},
                         {"vgg11_bn", build_vgg11_bn, 32}};

const Entry& entry(const std::string& name) {
  for (const Entry& e : kModels)
    if (name == e.name) return e;
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  CRUMB_FAIL("unknown model '", name, "' (known: ", known, ")");
}
}  // namespace

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels) out.push_back(e.name);
  return out;
}

bool has_norm(const std::string& name) { return name.compare(0, 6, "resnet") == 0 || name == "vgg11_bn"; }

bool has_dropout(const std::string& name) { return name == "vgg11_bn"; }

int min_image_size(const std::string& name) { return entry(name).min_size; }

Graph build(const std::string& name, ModelSpec in, DType dtype) {
  const Entry& e = entry(name);
  CRUMB_CHECK(in.height >= e.min_size && in.width >= e.min_size, "model ", name, " needs images of at least ",
              e.min_size, "x", e.min_size, ", got ", in.channels, "x", in.height, "x", in.width,
              ": use --dataset cifar10, or --dataset synthetic --input ", in.channels, "x", e.min_size, "x", e.min_size);
  Graph g;
  g.set_float_dtype(dtype);
  const ValueId x = g.input("x", {in.channels, in.height, in.width});
  const ValueId y = g.input("y", {}, DType::I32);
  e.build(g, x, y, in);
  optimize_graph(g);
  return g;
}

}  // namespace crumb::models
