#include "engine/train/network.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <unordered_map>

#include "engine/base/error.h"
#include "engine/io/json.h"
#include "engine/ops/softmax_xent.h"

namespace crumb {
namespace {

// Reads one node's attributes, each error naming the node.
class NodeReader {
 public:
  NodeReader(const std::string& where, const json::Value& node) : where_(where), node_(node) {}

  const json::Value* find(const char* key) const { return node_.find(key); }

  int integer(const char* key, int lo, int fallback) const {
    const json::Value* v = find(key);
    if (!v) return fallback;
    // A negative integer reads as a Number: it is out of range rather than of another kind.
    const bool negative = v->kind == json::Value::Kind::Number && v->number < 0 && v->number == std::floor(v->number);
    constexpr int hi = LayerField::kMaxInt;
    CRUMB_CHECK(!negative, where_, ": \"", key, "\" is ", v->number, ", outside [", lo, ", ", hi, "]");
    CRUMB_CHECK(v->kind == json::Value::Kind::Integer, where_, ": \"", key, "\" must be an integer, found ",
                json::kind_name(v->kind), key_hint(key));
    CRUMB_CHECK(v->integer >= static_cast<uint64_t>(lo) && v->integer <= static_cast<uint64_t>(hi), where_, ": \"", key,
                "\" is ", v->integer, ", outside [", lo, ", ", hi, "]");
    return static_cast<int>(v->integer);
  }

  double number(const char* key, double fallback) const {
    const json::Value* v = find(key);
    if (!v) return fallback;
    CRUMB_CHECK(v->kind == json::Value::Kind::Number || v->kind == json::Value::Kind::Integer, where_, ": \"", key,
                "\" must be a number, found ", json::kind_name(v->kind));
    return v->number;
  }

  bool boolean(const char* key, bool fallback) const {
    const json::Value* v = find(key);
    if (!v) return fallback;
    CRUMB_CHECK(v->kind == json::Value::Kind::Boolean, where_, ": \"", key, "\" must be true or false, found ",
                json::kind_name(v->kind));
    return v->boolean;
  }

  const std::string& where() const { return where_; }

 private:
  // Windows are square: a pair is refused with what to write instead.
  static const char* key_hint(const char* key) {
    const std::string k = key;
    return k == "kernel_size" || k == "stride" || k == "padding"
               ? " (Crumb's windows are square: one integer for both directions)"
               : "";
  }

