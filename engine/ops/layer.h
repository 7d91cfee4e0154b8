// A layer a user can name: what a node of a network description (docs/networks.md) is, declared once
// beside its op family and registered from the family's file, as ops register their rows. The
// declaration says everything each front end needs: the description's op name and attributes (read and
// written by engine/train/network.cc), the checks across attributes, the builder from attributes to graph
// nodes, the crumb.nn class (its torch.nn-style constructor) and the from_torch mapping (the torch.nn
// module, the functions, the settings Crumb cannot run). The Python module reads the last two from
// layer_registry() (tools/python builds crumb.nn and from_torch from them), so nothing lists layers by hand.
//
//   CRUMB_ON_LOAD {
//     add_layer(Layer("dropout")
//                   .with_field(LayerField::number("p", 0.5))
//                   .with_check([](const LayerAttrs& a, const std::string& where) { ... })
//                   .with_build([](const LayerBuild& b) { return nn::dropout(b.g, b.in[0], b.attrs.number("p"), b.name); })
//                   .with_python("Dropout", "dropout", "p=0.5, inplace=False")
//                   .with_torch("Dropout", {"F.dropout"}));
//   }
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/ops/norm.h"

namespace crumb {

// One attribute of a layer in a description, in the order the canonical description writes them.
struct LayerField {
  enum class Kind {
    Int,     // an integer in [lo, kMaxInt]
    Number,  // a float
    Bool,
    Size2,   // an integer or [height, width]; written as [height, width]
    Dims,    // 1 to 3 positive integers (per-sample dims)
  };
  // The largest integer a description's field or size holds: far above any real layer, and small enough that
  // every shape product fits in 64 bits.
  static constexpr int kMaxInt = 1 << 24;
  std::string name;
  Kind kind = Kind::Int;
  bool required = false;
  double fallback = 0;   // Int, Number, Bool: the value when absent
  int lo = 0;            // Int: the least value
  bool stated = false;   // a size the node may state (checked against its input): written only when given
  bool optional = false;  // absent stays absent (written only when given); Python's default is None
  std::string same_as;   // Int: absent means the value of this earlier field (a pool's stride: its kernel)
  std::string word;      // Int: a word that may stand for 0 ("batch")
  bool square = false;   // Python and torch: a pair of equal integers reads as one (square windows)
  bool same_padding = false;  // Python and torch: "valid" (0) and "same" (the odd kernel's half) read too
  bool quiet = false;    // crumb.nn and from_torch leave it out at its default (a description reads the same)
  std::string torch;     // the torch module's attribute it comes from: "" the same name, "present:bias" whether
                         // that attribute is not None, "-" none (Crumb's own)

  static LayerField integer(std::string name, int lo, int fallback) {
    LayerField f;
    f.name = std::move(name), f.lo = lo, f.fallback = fallback;
    return f;
  }
  static LayerField number(std::string name, double fallback) {
    LayerField f;
    f.name = std::move(name), f.kind = Kind::Number, f.fallback = fallback;
    return f;
  }
  static LayerField boolean(std::string name, bool fallback) {
    LayerField f;
    f.name = std::move(name), f.kind = Kind::Bool, f.fallback = fallback;
    return f;
  }
  static LayerField of(std::string name, Kind kind) {
    LayerField f;
    f.name = std::move(name), f.kind = kind;
    return f;
  }
  LayerField needed() const { return with(&LayerField::required, true); }
  LayerField stated_size() const { return with(&LayerField::stated, true).with(&LayerField::lo, 1); }
  LayerField maybe() const { return with(&LayerField::optional, true); }
  LayerField square_window() const { return with(&LayerField::square, true); }
  LayerField or_same() const { return with(&LayerField::same_padding, true); }
  LayerField defaults_to(std::string field) const { return with(&LayerField::same_as, std::move(field)); }
  LayerField or_word(std::string w) const { return with(&LayerField::word, std::move(w)); }
  LayerField quiet_at_default() const { return with(&LayerField::quiet, true); }
  LayerField from_torch(std::string attr) const { return with(&LayerField::torch, std::move(attr)); }

 private:
  template <class T> LayerField with(T LayerField::*member, T value) const {
    LayerField f = *this;
    f.*member = std::move(value);
    return f;
  }
};

class Layer;

// A node's attributes, read and checked: one value per field of its layer.
class LayerAttrs {
 public:
  struct Entry {
    bool given = false;
    double number = 0;      // Int, Number, Bool
    std::vector<int> ints;  // Size2, Dims
  };
  LayerAttrs() = default;
  explicit LayerAttrs(const Layer* layer);

