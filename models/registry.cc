#include "models/registry.h"

#include "engine/error.h"
#include "engine/rewrite.h"

namespace crumb::models {
namespace {
struct Entry {
  const char* name;
  void (*build)(Graph&, ValueId, ValueId, const ModelSpec&);
};
const Entry kModels[] = {{"mlp", build_mlp},           {"lenet5", build_lenet5},     {"cnn", build_cnn},
                         {"resnet20", build_resnet20}, {"resnet18", build_resnet18}, {"resnet50", build_resnet50},
                         {"vgg11_bn", build_vgg11_bn}};
}  // namespace

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels) out.push_back(e.name);
  return out;
}

bool has_norm(const std::string& name) { return name.compare(0, 6, "resnet") == 0 || name == "vgg11_bn"; }

bool has_dropout(const std::string& name) { return name == "vgg11_bn"; }

Graph build(const std::string& name, ModelSpec in, DType dtype) {
  for (const Entry& e : kModels) {
    if (name != e.name) continue;
    Graph g;
    g.set_float_dtype(dtype);
    const ValueId x = g.input("x", {in.channels, in.height, in.width});
    const ValueId y = g.input("y", {}, DType::I32);
    e.build(g, x, y, in);
    optimize_graph(g);
    return g;
  }
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  CRUMB_FAIL("unknown model '", name, "' (known: ", known, ")");
}

}  // namespace crumb::models
