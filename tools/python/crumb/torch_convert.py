"""from_torch: a torch.nn CNN built from Crumb's layers, with its weights, as a crumb.nn.Network.

The module is traced with torch.fx (symbolic_trace), so plain forward() code converts:
- the torch.nn modules and functions that the engine's layers register (engine/ops/*_layer.cc, read through
  crumb._crumb.layers(): Conv2d with groups and padding="same", BatchNorm2d, GroupNorm, ReLU, LeakyReLU,
  ReLU6, Hardtanh, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Linear, Dropout; F.relu, torch.relu, x.relu(),
  F.max_pool2d, ...; F.dropout as `training` says when traced: dropped in evaluation, Crumb's way), each
  setting Crumb cannot run named; and Flatten, Unflatten, Identity, + / += / torch.add between two tensors;
- every view, reshape, flatten, squeeze and unsqueeze that keeps the batch first (x.view(-1, 9216),
  x.view(x.size(0), -1), torch.flatten(x, 1), x.reshape(...)): its per-sample shape comes from running
  the module at two batch sizes, so the size arithmetic around it (x.size(0), x.shape[1] * ...) is free;
- a log_softmax that gives the output (MNIST's `F.log_softmax(x, dim=1)` before `F.nll_loss`): Crumb's
  loss, softmax cross-entropy on the scores, is nll_loss on their log_softmax, so the network ends with
  the scores before it (predict returns those logits: the same argmax; log_softmax of them is the
  module's output).
Layers are named by their module path, so the parameter names are the module's state_dict keys; functions
by torch.fx's node names. The first layer, function or setting Crumb cannot run is one error naming it.

torch is imported only when from_torch is called.
"""
import ast
import inspect
import operator

from . import _crumb, nn
from ._crumb import Error

__all__ = ["from_torch"]

# The batch sizes the module runs at to tell per-sample shapes from the batch.
_BATCHES = (2, 3)


class _Unsupported(Error):
    pass


def _fail(what, why):
    raise _Unsupported(f"from_torch: {what}: {why}")


def _square(what, name, value):
    if isinstance(value, (tuple, list)):
        if len(set(value)) != 1:
            _fail(what, f"{name}={tuple(value)} is not square; Crumb's windows have one size in both directions")
        value = value[0]
    if not isinstance(value, int):
        _fail(what, f"{name}={value!r} is not supported (give an integer)")
    return value


def _sig_log_softmax(input, dim=None, _stacklevel=3, dtype=None): pass  # noqa: E704


def _bind(what, sig, args, kwargs):
    try:
        bound = inspect.signature(sig).bind(*args, **kwargs)
    except TypeError as e:
        _fail(what, f"arguments not understood ({e})")
    bound.apply_defaults()
    return bound.arguments


def _unsupported(attr, value, need):
    """Whether a setting fails a registration's requirement on it (TorchRequirement, engine/ops/layer.h)."""
    expected = ast.literal_eval(need["value"])
    values = value if isinstance(value, (tuple, list)) and not isinstance(expected, (tuple, list)) else (value,)
    if need["test"] == "==":
        return any(v != expected for v in values)
    if need["test"] == "!=":
        return any(v is expected or v == expected for v in values)
    return any(not v >= expected for v in values)


def _attrs(what, layer, settings):
    """The description's attributes of `layer` from a torch module's or function's settings (a dict: the
    module's attributes or the function's arguments), or a from_torch error naming `what`."""
    for need in layer["torch"]["needs"]:
        if need["attr"] in settings and _unsupported(need["attr"], settings[need["attr"]], need):
            message = need["message"]
            why = f"{need['attr']}={settings[need['attr']]!r} is not supported"
            _fail(what, f"{why} {message}" if message.startswith("(") else message or why)
    attrs, fields = {}, {f["name"]: f for f in layer["fields"]}
    for f in layer["fields"]:
        source = f["torch"] or f["name"]
        if source == "-":
            continue
        if source.startswith("present:"):
            if source[8:] in settings:
                attrs[f["name"]] = settings[source[8:]] is not None
            continue
        if source not in settings:
            continue
        value = settings[source]
        if f["same_as"] and (value is None or value in ((), [])):
            value = attrs[f["same_as"]]
        elif f["same_padding"] and value == "valid":
            value = 0
        elif f["same_padding"] and value == "same":
            try:
                value = nn._same_padding(layer["python"]["class"], attrs["kernel_size"])
            except Error as e:
                _fail(what, str(e).split(": ", 1)[1])
        if f["kind"] == "int":
            value = _square(what, f["name"], value) if f["square"] else value
        elif f["kind"] == "number":
            value = float(value)
        elif f["kind"] == "bool":
            value = bool(value)
        elif f["kind"] == "size2":
            size = value if isinstance(value, (tuple, list)) else (value, value)
            if any(v is None for v in size):
                _fail(what, f"{f['name']}={value} with None is not supported")
            value = list(size)
        else:
            value = list(value)
        attrs[f["name"]] = value
    return {k: v for k, v in attrs.items() if not (fields[k]["quiet"] and v == fields[k]["default"])}


