#include "engine/error.h"
#include "engine/ops/op.h"

namespace crumb::ops {

void fail(const Node& n, const std::string& message) {
  CRUMB_FAIL("layer '", n.name, "' (", n.def->name, "): ", message);
}

void expect_arity(const Node& n, size_t lo, size_t hi, size_t outs) {
  if (n.in.size() < lo || n.in.size() > hi || n.out.size() != outs)
    fail(n, detail::concat("expects ", lo, lo == hi ? "" : detail::concat("..", hi), " inputs and ", outs,
                           " outputs, got ", n.in.size(), " and ", n.out.size()));
}

void set_out_dims(Graph& g, const Node& n, int i, const Dims& dims) {
  Value& v = g.value(n.out.at(i));
  if (v.dims.empty() && v.producer < 0 && v.kind == ValueKind::Activation) {
    v.dims = dims;
    return;
  }
  if (v.dims != dims)
    fail(n, detail::concat("output '", v.name, "' has shape ", dims_str(v.dims), " but the op produces ",
                           dims_str(dims)));
}

}  // namespace crumb::ops