  const Layer& layer() const { return *layer_; }
  bool given(const std::string& field) const { return at(field).given; }
  int integer(const std::string& field) const { return static_cast<int>(at(field).number); }
  double number(const std::string& field) const { return at(field).number; }
  bool flag(const std::string& field) const { return at(field).number != 0; }
  const std::vector<int>& ints(const std::string& field) const { return at(field).ints; }
  Entry& entry(std::size_t i) { return entries_[i]; }
  const Entry& entry(std::size_t i) const { return entries_[i]; }

 private:
  const Entry& at(const std::string& field) const;
  const Layer* layer_ = nullptr;
  std::vector<Entry> entries_;
};

// What a builder gets: the graph, the node's inputs (their per-sample shapes already there), its attributes,
// its name (the parameters' prefix), `where` (the network and node, for errors) and the run's BatchNorm
// settings (group, statistics), which a node's own attributes override.
struct LayerBuild {
  Graph& g;
  const std::vector<ValueId>& in;
  const LayerAttrs& attrs;
  const std::string& name;
  const std::string& where;
  const BatchNormAttrs& run_bn;
};

// A condition on a torch module's (or function's) setting that Crumb needs; else from_torch fails with
// "<attr>=<value> is not supported", followed by `message` where it is in parentheses, else replaced by it.
// `value` is a Python literal; `test` is "==", "!=" or ">=".
struct TorchRequirement {
  std::string attr, test, value, message;
};

class Layer {
 public:
  using Check = std::function<void(const LayerAttrs&, const std::string& where)>;
  using Build = std::function<ValueId(const LayerBuild&)>;

  explicit Layer(std::string name) : name_(std::move(name)) {}
  Layer with_field(LayerField f) const { return with(&Layer::fields_, append(fields_, std::move(f))); }
  Layer with_inputs(int n) const { return with(&Layer::inputs_, n); }
  Layer with_check(Check c) const { return with(&Layer::check_, std::move(c)); }
  Layer with_build(Build b) const { return with(&Layer::build_, std::move(b)); }
  // The layer takes the run's BatchNorm settings (so the run takes --bn-group).
  Layer with_run_bn() const { return with(&Layer::run_bn_, true); }
  // crumb.nn's class: its name, the name of a lone layer's node, the constructor's parameters as Python
  // writes them (torch.nn's; a parameter that is no field, as inplace, is accepted and kept), a docstring.
  Layer with_python(std::string cls, std::string node_name, std::string signature, std::string doc = "") const;
  // from_torch: the torch.nn module class it converts, the functions that compute the same ("F.relu":
  // torch.nn.functional's, "torch.relu", "Tensor.relu": the method), read with their own signature or else the
  // module's, and what Crumb needs of their settings.
  Layer with_torch(std::string module, std::vector<std::string> functions,
                   std::vector<TorchRequirement> needs = {}) const;

  const std::string& name() const { return name_; }
  const std::vector<LayerField>& fields() const { return fields_; }
  int inputs() const { return inputs_; }
  bool takes_run_bn() const { return run_bn_; }
  int field_index(const std::string& field) const;  // -1: none
  void check(const LayerAttrs& a, const std::string& where) const {
    if (check_) check_(a, where);
  }
  ValueId build(const LayerBuild& b) const;
  const std::string& python_class() const { return py_class_; }
  const std::string& python_node_name() const { return py_node_; }
  const std::string& python_signature() const { return py_signature_; }
  const std::string& python_doc() const { return py_doc_; }
  const std::string& torch_module() const { return torch_module_; }
  const std::vector<std::string>& torch_functions() const { return torch_functions_; }
  const std::vector<TorchRequirement>& torch_needs() const { return torch_needs_; }

 private:
  template <class T> Layer with(T Layer::*member, T value) const {
    Layer l = *this;
    l.*member = std::move(value);
    return l;
  }
  template <class T> static std::vector<T> append(std::vector<T> v, T x) {
    v.push_back(std::move(x));
    return v;
  }

  std::string name_;
  std::vector<LayerField> fields_;
  int inputs_ = 1;
  bool run_bn_ = false;
  Check check_;
  Build build_;
  std::string py_class_, py_node_, py_signature_, py_doc_;
  std::string torch_module_;
  std::vector<std::string> torch_functions_;
  std::vector<TorchRequirement> torch_needs_;
};

// Adds a layer (from its family's CRUMB_ON_LOAD); a second layer of the same name is an error.
void add_layer(Layer layer);
// Every layer, in the order they registered.
const std::vector<Layer>& layer_registry();
// The layer named `name`, or nullptr.
const Layer* find_layer(const std::string& name);

// The size a node states for its input (`field`, 0 or absent: not stated), checked against the input's
// dims, which must have `rank` per-sample dims: channels (rank 3) or features (rank 1).
void check_stated_size(const LayerBuild& b, const char* field, std::size_t rank);

}  // namespace crumb
