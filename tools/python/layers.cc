#include "tools/python/layers.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "engine/base/error.h"
#include "engine/io/json.h"
#include "engine/ops/layer.h"
#include "engine/train/network.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace crumb::python {
namespace {

const char* kind_name(LayerField::Kind kind) {
  switch (kind) {
    case LayerField::Kind::Int: return "int";
    case LayerField::Kind::Number: return "number";
    case LayerField::Kind::Bool: return "bool";
    case LayerField::Kind::Size2: return "size2";
    case LayerField::Kind::Dims: return "dims";
  }
  return "";
}

// The field's value when absent, as Python writes it (None: absent stays absent, or no default).
nb::object fallback(const LayerField& f) {
  if (f.stated || f.optional || f.required || !f.same_as.empty()) return nb::none();
  switch (f.kind) {
    case LayerField::Kind::Int: return nb::int_(static_cast<int>(f.fallback));
    case LayerField::Kind::Number: return nb::float_(f.fallback);
    case LayerField::Kind::Bool: return nb::bool_(f.fallback != 0);
    default: return nb::none();
  }
}

nb::dict describe(const Layer& layer) {
  nb::list fields;
  for (const LayerField& f : layer.fields()) {
    nb::dict d;
    d["name"] = f.name, d["kind"] = kind_name(f.kind), d["required"] = f.required, d["default"] = fallback(f);
    d["lo"] = f.lo, d["hi"] = LayerField::kMaxInt, d["stated"] = f.stated, d["optional"] = f.optional;
    d["same_as"] = f.same_as, d["word"] = f.word, d["square"] = f.square, d["same_padding"] = f.same_padding;
    d["quiet"] = f.quiet, d["torch"] = f.torch;
    fields.append(d);
  }
  nb::list needs;
  for (const TorchRequirement& r : layer.torch_needs()) {
    nb::dict d;
    d["attr"] = r.attr, d["test"] = r.test, d["value"] = r.value, d["message"] = r.message;
    needs.append(d);
  }
  nb::dict python, torch, out;
  python["class"] = layer.python_class(), python["node"] = layer.python_node_name();
  python["signature"] = layer.python_signature(), python["doc"] = layer.python_doc();
  torch["module"] = layer.torch_module(), torch["functions"] = layer.torch_functions(), torch["needs"] = needs;
  out["name"] = layer.name(), out["inputs"] = layer.inputs(), out["fields"] = fields;
  out["python"] = python, out["torch"] = torch;
  return out;
}

}  // namespace

void add_layers(nb::module_& m) {
  m.def(
      "layers",
      [] {
        nb::list out;
        for (const Layer& l : layer_registry()) out.append(describe(l));
        return out;
      },
      "Every layer a description may name, as registered by its op family: name, inputs, fields, python, torch.");
  m.def(
      "check_layer",
      [](const std::string& op, const std::string& attrs, const std::string& where) {
        const Layer* layer = find_layer(op);
        CRUMB_CHECK(layer, where, ": no layer is named '", op, "'");
        read_layer_attrs(*layer, json::parse(attrs, where, json::Grammar::Full), where);
      },
      "op"_a, "attrs"_a, "where"_a,
      "Checks a layer's attributes (a JSON object) as a description's node is checked; errors start with where.");
}

}  // namespace crumb::python