class _Registry:
    """The registered layers by what from_torch meets: torch.nn module classes, functions and methods."""

    def __init__(self, torch):
        self.torch = torch
        self.modules, self.functions, self.methods = {}, {}, {}
        spaces = {"F": torch.nn.functional, "torch": torch}
        for layer in _crumb.layers():
            t = layer["torch"]
            if t["module"]:
                self.modules[getattr(torch.nn, t["module"])] = layer
            for name in t["functions"]:
                space, fn = name.split(".", 1)
                if space == "Tensor":
                    self.methods[fn] = layer
                elif getattr(spaces[space], fn, None) is not None:
                    self.functions[getattr(spaces[space], fn)] = layer

    def of_module(self, m):
        """The layer of a module: its class's, or the nearest torch.nn base's (ReLU6 is a Hardtanh)."""
        return next((self.modules[c] for c in type(m).__mro__ if c in self.modules), None)

    def names(self):
        modules = [c.__name__ for c in self.modules]
        functions = sorted({getattr(f, "__name__", str(f)).rstrip("_") for f in self.functions})
        return (", ".join(modules + ["Flatten", "Unflatten", "Identity", "a final LogSoftmax"]) + "; functions " +
                ", ".join(functions + ["view/reshape/flatten/squeeze/unsqueeze", "add", "a final log_softmax"]))


class _ModuleSettings:
    """A module's attributes (parameters included: bias) as _attrs reads settings."""

    def __init__(self, m):
        self.m = m

    def __contains__(self, name):
        return hasattr(self.m, name)

    def __getitem__(self, name):
        return getattr(self.m, name)


def _convert_module(what, m, registry):
    """The description's op and attributes for a leaf module, or None for the identity."""
    layer = registry.of_module(m)
    if layer is not None:
        return layer["name"], _attrs(what, layer, _ModuleSettings(m))
    if isinstance(m, registry.torch.nn.Identity):
        return None
    _fail(what, f"{type(m).__module__}.{type(m).__qualname__} is not supported (Crumb runs {registry.names()})")


def _is_reshape(node, torch):
    """view, reshape, flatten, squeeze, unsqueeze (as methods or torch functions), nn.Flatten, nn.Unflatten."""
    if node.op == "call_method":
        return node.target in ("view", "reshape", "flatten", "squeeze", "unsqueeze")
    if node.op == "call_function":
        return node.target in (torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze)
    return False


def _arguments(what, fn, layer, torch, args, kwargs):
    """A registered function's arguments by name: bound to its own signature, or, where Python cannot read
    it (builtins, torch's dispatchers), to its torch.nn module's constructor (else crumb.nn's) after the
    input."""
    try:
        sig = inspect.signature(fn)
        if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
            raise ValueError
    except (TypeError, ValueError):
        module = layer["torch"]["module"]
        own = inspect.signature(getattr(torch.nn, module) if module else getattr(nn, layer["python"]["class"]))
        sig = inspect.Signature([inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                 *own.parameters.values()])
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        _fail(what, f"arguments not understood ({e})")
    bound.apply_defaults()
    return bound.arguments


def _convert_function(node, what, registry):
    """(op, attrs, the input node) of a call_function or call_method node; op None: the identity."""
    torch = registry.torch
    t, args, kwargs = node.target, node.args, dict(node.kwargs)
    method = node.op == "call_method"
    layer = registry.methods.get(t) if method else registry.functions.get(t)
    if layer is not None:
        a = _arguments(what, None if method else t, layer, torch, args, kwargs)
        if a.get("training", True) is False:
            return None, {}, a["input"]  # dropout in evaluation: the identity, as Crumb evaluates
        return layer["name"], _attrs(what, layer, a), a["input"]
    if method and t == "contiguous" and len(args) == 1 and not kwargs:
        return None, {}, args[0]
    if t in (operator.add, operator.iadd, torch.add) or (method and t in ("add", "add_")):
        if len(args) != 2 or kwargs:
            _fail(what, "only the sum of two tensors is supported (no alpha, no scalars)")
        return "add", {}, args
    if t in (torch.nn.functional.softmax, torch.softmax) or (method and t == "softmax"):
        _fail(what, "softmax is not supported: Crumb's loss takes the scores (return them, or their log_softmax)")
    _fail(what, f"is not supported (Crumb runs {registry.names()})")


