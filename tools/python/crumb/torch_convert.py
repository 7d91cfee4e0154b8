"""from_torch: a torch.nn CNN built from Crumb's layers, with its weights, as a crumb.nn.Network.

The module is traced with torch.fx (symbolic_trace), so plain forward() code converts:
- the layers Conv2d (groups, padding="same"), BatchNorm2d, GroupNorm, ReLU, LeakyReLU, ReLU6, Hardtanh,
  MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Linear, Dropout, Flatten, Unflatten and Identity;
- the functions relu, leaky_relu, relu6, hardtanh (F.*, torch.*, x.relu()), max_pool2d, avg_pool2d,
  adaptive_avg_pool2d, dropout (as `training` says when traced: dropped in evaluation, Crumb's way), and
  + / += / torch.add between two tensors;
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
import inspect
import operator

from . import nn
from ._crumb import Error

__all__ = ["from_torch"]

_LAYERS = ("Conv2d, BatchNorm2d, GroupNorm, ReLU, LeakyReLU, ReLU6, Hardtanh, MaxPool2d, AvgPool2d, "
           "AdaptiveAvgPool2d, Linear, Dropout, Flatten, Unflatten, Identity, a final LogSoftmax; functions relu, "
           "leaky_relu, relu6, hardtanh, max_pool2d, avg_pool2d, adaptive_avg_pool2d, dropout, view/reshape/"
           "flatten/squeeze/unsqueeze, add, a final log_softmax")

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


# The functions' signatures, to read their arguments however they were passed.
def _sig_unary(input, inplace=False): pass  # noqa: E704
def _sig_leaky_relu(input, negative_slope=0.01, inplace=False): pass  # noqa: E704
def _sig_hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False): pass  # noqa: E704
def _sig_dropout(input, p=0.5, training=True, inplace=False): pass  # noqa: E704
def _sig_max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: E704
                    return_indices=False): pass
def _sig_avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: E704
                    divisor_override=None): pass
def _sig_adaptive(input, output_size): pass  # noqa: E704
def _sig_log_softmax(input, dim=None, _stacklevel=3, dtype=None): pass  # noqa: E704


def _bind(what, sig, args, kwargs):
    try:
        bound = inspect.signature(sig).bind(*args, **kwargs)
    except TypeError as e:
        _fail(what, f"arguments not understood ({e})")
    bound.apply_defaults()
    return bound.arguments


def _pool(what, op, kernel_size, stride, padding, ceil_mode, dilation=1, return_indices=False,
          count_include_pad=True, divisor_override=None):
    if ceil_mode:
        _fail(what, "ceil_mode=True is not supported")
    if _square(what, "dilation", dilation) != 1 or return_indices:
        _fail(what, "dilation and return_indices are not supported")
    if not count_include_pad or divisor_override is not None:
        _fail(what, "count_include_pad=False and divisor_override are not supported")
    kernel = _square(what, "kernel_size", kernel_size)
    stride = kernel if stride is None or stride in ((), []) else _square(what, "stride", stride)
    return op, dict(kernel_size=kernel, stride=stride, padding=_square(what, "padding", padding))


def _adaptive(what, output_size):
    size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    if any(s is None for s in size):
        _fail(what, f"output_size={output_size} with None is not supported")
    return "adaptive_avg_pool2d", dict(output_size=list(size))


def _leaky_relu(what, slope):
    if not slope >= 0:
        _fail(what, f"negative_slope={slope} is not supported (>= 0 only)")
    return "leaky_relu", dict(negative_slope=float(slope))


def _hardtanh(min_val, max_val):
    if (min_val, max_val) == (0, 6):
        return "relu6", {}
    return "hardtanh", dict(min_val=float(min_val), max_val=float(max_val))


def _conv_padding(what, m):
    if m.padding == "valid":
        return 0
    if m.padding == "same":
        kernel = _square(what, "kernel_size", m.kernel_size)
        try:
            return nn._same_padding("Conv2d", kernel)
        except Error as e:
            _fail(what, str(e).split(": ", 1)[1])
    return _square(what, "padding", m.padding)


def _convert_module(what, m, torch):
    """The description's op and attributes for a leaf module, or None for the identity."""
    tnn = torch.nn
    if isinstance(m, tnn.Conv2d):
        if _square(what, "dilation", m.dilation) != 1:
            _fail(what, f"dilation={m.dilation} is not supported")
        if m.padding_mode != "zeros":
            _fail(what, f"padding_mode={m.padding_mode!r} is not supported (zeros only)")
        attrs = dict(in_channels=m.in_channels, out_channels=m.out_channels,
                     kernel_size=_square(what, "kernel_size", m.kernel_size),
                     stride=_square(what, "stride", m.stride), padding=_conv_padding(what, m), bias=m.bias is not None)
        if m.groups != 1:
            attrs["groups"] = m.groups
        return "conv2d", attrs
    if isinstance(m, tnn.BatchNorm2d):
        if not m.affine or not m.track_running_stats:
            _fail(what, "BatchNorm2d without affine or track_running_stats is not supported")
        if m.momentum is None:
            _fail(what, "momentum=None (a cumulative average) is not supported; give a momentum")
        return "batch_norm2d", dict(num_features=m.num_features, eps=float(m.eps), momentum=float(m.momentum))
    if isinstance(m, tnn.GroupNorm):
        if not m.affine:
            _fail(what, "GroupNorm without affine is not supported")
        return "group_norm", dict(num_groups=m.num_groups, num_channels=m.num_channels, eps=float(m.eps))
    if isinstance(m, tnn.ReLU):
        return "relu", {}
    if isinstance(m, tnn.LeakyReLU):
        return _leaky_relu(what, m.negative_slope)
    if isinstance(m, tnn.Hardtanh):  # ReLU6 is a Hardtanh(0, 6)
        return _hardtanh(m.min_val, m.max_val)
    if isinstance(m, tnn.MaxPool2d):
        return _pool(what, "max_pool2d", m.kernel_size, m.stride, m.padding, m.ceil_mode, m.dilation,
                     m.return_indices)
    if isinstance(m, tnn.AvgPool2d):
        return _pool(what, "avg_pool2d", m.kernel_size, m.stride, m.padding, m.ceil_mode,
                     count_include_pad=m.count_include_pad, divisor_override=m.divisor_override)
    if isinstance(m, tnn.AdaptiveAvgPool2d):
        return _adaptive(what, m.output_size)
    if isinstance(m, tnn.Linear):
        return "linear", dict(in_features=m.in_features, out_features=m.out_features, bias=m.bias is not None)
    if isinstance(m, tnn.Dropout):
        return "dropout", dict(p=float(m.p))
    if isinstance(m, tnn.Identity):
        return None
    _fail(what, f"{type(m).__module__}.{type(m).__qualname__} is not supported (Crumb runs {_LAYERS})")