  const std::string& where_;
  const json::Value& node_;
};

const std::string& string_member(const json::Value& obj, const char* key, const std::string& where) {
  const json::Value* v = obj.find(key);
  CRUMB_CHECK(v, where, ": \"", key, "\" is missing");
  CRUMB_CHECK(v->kind == json::Value::Kind::String, where, ": \"", key, "\" must be a string, found ",
              json::kind_name(v->kind));
  return v->string;
}

// The nodes parsed so far, by name: every lookup in constant time, so a description of n nodes parses in
// time linear in its size.
using NodeIndex = std::unordered_map<std::string, int>;

int node_index(const NodeIndex& index, const std::string& name) {
  const auto it = index.find(name);
  return it == index.end() ? -2 : it->second;
}

bool named_later(const json::Value& list, std::size_t after, const std::string& name) {
  for (std::size_t i = after + 1; i < list.items.size(); ++i) {
    const json::Value* n = list.items[i].find("name");
    if (n && n->kind == json::Value::Kind::String && n->string == name) return true;
  }
  return false;
}

// "out_channels, kernel_size, stride, ..." (required ones first; required_only: only those).
std::string field_list(const Layer& layer, bool required_only = false) {
  std::string out;
  for (bool required : {true, false})
    for (const LayerField& f : layer.fields())
      if (f.required == required && (required || !required_only)) out += (out.empty() ? "" : ", ") + f.name;
  return out.empty() ? "none" : out;
}

// [height, width], or one integer for both.
std::vector<int> read_size2(const NodeReader& r, const char* key) {
  const json::Value* o = r.find(key);
  if (o->kind != json::Value::Kind::Array) return std::vector<int>(2, r.integer(key, 1, 1));
  CRUMB_CHECK(o->items.size() == 2 && o->items[0].kind == json::Value::Kind::Integer &&
                  o->items[1].kind == json::Value::Kind::Integer && o->items[0].integer >= 1 &&
                  o->items[1].integer >= 1 && o->items[0].integer <= 65536 && o->items[1].integer <= 65536,
              r.where(), ": \"", key, "\" must be [height, width] of positive integers, or one integer");
  return {static_cast<int>(o->items[0].integer), static_cast<int>(o->items[1].integer)};
}

// Per-sample dims: 1 to 3 positive integers, at most 2^31 values.
std::vector<int> read_dims(const NodeReader& r, const char* key) {
  const json::Value* s = r.find(key);
  CRUMB_CHECK(s->kind == json::Value::Kind::Array && !s->items.empty() && s->items.size() <= 3, r.where(), ": \"",
              key, "\" must be the per-sample dims, an array of 1 to 3 positive integers");
  std::vector<int> dims;
  int64_t count = 1;
  for (const json::Value& d : s->items) {
    constexpr int hi = LayerField::kMaxInt;
    CRUMB_CHECK(d.kind == json::Value::Kind::Integer && d.integer >= 1 && d.integer <= static_cast<uint64_t>(hi),
                r.where(), ": \"", key, "\" must hold positive integers up to ", hi);
    count *= static_cast<int64_t>(d.integer);
    CRUMB_CHECK(count <= (int64_t{1} << 31), r.where(), ": \"", key, "\" has more than 2^31 elements per sample");
    dims.push_back(static_cast<int>(d.integer));
  }
  return dims;
}

void read_field(const LayerField& f, const LayerAttrs& read, LayerAttrs::Entry& e, const NodeReader& r) {
  const char* key = f.name.c_str();
  e.given = r.find(key) != nullptr;
  switch (f.kind) {
    case LayerField::Kind::Int: {
      const json::Value* v = r.find(key);
      if (!f.word.empty() && v && v->kind != json::Value::Kind::Integer && v->kind != json::Value::Kind::Number) {
        CRUMB_CHECK(v->kind == json::Value::Kind::String && v->string == f.word, r.where(), ": \"", key,
                    "\" must be an integer or \"", f.word, "\", found ", json::kind_name(v->kind));
        e.number = 0;
        break;
      }
      const int fallback = f.same_as.empty() ? static_cast<int>(f.fallback) : read.integer(f.same_as);
      e.number = r.integer(key, f.lo, fallback);
      break;
    }
    case LayerField::Kind::Number: e.number = r.number(key, f.fallback); break;
    case LayerField::Kind::Bool: e.number = r.boolean(key, f.fallback != 0); break;
    case LayerField::Kind::Size2: e.ints = e.given ? read_size2(r, key) : std::vector<int>{1, 1}; break;
    case LayerField::Kind::Dims:
      if (e.given) e.ints = read_dims(r, key);
      break;
  }
}

// before: the nodes parsed so far, by name (their count is index).
NetworkNode parse_node(const json::Value& list, std::size_t index, const NodeIndex& before, const std::string& net) {
  const json::Value& obj = list.items[index];
  const std::string at = net + ": node " + std::to_string(index);
  CRUMB_CHECK(obj.kind == json::Value::Kind::Object, at, " must be an object, found ", json::kind_name(obj.kind));
  NetworkNode n;
  n.name = string_member(obj, "name", at);
  CRUMB_CHECK(!n.name.empty(), at, ": \"name\" is empty; give every node a name");
  CRUMB_CHECK(n.name != "x" && n.name != "y" && n.name != "loss", at, ": the name '", n.name,
              "' is reserved (x: the input, y: the labels, loss: the loss); rename the node");
  CRUMB_CHECK(node_index(before, n.name) < 0, net, ": two nodes are named '", n.name,
              "'; names must be unique (they name the parameters)");
  const std::string& op = string_member(obj, "op", net + ": node '" + n.name + "'");
  const Layer* layer = find_layer(op);
  if (!layer) {
    std::vector<std::string> names;
    for (const Layer& l : layer_registry()) names.push_back(l.name());
    std::sort(names.begin(), names.end());
    std::string known;
    for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
    CRUMB_FAIL(net, ": node '", n.name, "': unknown op '", op, "' (known: ", known, ")");
  }
  n.layer = layer;
  const std::string where = net + ": node '" + n.name + "' (" + layer->name() + ")";
  // Inputs: by name, x or an earlier node; by default the node before (x for the first).
  if (const json::Value* in = obj.find("inputs")) {
    CRUMB_CHECK(in->kind == json::Value::Kind::Array, where, ": \"inputs\" must be an array of node names, found ",
                json::kind_name(in->kind));
    for (const json::Value& name : in->items) {
      CRUMB_CHECK(name.kind == json::Value::Kind::String, where, ": \"inputs\" must hold node names, found ",
                  json::kind_name(name.kind));
      if (name.string == "x") {
        n.inputs.push_back(-1);
        continue;
      }
      const int i = node_index(before, name.string);
      CRUMB_CHECK(i >= 0 && name.string != n.name, where, ": input '", name.string, "' ",
                  name.string == n.name          ? "is the node itself (a cycle)"
                  : named_later(list, index, name.string) ? "comes after it (list the nodes so that every input comes first; cycles are not allowed)"
                                                 : "is not a node (inputs are x or the names of earlier nodes)");
      n.inputs.push_back(i);
    }
  } else {
    n.inputs.push_back(static_cast<int>(index) - 1);
  }
  CRUMB_CHECK(static_cast<int>(n.inputs.size()) == layer->inputs(), where, " takes ", layer->inputs(), " input",
              layer->inputs() == 1 ? "" : "s", ", got ", n.inputs.size());
  n.attrs = read_layer_attrs(*layer, obj, where);
  return n;
}

}  // namespace

LayerAttrs read_layer_attrs(const Layer& layer, const json::Value& node, const std::string& where) {
  CRUMB_CHECK(node.kind == json::Value::Kind::Object, where, ": a layer's attributes must be a JSON object, found ",
              json::kind_name(node.kind));
  for (const auto& [key, value] : node.members) {
    if (key == "name" || key == "op" || key == "inputs") continue;
    CRUMB_CHECK(layer.field_index(key) >= 0, where, ": unknown attribute \"", key, "\" (", layer.name(),
                " takes: ", field_list(layer), ")");
  }
  for (const LayerField& f : layer.fields())
    CRUMB_CHECK(!f.required || node.find(f.name.c_str()), where, ": \"", f.name, "\" is missing (", layer.name(),
                " needs ", field_list(layer, true), ")");
  LayerAttrs attrs(&layer);
  const NodeReader reader(where, node);
  for (std::size_t i = 0; i < layer.fields().size(); ++i) read_field(layer.fields()[i], attrs, attrs.entry(i), reader);
  layer.check(attrs, where);
  return attrs;
}

bool Network::has_batch_norm() const {
  return std::any_of(nodes.begin(), nodes.end(), [](const NetworkNode& n) { return n.layer->takes_run_bn(); });
}

Network parse_network(const std::string& text, const std::string& source) {
  const json::Value root = json::parse(text, source, json::Grammar::Full);
  CRUMB_CHECK(root.kind == json::Value::Kind::Object, source, ": a network description must be a JSON object, found ",
              json::kind_name(root.kind));
  Network net;
  net.name = root.find("name") ? string_member(root, "name", source) : "network";
  const std::string where = "network '" + net.name + "'";
  for (const auto& [key, value] : root.members)
    CRUMB_CHECK(key == "name" || key == "nodes" || key == "output", where, ": unknown key \"", key,
                "\" (a description has name, nodes and output)");
  const json::Value* nodes = root.find("nodes");
  CRUMB_CHECK(nodes && nodes->kind == json::Value::Kind::Array && !nodes->items.empty(), where,
              ": \"nodes\" must be a non-empty array of layers");
  NodeIndex index;
  for (std::size_t i = 0; i < nodes->items.size(); ++i) {
    net.nodes.push_back(parse_node(*nodes, i, index, where));
    index.emplace(net.nodes.back().name, static_cast<int>(i));
  }
  net.output = static_cast<int>(net.nodes.size()) - 1;
  if (root.find("output")) {
    const std::string& out = string_member(root, "output", where);
    net.output = node_index(index, out);
    CRUMB_CHECK(net.output >= 0, where, ": output '", out, "' is not a node");
  }
  // Every node feeds the output: a dangling branch would hold parameters no gradient reaches.
  std::vector<bool> used(net.nodes.size(), false);
  used[net.output] = true;
  for (int i = net.output; i >= 0; --i)
    if (used[i])
      for (int in : net.nodes[i].inputs)
        if (in >= 0) used[in] = true;
  for (std::size_t i = 0; i < net.nodes.size(); ++i)
    CRUMB_CHECK(used[i], where, ": node '", net.nodes[i].name, "' does not lead to the output '",
                net.nodes[net.output].name, "' (remove it, or make the output use it)");
  return net;
}

namespace {

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // A whole number stays a Number when read back ("1.0" not "1"), as the attribute's type is a float.
  const std::string s = buf;
  return s.find_first_of(".eE") == std::string::npos ? s + ".0" : s;
}

}  // namespace