def _log_softmax_input(node, what, torch):
    """The input of a call_function or call_method node that is a log_softmax over the classes
    (F.log_softmax, torch.log_softmax, x.log_softmax), or None if it is none."""
    t = node.target
    if not (t in (torch.nn.functional.log_softmax, torch.log_softmax) or
            (node.op == "call_method" and t == "log_softmax")):
        return None
    a = _bind(what, _sig_log_softmax, node.args, dict(node.kwargs))
    if a["dim"] not in (1, -1) or a["dtype"] is not None:
        _fail(what, f"log_softmax(dim={a['dim']}, dtype={a['dtype']}) is not supported (dim=1 over the classes only)")
    return a["input"]


def _shapes(traced, shape, torch):
    """Every tensor value's shape at each of _BATCHES (fx node name -> tuple), from forward passes of a copy
    in eval mode (the module stays untouched), and the names of the nodes whose values hold tensors (the
    others compute sizes)."""
    import copy

    from torch.fx.passes.shape_prop import ShapeProp

    probe = copy.deepcopy(traced).eval()
    out = {}
    for batch in _BATCHES:
        try:
            with torch.no_grad():
                ShapeProp(probe).propagate(torch.zeros((batch,) + shape))
        except Exception as e:  # the module's own error on this input
            raise Error(f"from_torch: the module fails on a batch of {batch} images of shape {shape}: "
                        f"{type(e).__name__}: {e}".replace("\n", " ")) from e
        out[batch] = {n.name: tuple(n.meta["tensor_meta"].shape) for n in probe.graph.nodes
                      if hasattr(n.meta.get("tensor_meta"), "shape")}
    return out, {n.name for n in probe.graph.nodes if "tensor_meta" in n.meta}


