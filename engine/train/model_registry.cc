#include "engine/train/model_registry.h"

#include <algorithm>

#include "engine/base/error.h"
#include "engine/ops/rewrite.h"

namespace crumb::models {
namespace {
std::vector<ModelEntry>& registry() {
  static std::vector<ModelEntry> entries;
  return entries;
}

const ModelEntry& entry(const std::string& name) {
  for (const ModelEntry& e : registry())
    if (name == e.name) return e;
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  CRUMB_FAIL("unknown model '", name, "' (known: ", known, ")");
}
}  // namespace

void register_model(const ModelEntry& e) {
  for (const ModelEntry& r : registry()) CRUMB_CHECK(std::string(r.name) != e.name, "model '", e.name, "' is registered twice");
  registry().push_back(e);
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const ModelEntry& e : registry()) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

bool has_norm(const std::string& name) { return entry(name).has_norm; }

bool has_dropout(const std::string& name) { return entry(name).has_dropout; }

int min_image_size(const std::string& name) { return entry(name).min_size; }

Graph build(const std::string& name, ModelSpec in, DType dtype) {
  const ModelEntry& e = entry(name);
  CRUMB_CHECK(in.height >= e.min_size && in.width >= e.min_size, "model ", name, " needs images of at least ",
              e.min_size, "x", e.min_size, ", got ", in.channels, "x", in.height, "x", in.width,
              ": use --dataset cifar10, or --dataset synthetic --input ", in.channels, "x", e.min_size, "x", e.min_size);
  return build_graph([&](Graph& g, ValueId x, ValueId y) { e.build(g, x, y, in); }, in, dtype);
}

Graph build_graph(const std::function<void(Graph&, ValueId, ValueId)>& layers, const ModelSpec& in, DType dtype) {
  Graph g;
  g.set_float_dtype(dtype);
  const ValueId x = g.input("x", {in.channels, in.height, in.width});
  const ValueId y = g.input("y", {}, DType::I32);
  layers(g, x, y);
  optimize_graph(g);
  return g;
}

}  // namespace crumb::models
