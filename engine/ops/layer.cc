#include "engine/ops/layer.h"

#include "engine/base/error.h"

namespace crumb {

LayerAttrs::LayerAttrs(const Layer* layer) : layer_(layer), entries_(layer->fields().size()) {}

const LayerAttrs::Entry& LayerAttrs::at(const std::string& field) const {
  const int i = layer_->field_index(field);
  CRUMB_CHECK(i >= 0, "layer ", layer_->name(), " has no attribute \"", field, "\"");
  return entries_[i];
}

Layer Layer::with_python(std::string cls, std::string node_name, std::string signature, std::string doc) const {
  Layer l = *this;
  l.py_class_ = std::move(cls), l.py_node_ = std::move(node_name), l.py_signature_ = std::move(signature);
  l.py_doc_ = std::move(doc);
  return l;
}

Layer Layer::with_torch(std::string module, std::vector<std::string> functions,
                        std::vector<TorchRequirement> needs) const {
  Layer l = *this;
  l.torch_module_ = std::move(module), l.torch_functions_ = std::move(functions), l.torch_needs_ = std::move(needs);
  return l;
}

int Layer::field_index(const std::string& field) const {
  for (std::size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].name == field) return static_cast<int>(i);
  return -1;
}

ValueId Layer::build(const LayerBuild& b) const {
  CRUMB_CHECK(build_, b.where, ": layer ", name_, " has no builder");
  return build_(b);
}

namespace {
std::vector<Layer>& registry() {
  static std::vector<Layer> layers;
  return layers;
}
}  // namespace

void add_layer(Layer layer) {
  CRUMB_CHECK(!find_layer(layer.name()), "layer ", layer.name(), " is registered twice");
  registry().push_back(std::move(layer));
}

const std::vector<Layer>& layer_registry() { return registry(); }

const Layer* find_layer(const std::string& name) {
  for (const Layer& l : registry())
    if (l.name() == name) return &l;
  return nullptr;
}

void check_stated_size(const LayerBuild& b, const char* field, std::size_t rank) {
  const Value& in = b.g.value(b.in[0]);
  CRUMB_CHECK(in.dims.size() == rank, b.where, ": input '", in.name, "' is per-sample ", dims_str(in.dims),
              rank == 1 ? ", not [features] (put a flatten node before it)" : ", not [channels, height, width]");
  if (!field) return;
  const int stated = b.attrs.given(field) ? b.attrs.integer(field) : 0;
  CRUMB_CHECK(stated == 0 || stated == in.dims[0], b.where, ": ", field, " is ", stated, " but its input '", in.name,
              "' has ", in.dims[0], " (", dims_str(in.dims), ")");
}

}  // namespace crumb