std::string network_json(const Network& net) {
  std::string out = "{\"name\":" + json::quote(net.name) + ",\"nodes\":[";
  for (std::size_t i = 0; i < net.nodes.size(); ++i) {
    const NetworkNode& n = net.nodes[i];
    out += std::string(i ? "," : "") + "{\"name\":" + json::quote(n.name) + ",\"op\":\"" + n.layer->name() +
           "\",\"inputs\":[";
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      out += (j ? "," : "") + json::quote(n.inputs[j] < 0 ? "x" : net.nodes[n.inputs[j]].name);
    out += "]";
    const std::vector<LayerField>& fields = n.layer->fields();
    for (std::size_t f = 0; f < fields.size(); ++f) {
      const LayerField& field = fields[f];
      const LayerAttrs::Entry& e = n.attrs.entry(f);
      if ((field.stated || field.optional) && !e.given) continue;
      out += ",\"" + field.name + "\":";
      switch (field.kind) {
        case LayerField::Kind::Int:
          out += !field.word.empty() && e.number == 0 ? json::quote(field.word) : std::to_string(static_cast<int>(e.number));
          break;
        case LayerField::Kind::Number: out += exact(e.number); break;
        case LayerField::Kind::Bool: out += e.number != 0 ? "true" : "false"; break;
        case LayerField::Kind::Size2:
        case LayerField::Kind::Dims:
          out += "[";
          for (std::size_t j = 0; j < e.ints.size(); ++j) out += (j ? "," : "") + std::to_string(e.ints[j]);
          out += "]";
          break;
      }
    }
    out += "}";
  }
  return out + "],\"output\":" + json::quote(net.nodes[net.output].name) + "}";
}

