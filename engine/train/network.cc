#include "engine/train/network.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <initializer_list>
#include <unordered_map>

#include "engine/base/error.h"
#include "engine/io/json.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"

namespace crumb {
namespace {

// What each op takes: its attributes (beside name, op and inputs), the required ones marked '*', and its
// input count.
struct OpSpec {
  NetworkOp op;
  const char* name;
  std::initializer_list<const char*> attrs;
  int inputs = 1;
};

const OpSpec kOps[] = {
    {NetworkOp::Conv2d, "conv2d",
     {"*out_channels", "*kernel_size", "stride", "padding", "bias", "groups", "in_channels"}},
    {NetworkOp::BatchNorm2d, "batch_norm2d", {"num_features", "eps", "momentum", "group"}},
    {NetworkOp::GroupNorm, "group_norm", {"*num_groups", "num_channels", "eps"}},
    {NetworkOp::Relu, "relu", {}},
    {NetworkOp::LeakyRelu, "leaky_relu", {"negative_slope"}},
    {NetworkOp::Relu6, "relu6", {}},
    {NetworkOp::Hardtanh, "hardtanh", {"min_val", "max_val"}},
    {NetworkOp::MaxPool2d, "max_pool2d", {"*kernel_size", "stride", "padding"}},
    {NetworkOp::AvgPool2d, "avg_pool2d", {"*kernel_size", "stride", "padding"}},
    {NetworkOp::AdaptiveAvgPool2d, "adaptive_avg_pool2d", {"*output_size"}},
    {NetworkOp::Linear, "linear", {"*out_features", "in_features", "bias"}},
    {NetworkOp::Dropout, "dropout", {"p"}},
    {NetworkOp::Flatten, "flatten", {}},
    {NetworkOp::Reshape, "reshape", {"*shape"}},
    {NetworkOp::Add, "add", {}, 2},
};

const OpSpec& spec_of(NetworkOp op) {
  for (const OpSpec& s : kOps)
    if (s.op == op) return s;
  CRUMB_FAIL("network op ", static_cast<int>(op), " has no description");
}

// "out_channels, kernel_size, stride, ..." (required_only: only the required ones).
std::string attr_list(const OpSpec& s, bool required_only = false) {
  std::string out;
  for (const char* a : s.attrs)
    if (!required_only || a[0] == '*') out += (out.empty() ? "" : ", ") + std::string(a[0] == '*' ? a + 1 : a);
  return out.empty() ? "none" : out;
}

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
    CRUMB_CHECK(!negative, where_, ": \"", key, "\" is ", v->number, ", outside [", lo, ", ", 1 << 24, "]");
    CRUMB_CHECK(v->kind == json::Value::Kind::Integer, where_, ": \"", key, "\" must be an integer, found ",
                json::kind_name(v->kind), key_hint(key));
    CRUMB_CHECK(v->integer >= static_cast<uint64_t>(lo) && v->integer <= (1u << 24), where_, ": \"", key, "\" is ",
                v->integer, ", outside [", lo, ", ", 1 << 24, "]");
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

void read_attrs(NetworkNode& n, const NodeReader& r) {
  switch (n.op) {
    case NetworkOp::Conv2d:
      n.out = r.integer("out_channels", 1, 0);
      n.in = r.integer("in_channels", 1, 0);
      n.kernel = r.integer("kernel_size", 1, 0);
      n.stride = r.integer("stride", 1, 1);
      n.padding = r.integer("padding", 0, 0);
      n.bias = r.boolean("bias", true);
      n.groups = r.integer("groups", 1, 1);
      CRUMB_CHECK(n.out % n.groups == 0 && (n.in == 0 || n.in % n.groups == 0), r.where(), ": groups ", n.groups,
                  " must divide in_channels and out_channels");
      break;
    case NetworkOp::BatchNorm2d: {
      n.in = r.integer("num_features", 1, 0);
      n.eps = r.number("eps", 1e-5);
      n.momentum = r.number("momentum", 0.1);
      if (const json::Value* g = r.find("group")) {
        const bool batch = g->kind == json::Value::Kind::String && g->string == "batch";
        CRUMB_CHECK(batch || g->kind == json::Value::Kind::Integer, r.where(),
                    ": \"group\" must be a sample count or \"batch\", found ", json::kind_name(g->kind));
        n.group = batch ? 0 : r.integer("group", 1, 0);
      }
      CRUMB_CHECK(n.momentum >= 0 && n.momentum <= 1, r.where(), ": \"momentum\" must be in [0, 1], got ", n.momentum);
      break;
    }
    case NetworkOp::GroupNorm:
      n.out = r.integer("num_groups", 1, 0);
      n.in = r.integer("num_channels", 1, 0);
      n.eps = r.number("eps", 1e-5);
      break;
    case NetworkOp::MaxPool2d:
    case NetworkOp::AvgPool2d:
      n.kernel = r.integer("kernel_size", 1, 0);
      n.stride = r.integer("stride", 1, n.kernel);
      n.padding = r.integer("padding", 0, 0);
      break;
    case NetworkOp::AdaptiveAvgPool2d: {
      const json::Value* o = r.find("output_size");
      if (o->kind == json::Value::Kind::Array) {
        CRUMB_CHECK(o->items.size() == 2 && o->items[0].kind == json::Value::Kind::Integer &&
                        o->items[1].kind == json::Value::Kind::Integer && o->items[0].integer >= 1 &&
                        o->items[1].integer >= 1 && o->items[0].integer <= 65536 && o->items[1].integer <= 65536,
                    r.where(), ": \"output_size\" must be [height, width] of positive integers, or one integer");
        n.out_h = static_cast<int>(o->items[0].integer);
        n.out_w = static_cast<int>(o->items[1].integer);
      } else {
        n.out_h = n.out_w = r.integer("output_size", 1, 1);
      }
      break;
    }
    case NetworkOp::Linear:
      n.out = r.integer("out_features", 1, 0);
      n.in = r.integer("in_features", 1, 0);
      n.bias = r.boolean("bias", true);
      break;
    case NetworkOp::Dropout:
      n.p = r.number("p", 0.5);
      CRUMB_CHECK(n.p >= 0 && n.p < 1, r.where(), ": \"p\" must be in [0, 1), got ", n.p);
      break;
    case NetworkOp::LeakyRelu:
      n.negative_slope = r.number("negative_slope", 0.01);
      CRUMB_CHECK(n.negative_slope >= 0 && std::isfinite(n.negative_slope), r.where(),
                  ": \"negative_slope\" must be a finite number >= 0, got ", n.negative_slope);
      break;
    case NetworkOp::Hardtanh:
      n.min_val = r.number("min_val", -1);
      n.max_val = r.number("max_val", 1);
      CRUMB_CHECK(n.min_val < n.max_val && std::isfinite(n.min_val) && std::isfinite(n.max_val), r.where(),
                  ": \"min_val\" must be below \"max_val\", got ", n.min_val, " and ", n.max_val);
      break;
    case NetworkOp::Reshape: {
      const json::Value* s = r.find("shape");
      CRUMB_CHECK(s->kind == json::Value::Kind::Array && !s->items.empty() && s->items.size() <= 3, r.where(),
                  ": \"shape\" must be the per-sample dims, an array of 1 to 3 positive integers");
      int64_t count = 1;
      for (const json::Value& d : s->items) {
        CRUMB_CHECK(d.kind == json::Value::Kind::Integer && d.integer >= 1 && d.integer <= (1u << 24), r.where(),
                    ": \"shape\" must hold positive integers up to ", 1 << 24);
        count *= static_cast<int64_t>(d.integer);
        CRUMB_CHECK(count <= (int64_t{1} << 31), r.where(), ": \"shape\" has more than 2^31 elements per sample");
        n.shape.push_back(static_cast<int>(d.integer));
      }
      break;
    }
    case NetworkOp::Relu:
    case NetworkOp::Relu6:
    case NetworkOp::Flatten:
    case NetworkOp::Add:
      break;
  }
  if (n.op == NetworkOp::BatchNorm2d || n.op == NetworkOp::GroupNorm)
    CRUMB_CHECK(n.eps > 0, r.where(), ": \"eps\" must be > 0, got ", n.eps);
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
  const OpSpec* spec = nullptr;
  for (const OpSpec& s : kOps)
    if (op == s.name) spec = &s;
  if (!spec) {
    std::string known;
    for (const OpSpec& s : kOps) known += (known.empty() ? "" : ", ") + std::string(s.name);
    CRUMB_FAIL(net, ": node '", n.name, "': unknown op '", op, "' (known: ", known, ")");
  }
  n.op = spec->op;
  const std::string where = net + ": node '" + n.name + "' (" + spec->name + ")";
  for (const auto& [key, value] : obj.members) {
    if (key == "name" || key == "op" || key == "inputs") continue;
    bool known = false;
    for (const char* a : spec->attrs) known |= key == (a[0] == '*' ? a + 1 : a);
    CRUMB_CHECK(known, where, ": unknown attribute \"", key, "\" (", spec->name, " takes: ", attr_list(*spec), ")");
  }
  for (const char* a : spec->attrs)
    CRUMB_CHECK(a[0] != '*' || obj.find(a + 1), where, ": \"", a + 1, "\" is missing (", spec->name, " needs ",
                attr_list(*spec, true), ")");
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
  CRUMB_CHECK(static_cast<int>(n.inputs.size()) == spec->inputs, where, " takes ", spec->inputs, " input",
              spec->inputs == 1 ? "" : "s", ", got ", n.inputs.size());
  read_attrs(n, NodeReader(where, obj));
  return n;
}

}  // namespace

const char* network_op_name(NetworkOp op) { return spec_of(op).name; }

bool Network::has_batch_norm() const {
  return std::any_of(nodes.begin(), nodes.end(), [](const NetworkNode& n) { return n.op == NetworkOp::BatchNorm2d; });
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
    out += std::string(i ? "," : "") + "{\"name\":" + json::quote(n.name) + ",\"op\":\"" + network_op_name(n.op) +
           "\",\"inputs\":[";
    for (std::size_t j = 0; j < n.inputs.size(); ++j)
      out += (j ? "," : "") + json::quote(n.inputs[j] < 0 ? "x" : net.nodes[n.inputs[j]].name);
    out += "]";
    auto integer = [&](const char* key, int v) { out += std::string(",\"") + key + "\":" + std::to_string(v); };
    auto stated = [&](const char* key) {
      if (n.in) integer(key, n.in);
    };
    auto number = [&](const char* key, double v) { out += std::string(",\"") + key + "\":" + exact(v); };
    auto boolean = [&](const char* key, bool v) { out += std::string(",\"") + key + "\":" + (v ? "true" : "false"); };
    auto window = [&] {
      integer("kernel_size", n.kernel);
      integer("stride", n.stride);
      integer("padding", n.padding);
    };
    switch (n.op) {
      case NetworkOp::Conv2d:
        stated("in_channels");
        integer("out_channels", n.out);
        window();
        boolean("bias", n.bias);
        integer("groups", n.groups);
        break;
      case NetworkOp::BatchNorm2d:
        stated("num_features");
        number("eps", n.eps);
        number("momentum", n.momentum);
        if (n.group) {
          if (*n.group)
            integer("group", *n.group);
          else
            out += ",\"group\":\"batch\"";
        }
        break;
      case NetworkOp::GroupNorm:
        integer("num_groups", n.out);
        stated("num_channels");
        number("eps", n.eps);
        break;
      case NetworkOp::MaxPool2d:
      case NetworkOp::AvgPool2d: window(); break;
      case NetworkOp::AdaptiveAvgPool2d:
        out += ",\"output_size\":[" + std::to_string(n.out_h) + "," + std::to_string(n.out_w) + "]";
        break;
      case NetworkOp::Linear:
        stated("in_features");
        integer("out_features", n.out);
        boolean("bias", n.bias);
        break;
      case NetworkOp::Dropout: number("p", n.p); break;
      case NetworkOp::LeakyRelu: number("negative_slope", n.negative_slope); break;
      case NetworkOp::Hardtanh:
        number("min_val", n.min_val);
        number("max_val", n.max_val);
        break;
      case NetworkOp::Reshape:
        out += ",\"shape\":[";
        for (std::size_t j = 0; j < n.shape.size(); ++j) out += (j ? "," : "") + std::to_string(n.shape[j]);
        out += "]";
        break;
      case NetworkOp::Relu:
      case NetworkOp::Relu6:
      case NetworkOp::Flatten:
      case NetworkOp::Add: break;
    }
    out += "}";
  }
  return out + "],\"output\":" + json::quote(net.nodes[net.output].name) + "}";
}