def _is_reshape(node, torch):
    """view, reshape, flatten, squeeze, unsqueeze (as methods or torch functions), nn.Flatten, nn.Unflatten."""
    if node.op == "call_method":
        return node.target in ("view", "reshape", "flatten", "squeeze", "unsqueeze")
    if node.op == "call_function":
        return node.target in (torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze)
    return False


def _convert_function(node, what, torch):
    """(op, attrs, the input node) of a call_function or call_method node; op None: the identity."""
    F = torch.nn.functional
    t, args, kwargs = node.target, node.args, dict(node.kwargs)
    method = node.op == "call_method"

    def bind(sig):
        return _bind(what, sig, args, kwargs)

    if t in (F.relu, F.relu_, torch.relu, torch.relu_) or (method and t in ("relu", "relu_")):
        return "relu", {}, bind(_sig_unary)["input"]
    if t in (F.leaky_relu, F.leaky_relu_):
        a = bind(_sig_leaky_relu)
        return (*_leaky_relu(what, a["negative_slope"]), a["input"])
    if t is F.relu6:
        return "relu6", {}, bind(_sig_unary)["input"]
    if t in (F.hardtanh, F.hardtanh_):
        a = bind(_sig_hardtanh)
        return (*_hardtanh(a["min_val"], a["max_val"]), a["input"])
    if t in (F.max_pool2d, torch.max_pool2d):
        a = bind(_sig_max_pool2d)
        return (*_pool(what, "max_pool2d", a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"], a["dilation"],
                       a["return_indices"]), a["input"])
    if t is F.avg_pool2d:
        a = bind(_sig_avg_pool2d)
        return (*_pool(what, "avg_pool2d", a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"],
                       count_include_pad=a["count_include_pad"], divisor_override=a["divisor_override"]), a["input"])
    if t is F.adaptive_avg_pool2d:
        a = bind(_sig_adaptive)
        return (*_adaptive(what, a["output_size"]), a["input"])
    if t is F.dropout:
        a = bind(_sig_dropout)
        return ("dropout", dict(p=float(a["p"])), a["input"]) if a["training"] else (None, {}, a["input"])
    if method and t == "contiguous" and len(args) == 1 and not kwargs:
        return None, {}, args[0]
    if t in (operator.add, operator.iadd, torch.add) or (method and t in ("add", "add_")):
        if len(args) != 2 or kwargs:
            _fail(what, "only the sum of two tensors is supported (no alpha, no scalars)")
        return "add", {}, args
    if t in (F.softmax, torch.softmax) or (method and t == "softmax"):
        _fail(what, "softmax is not supported: Crumb's loss takes the scores (return them, or their log_softmax)")
    _fail(what, f"is not supported (Crumb runs {_LAYERS})")


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
            converted = _convert_module(what, m, torch)
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
            op, attrs, inputs = _convert_function(node, what, torch)
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