def from_torch(module, input_shape, name=None):
    """Converts `module` (a torch.nn.Module CNN over [batch, *input_shape] images, returning [batch, classes]
    scores or their log_softmax) into a crumb.nn.Network with its weights (numpy float32, BatchNorm's running
    statistics and num_batches_tracked included). Raises crumb.Error naming the first layer or function Crumb
    cannot run."""
    import numpy as np
    import torch
    import torch.fx

    if not isinstance(module, torch.nn.Module):
        raise Error(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise Error(f"from_torch: input_shape must be (channels, height, width), got {tuple(input_shape)}")
    # Traced in training mode, as Crumb trains it: `training=self.training` reads True, a literal False stays.
    modes = [(m, m.training) for m in module.modules()]
    module.train()
    try:
        traced = torch.fx.symbolic_trace(module)
    except Exception as e:  # torch.fx's errors name the Python construct it cannot trace
        raise Error(f"from_torch: torch.fx cannot trace {type(module).__name__}: {e}") from e
    finally:
        for m, mode in modes:
            m.training = mode
    # Values forward() computes but does not return are no part of the network.
    traced.graph.eliminate_dead_code()
    shapes, tensors = _shapes(traced, shape, torch)

    registry = _Registry(torch)
    desc = nn._Description()
    value = {}        # fx node -> the description's name of its value
    calls = {}        # module path -> times called
    used_params = set()
    output_node = next(n for n in traced.graph.nodes if n.op == "output").args[0]

    def arg(a):
        if a not in value:
            _fail(f"node '{getattr(a, 'name', a)}'", "is not a tensor of the network (constants and parameters "
                  "used as values are not supported)")
        return value[a]

    def unique(base):
        name, i = base, 1
        while name in desc.names or name in ("x", "y", "loss"):
            name, i = f"{base}_{i}", i + 1
        return name

    def per_sample(node, what):
        """The node's per-sample shape, which must not depend on the batch."""
        s = [shapes[b].get(node.name) for b in _BATCHES]
        if any(d is None or len(d) < 2 or d[0] != b for d, b in zip(s, _BATCHES)) or s[0][1:] != s[1][1:]:
            _fail(what, f"mixes the batch into the other dims (it gives {s[0]} for a batch of {_BATCHES[0]} and "
                  f"{s[1]} for {_BATCHES[1]}); keep the batch first, as x.view(x.size(0), -1) or "
                  f"torch.flatten(x, 1) do")
        return s[0][1:]

    def reshape(node, what, source):
        dims = per_sample(node, what)
        if dims == per_sample(source, what):
            return arg(source)
        if len(dims) > 3:
            _fail(what, f"gives per-sample {list(dims)}; Crumb's values have 1 to 3 dims per sample")
        base = node.target if node.op == "call_module" else node.name
        if len(dims) == 1:
            return desc.add(unique(base), "flatten", [arg(source)])
        return desc.add(unique(base), "reshape", [arg(source)], shape=list(dims))

    for node in traced.graph.nodes:
        if node.op == "placeholder":
            if "x" in value.values():
                _fail(f"input '{node.name}'", "the network must take one image tensor")
            value[node] = "x"
        elif node.op == "call_module":
            m = traced.get_submodule(node.target)
            what = f"layer '{node.target}' ({type(m).__name__})"
            if len(node.args) != 1 or node.kwargs:
                _fail(what, "must be called with the one tensor")
            if isinstance(m, (torch.nn.Flatten, torch.nn.Unflatten)):
                value[node] = reshape(node, what, node.args[0])
                continue
            if isinstance(m, torch.nn.LogSoftmax):
                if m.dim not in (1, -1):
                    _fail(what, f"LogSoftmax(dim={m.dim}) is not supported (dim=1 over the classes only)")
                value[node] = arg(node.args[0])
                if node is not output_node:
                    _fail(what, "log_softmax is supported only where it gives the output (Crumb's loss applies "
                          "softmax cross-entropy to the scores, which is nll_loss on their log_softmax)")
                continue
            converted = _convert_module(what, m, registry)
            if converted is None:
                value[node] = arg(node.args[0])
                continue
            op, attrs = converted
            calls[node.target] = calls.get(node.target, 0) + 1
            if calls[node.target] > 1 and any(True for _ in m.parameters(recurse=False)):
                _fail(what, "is called twice (shared weights): each Crumb layer owns its weights; use two modules")
            node_name = node.target if calls[node.target] == 1 else unique(node.target)
            value[node] = desc.add(node_name, op, [arg(node.args[0])], **attrs)
            used_params.update(f"{node.target}.{k}" for k, _ in m.state_dict().items())
        elif node.op in ("call_function", "call_method"):
            target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", node.target)
            what = f"{node.op} {target} (node '{node.name}')"
            if node.name not in tensors:
                continue  # size arithmetic (x.size(0), x.shape[1] * 2): read only through the shapes
            if _is_reshape(node, torch):
                value[node] = reshape(node, what, node.args[0])
                continue
            source = _log_softmax_input(node, what, torch)
            if source is not None:
                value[node] = arg(source)
                if node is not output_node:
                    _fail(what, "log_softmax is supported only where it gives the output (Crumb's loss applies "
                          "softmax cross-entropy to the scores, which is nll_loss on their log_softmax)")
                continue
            op, attrs, inputs = _convert_function(node, what, registry)
            if op is None:
                value[node] = arg(inputs)
                continue
            inputs = inputs if isinstance(inputs, tuple) else (inputs,)
            value[node] = desc.add(unique(node.name), op, [arg(i) for i in inputs], **attrs)
        elif node.op == "get_attr":
            _fail(f"attribute '{node.target}' (node '{node.name}')", "parameters and buffers used directly in forward "
                  "are not supported; use the layers")

    if not hasattr(output_node, "op"):
        _fail("the output", "the network must return one tensor of class scores")
    output = arg(output_node)
    out_shape = shapes[_BATCHES[0]].get(output_node.name)
    if out_shape is None or len(out_shape) != 2:
        _fail("the output", f"must be [batch, classes] scores, got shape {tuple(out_shape or ())}")
    if output == "x":
        _fail("the output", "the network has no layers")
    description = {"name": name or type(module).__name__.lower(), "nodes": desc.nodes, "output": output}
    weights = {}
    for k, t in module.state_dict().items():
        if k in used_params:
            a = t.detach().cpu().numpy()
            weights[k] = a.astype(np.int64 if k.endswith("num_batches_tracked") else np.float32, copy=True)
    return nn.Network(description, weights, input_shape=shape, classes=int(out_shape[1]))