namespace {

// The size a node states for its input, checked against the input's dims (channels or features).
void check_stated(const NetworkNode& n, const std::string& where, const char* what, const Value& in, std::size_t rank) {
  CRUMB_CHECK(in.dims.size() == rank, where, ": input '", in.name, "' is per-sample ", dims_str(in.dims),
              rank == 1 ? ", not [features] (put a flatten node before it)" : ", not [channels, height, width]");
  CRUMB_CHECK(n.in == 0 || n.in == in.dims[0], where, ": ", what, " is ", n.in, " but its input '", in.name,
              "' has ", in.dims[0], " (", dims_str(in.dims), ")");
}

ValueId add_node(Graph& g, const NetworkNode& n, const std::vector<ValueId>& in, const models::ModelSpec& spec,
                 const std::string& where) {
  const Value& x = g.value(in[0]);
  switch (n.op) {
    case NetworkOp::Conv2d:
      check_stated(n, where, "in_channels", x, 3);
      CRUMB_CHECK(x.dims[0] % n.groups == 0, where, ": groups ", n.groups, " does not divide the ", x.dims[0],
                  " channels of its input '", x.name, "'");
      return nn::conv2d(
          g, in[0], n.out, n.kernel, n.name,
          nn::ConvOptions().with_stride(n.stride).with_pad(n.padding).with_bias(n.bias).with_groups(n.groups));
    case NetworkOp::BatchNorm2d: {
      check_stated(n, where, "num_features", x, 3);
      BatchNormAttrs a = spec.norm.bn;
      if (n.group) a.group = *n.group;
      a.eps = n.eps;
      a.momentum = n.momentum;
      return nn::batch_norm2d(g, in[0], n.name, a);
    }
    case NetworkOp::GroupNorm:
      check_stated(n, where, "num_channels", x, 3);
      CRUMB_CHECK(x.dims[0] % n.out == 0, where, ": num_groups ", n.out, " does not divide the ", x.dims[0],
                  " channels of its input '", x.name, "'");
      return nn::group_norm(g, in[0], n.out, n.name, n.eps);
    case NetworkOp::Relu: return nn::relu(g, in[0], n.name);
    case NetworkOp::LeakyRelu: return nn::leaky_relu(g, in[0], n.negative_slope, n.name);
    case NetworkOp::Relu6: return nn::hardtanh(g, in[0], 0, 6, n.name);
    case NetworkOp::Hardtanh: return nn::hardtanh(g, in[0], n.min_val, n.max_val, n.name);
    case NetworkOp::MaxPool2d: return nn::max_pool2d(g, in[0], n.kernel, n.stride, n.name, n.padding);
    case NetworkOp::AvgPool2d: return nn::avg_pool2d(g, in[0], n.kernel, n.stride, n.name, n.padding);
    case NetworkOp::AdaptiveAvgPool2d: {
      check_stated(n, where, "", x, 3);
      if (n.out_h != 1 || n.out_w != 1) return nn::adaptive_avg_pool2d(g, in[0], n.out_h, n.out_w, n.name);
      // The global mean (ResNet's avgpool), kept [channels, 1, 1] as PyTorch's output is.
      const int64_t c = x.dims[0];
      return g.apply(kReshape, {nn::global_avg_pool(g, in[0], n.name)}, n.name + ".view", ReshapeAttrs{{c, 1, 1}});
    }
    case NetworkOp::Linear:
      check_stated(n, where, "in_features", x, 1);
      return nn::linear(g, in[0], n.out, n.name, n.bias);
    case NetworkOp::Dropout: return nn::dropout(g, in[0], n.p, n.name);
    case NetworkOp::Flatten: return nn::flatten(g, in[0], n.name);
    case NetworkOp::Reshape: {
      const Dims to(n.shape.begin(), n.shape.end());
      CRUMB_CHECK(dims_count(to) == dims_count(x.dims), where, ": cannot reshape its input '", x.name, "' ",
                  dims_str(x.dims), " to ", dims_str(to), " (", dims_count(x.dims), " values per sample)");
      return nn::reshape(g, in[0], to, n.name);
    }
    case NetworkOp::Add: {
      const Value& b = g.value(in[1]);
      CRUMB_CHECK(x.dims == b.dims, where, ": its inputs '", x.name, "' ", dims_str(x.dims), " and '", b.name, "' ",
                  dims_str(b.dims), " differ in shape (both branches must give the same per-sample shape)");
      return nn::add(g, in[0], in[1], n.name);
    }
  }
  CRUMB_FAIL(where, ": no builder");
}

}  // namespace

void add_network(const Network& net, Graph& g, ValueId x, ValueId y, const models::ModelSpec& spec) {
  const std::string where = "network '" + net.name + "'";
  std::vector<ValueId> out(net.nodes.size(), -1);
  for (std::size_t i = 0; i < net.nodes.size(); ++i) {
    const NetworkNode& n = net.nodes[i];
    std::vector<ValueId> in;
    for (int j : n.inputs) in.push_back(j < 0 ? x : out[j]);
    const std::string at = where + ": node '" + n.name + "' (" + network_op_name(n.op) + ")";
    try {
      out[i] = add_node(g, n, in, spec, at);
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
