#include "engine/graph/graph.h"

#include <cstdint>

#include "engine/base/error.h"
#include "engine/graph/graph_ops.h"
#include "engine/graph/op.h"

namespace crumb {
namespace {

// The largest element counts a value may have: a sample of a batched value (the kernels' shapes index one
// with int), and an unbatched (persistent) value, whose bytes summed over a whole model stay far inside
// 64 bits.
constexpr int64_t kMaxSampleCount = INT32_MAX, kMaxWholeCount = int64_t{1} << 48;

// What is wrong with v's size, or "" when nothing is: computed in 64 bits, with no step that can overflow.
std::string size_problem(const Value& v) {
  const int64_t limit = v.batched ? kMaxSampleCount : kMaxWholeCount;
  int64_t count = 1;
  double approx = 1;
  bool over = false;
  for (int64_t d : v.dims) {
    if (d < 0) return detail::concat("'", v.name, "' ", dims_str(v.dims), " has a negative size");
    approx *= double(d);
    over = over || (d > 0 && count > limit / d);
    if (!over) count *= d;
  }
  if (!over) return "";
  return detail::concat("'", v.name, "' would be ", v.batched ? "per-sample " : "", dims_str(v.dims), ", about ",
                        approx, " elements, more than the ", limit, v.batched ? " (2^31 - 1) a sample" : " (2^48) a value",
                        " may hold");
}

}  // namespace

DType Graph::dtype_of(OutDType t) const {
  switch (t) {
    case OutDType::Float: return float_dtype_;
    case OutDType::U8: return DType::U8;
    case OutDType::F64: return DType::F64;
    case OutDType::I64: return DType::I64;
    case OutDType::Master: return master_dtype();
  }
  return float_dtype_;
}

ValueId Graph::add_value(Value v) {
  const ValueId id = static_cast<ValueId>(values_.size());
  by_name_.emplace(v.name, id);
  values_.push_back(std::move(v));
  return id;
}

NodeId Graph::add_node(Node n) {
  CRUMB_CHECK(n.def, "node '", n.name, "' has no op");
  for (ValueId v : n.in)
    CRUMB_CHECK(v >= 0 && v < num_values(), "layer '", n.name, "' (", n.def->name, "): unknown input value ", v);
  const std::size_t declared = n.def->outputs.size(),
                    required = n.def->required_outputs ? n.def->required_outputs : declared;
  CRUMB_CHECK(n.out.size() >= required && n.out.size() <= declared, "layer '", n.name, "' (", n.def->name, "): ",
              n.out.size(), " outputs, the op has ", required, required == declared ? "" : " to ",
              required == declared ? "" : std::to_string(declared));
  for (size_t i = 0; i < n.out.size(); ++i) {
    CRUMB_CHECK(n.out[i] >= 0 && n.out[i] < num_values(), "layer '", n.name, "' (", n.def->name,
                "): unknown output value ", n.out[i]);
    const DType want = value(n.out[i]).kind == ValueKind::ParamGrad ? master_dtype() : dtype_of(n.def->outputs[i].dtype);
    CRUMB_CHECK(value(n.out[i]).dtype == want, "layer '", n.name, "' (", n.def->name, "): output '",
                value(n.out[i]).name, "' is ", dtype_name(value(n.out[i]).dtype), ", the op produces ",
                dtype_name(want));
  }
  const NodeId id = static_cast<NodeId>(nodes_.size());
  n.def->infer(*this, n);
  for (ValueId v : n.out) {
    const std::string problem = size_problem(value(v));
    if (problem.empty()) continue;
    std::string inputs;
    for (ValueId i : n.in)
      inputs += detail::concat(inputs.empty() ? "" : ", ", "'", value(i).name, "' ", dims_str(value(i).dims));
    ops::fail(n, detail::concat("output ", problem, " (check the layer's sizes, kernel, stride and padding against ",
                                "its inputs ", inputs, ")"));
  }
  if (n.def->view) values_.at(n.out.at(0)).view_of = n.in.at(0);
  for (ValueId v : n.out) {
    Value& val = values_.at(v);
    if (val.kind == ValueKind::Activation || val.kind == ValueKind::Metric) {
      CRUMB_CHECK(val.producer < 0, "value '", val.name, "' is produced twice");
      val.producer = id;
    }
  }
  nodes_.push_back(std::move(n));
  return id;
}

ValueId Graph::add_like(ValueId v, std::string name) {
  const Value& src = value(v);
  Value like;
  like.name = std::move(name);
  like.dtype = src.dtype;
  like.dims = src.dims;
  like.batched = src.batched;
  like.layout = src.layout;
  return add_value(std::move(like));
}

void Graph::reorder(const std::vector<NodeId>& order) {
  CRUMB_CHECK(order.size() == nodes_.size(), "reorder: ", order.size(), " node ids for ", nodes_.size(), " nodes");
  std::vector<NodeId> new_id(nodes_.size(), -1);
  for (std::size_t i = 0; i < order.size(); ++i) {
    CRUMB_CHECK(order[i] >= 0 && order[i] < num_nodes() && new_id[order[i]] < 0, "reorder: not a permutation");
    new_id[order[i]] = static_cast<NodeId>(i);
  }
  std::vector<Node> nodes;
  nodes.reserve(nodes_.size());
  for (NodeId id : order) {
    for (ValueId v : nodes_[id].in) {
      const NodeId p = values_[v].producer;
      CRUMB_CHECK(p < 0 || new_id[p] < static_cast<NodeId>(nodes.size()), "reorder: layer '", nodes_[id].name,
                  "' would run before '", nodes_[p].name, "', which computes its input '", values_[v].name, "'");
    }
    nodes.push_back(std::move(nodes_[id]));
  }
  nodes_ = std::move(nodes);
  for (Value& v : values_)
    if (v.producer >= 0) v.producer = new_id[v.producer];
}

void Graph::remove_nodes(const std::vector<NodeId>& ids) {
  std::vector<bool> removed(nodes_.size(), false);
  for (NodeId id : ids) {
    CRUMB_CHECK(id >= 0 && id < num_nodes(), "remove_nodes: no node ", id);
    removed[id] = true;
  }
  std::vector<NodeId> new_id(nodes_.size(), -1);
  std::vector<Node> nodes;
  for (NodeId id = 0; id < num_nodes(); ++id) {
    if (removed[id]) continue;
    for (ValueId v : nodes_[id].in) {
      const NodeId p = values_[v].producer;
      CRUMB_CHECK(p < 0 || !removed[p], "remove_nodes: layer '", nodes_[id].name, "' reads '", values_[v].name,
                  "', which removed layer '", nodes_[p].name, "' computes");
    }
    new_id[id] = static_cast<NodeId>(nodes.size());
    nodes.push_back(std::move(nodes_[id]));
  }
  nodes_ = std::move(nodes);
  for (Value& v : values_)
    if (v.producer >= 0) v.producer = new_id[v.producer];
}

ValueId Graph::apply(const OpDef& def, std::vector<ValueId> in, const std::string& name, std::any attrs) {
  CRUMB_CHECK(!in.empty(), "layer '", name, "' (", def.name, ") needs an input");
  Node n;
  n.def = &def;
  n.name = name;
  for (size_t i = 0; i < def.outputs.size(); ++i) {
    Value out;
    out.name = i ? name + ":" + std::to_string(i) : name;
    out.dtype = dtype_of(def.outputs[i].dtype);
    out.batched = value(in[0]).batched && !def.outputs[i].is_metric;
    if (def.outputs[i].is_metric) out.kind = ValueKind::Metric;
    for (ValueId v : in) out.requires_grad = out.requires_grad || (i == 0 && value(v).requires_grad);
    n.out.push_back(add_value(std::move(out)));
  }
  n.in = std::move(in);
  n.attrs = std::move(attrs);
  const ValueId y = n.out.at(0);
  add_node(std::move(n));
  return y;
}

ValueId Graph::input(const std::string& name, Dims per_sample, DType dtype, bool requires_grad) {
  Value v;
  v.name = name;
  v.kind = ValueKind::Input;
  v.dtype = dtype == DType::I32 ? DType::I32 : master_dtype();
  v.dims = std::move(per_sample);
  v.batched = true;
  v.requires_grad = requires_grad;
  const std::string problem = size_problem(v);
  CRUMB_CHECK(problem.empty(), "input ", problem);
  const ValueId id = add_value(std::move(v));
  inputs_.push_back(id);
  if (dtype == DType::I32 || !is_half(float_dtype_)) return id;
  return apply(kCast, {id}, name + ".cast");
}

ValueId Graph::state(const std::string& name, Dims dims, double fill, DType dtype) {
  CRUMB_CHECK(find_value(name) < 0, "duplicate state name '", name, "'");
  CRUMB_CHECK(dtype == DType::F32 || dtype == DType::I64, "state '", name, "' must be float or I64, got ",
              dtype_name(dtype));
  Value v;
  v.name = name;
  v.kind = ValueKind::State;
  v.dtype = dtype == DType::F32 ? master_dtype() : dtype;
  v.dims = std::move(dims);
  v.init.fill = fill;
  const std::string problem = size_problem(v);
  CRUMB_CHECK(problem.empty(), "state ", problem);
  const ValueId id = add_value(std::move(v));
  states_.push_back(id);
  return id;
}

ValueId Graph::param(const std::string& name, Dims dims, ParamInit init, ParamDType dtype) {
  CRUMB_CHECK(find_value(name) < 0, "duplicate parameter name '", name, "'");
  Value v;
  v.name = name;
  v.kind = ValueKind::Param;
  v.dtype = dtype == ParamDType::Compute ? float_dtype_ : master_dtype();
  v.dims = std::move(dims);
  v.requires_grad = true;
  v.init = init;
  const std::string problem = size_problem(v);
  CRUMB_CHECK(problem.empty(), "parameter ", problem, " (make the layer smaller)");
  const ValueId id = add_value(std::move(v));
  params_.push_back(id);
  return id;
}

ValueId Graph::find_value(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

ValueId Graph::storage_root(ValueId v) const {
  while (values_.at(v).view_of >= 0) v = values_[v].view_of;
  return v;
}

}  // namespace crumb