void add_network(const Network& net, Graph& g, ValueId x, ValueId y, const models::ModelSpec& spec) {
  const std::string where = "network '" + net.name + "'";
  std::vector<ValueId> out(net.nodes.size(), -1);
  for (std::size_t i = 0; i < net.nodes.size(); ++i) {
    const NetworkNode& n = net.nodes[i];
    std::vector<ValueId> in;
    for (int j : n.inputs) in.push_back(j < 0 ? x : out[j]);
    const std::string at = where + ": node '" + n.name + "' (" + n.layer->name() + ")";
    try {
      out[i] = n.layer->build(LayerBuild{g, in, n.attrs, n.name, at, spec.norm.bn});
    } catch (const Error& e) {
      // The op's own shape errors name the layer; the network's name says where it is.
      const std::string what = e.what();
      if (what.rfind(where, 0) == 0) throw;
      CRUMB_FAIL(where, ": ", what);
    }
  }
  const NetworkNode& last = net.nodes[net.output];
  const Value& logits = g.value(out[net.output]);
  CRUMB_CHECK(logits.dims.size() == 1 && logits.dims[0] == spec.classes, where, ": the output '", last.name,
              "' gives per-sample ", dims_str(logits.dims), " but the loss needs [", spec.classes,
              "], one score per class of the data (end with a linear layer of out_features ", spec.classes, ")");
  nn::softmax_cross_entropy(g, out[net.output], y, "loss");
}

Graph build_network(const std::string& text, const models::ModelSpec& spec, DType dtype) {
  const Network net = parse_network(text, "network description");
  return models::build_graph([&](Graph& g, ValueId x, ValueId y) { add_network(net, g, x, y, spec); }, spec, dtype);
}

}  // namespace crumb
