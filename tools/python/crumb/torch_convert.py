"""from_torch: a torch.nn CNN built from Crumb's layers, with its weights, as a crumb.nn.Network.

The module is traced with torch.fx (symbolic_trace), so plain forward() code converts: the layers
Conv2d, BatchNorm2d, GroupNorm, ReLU, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Linear, Dropout,
Flatten and Identity, and the functions relu (F.relu, torch.relu, x.relu()), torch.flatten / x.flatten
/ x.view(x.size(0), -1) / x.reshape(x.size(0), -1), and + / += / torch.add between two tensors. Layers are
named by their module path, so the parameter names are the module's state_dict keys; functions by
torch.fx's node names. The first layer, function or setting Crumb cannot run is one error naming it.

torch is imported only when from_torch is called.
"""
import operator

from . import nn
from ._crumb import Error

__all__ = ["from_torch"]

_LAYERS = ("Conv2d, BatchNorm2d, GroupNorm, ReLU, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Linear, Dropout, "
           "Flatten, Identity; functions relu, flatten, view/reshape(x.size(0), -1), add")


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


def _convert_module(what, m, torch):
    """The description's op and attributes for a leaf module, or None for the identity."""
    tnn = torch.nn
    if isinstance(m, tnn.Conv2d):
        if m.groups != 1:
            _fail(what, f"groups={m.groups} (grouped or depthwise convolution) is not supported")
        if _square(what, "dilation", m.dilation) != 1:
            _fail(what, f"dilation={m.dilation} is not supported")
        if m.padding_mode != "zeros":
            _fail(what, f"padding_mode={m.padding_mode!r} is not supported (zeros only)")
        if isinstance(m.padding, str):
            if m.padding != "valid":
                _fail(what, f"padding={m.padding!r} is not supported (give the padding as an integer)")
            padding = 0
        else:
            padding = _square(what, "padding", m.padding)
        return "conv2d", dict(in_channels=m.in_channels, out_channels=m.out_channels,
                              kernel_size=_square(what, "kernel_size", m.kernel_size),
                              stride=_square(what, "stride", m.stride), padding=padding, bias=m.bias is not None)
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
    if isinstance(m, (tnn.MaxPool2d, tnn.AvgPool2d)):
        if m.ceil_mode:
            _fail(what, "ceil_mode=True is not supported")
        if isinstance(m, tnn.MaxPool2d):
            if _square(what, "dilation", m.dilation) != 1 or m.return_indices:
                _fail(what, "dilation and return_indices are not supported")
            op = "max_pool2d"
        else:
            if not m.count_include_pad or m.divisor_override is not None:
                _fail(what, "count_include_pad=False and divisor_override are not supported")
            op = "avg_pool2d"
        kernel = _square(what, "kernel_size", m.kernel_size)
        stride = kernel if m.stride is None else _square(what, "stride", m.stride)
        return op, dict(kernel_size=kernel, stride=stride, padding=_square(what, "padding", m.padding))
    if isinstance(m, tnn.AdaptiveAvgPool2d):
        size = m.output_size if isinstance(m.output_size, (tuple, list)) else (m.output_size, m.output_size)
        if any(s is None for s in size):
            _fail(what, f"output_size={m.output_size} with None is not supported")
        return "adaptive_avg_pool2d", dict(output_size=list(size))
    if isinstance(m, tnn.Linear):
        return "linear", dict(in_features=m.in_features, out_features=m.out_features, bias=m.bias is not None)
    if isinstance(m, tnn.Dropout):
        return "dropout", dict(p=float(m.p))
    if isinstance(m, tnn.Flatten):
        if m.start_dim != 1 or m.end_dim != -1:
            _fail(what, f"Flatten(start_dim={m.start_dim}, end_dim={m.end_dim}) is not supported (start_dim=1 only)")
        return "flatten", {}
    if isinstance(m, tnn.Identity):
        return None
    _fail(what, f"{type(m).__module__}.{type(m).__qualname__} is not supported (Crumb runs {_LAYERS})")


def _convert_function(node, torch, batch_sizes, arg):
    """(op, inputs) of a call_function or call_method node."""
    F = torch.nn.functional
    what = f"{node.op} {node.target if isinstance(node.target, str) else getattr(node.target, '__name__', node.target)}" \
           f" (node '{node.name}')"
    t, args, kwargs = node.target, node.args, dict(node.kwargs)
    kwargs.pop("inplace", None)
    if t in (F.relu, torch.relu, torch.relu_) or (node.op == "call_method" and t in ("relu", "relu_")):
        if len(args) != 1 or kwargs:
            _fail(what, "takes only the tensor")
        return "relu", [arg(args[0])]
    if t in (operator.add, operator.iadd, torch.add) or (node.op == "call_method" and t in ("add", "add_")):
        if len(args) != 2 or kwargs:
            _fail(what, "only the sum of two tensors is supported (no alpha, no scalars)")
        return "add", [arg(args[0]), arg(args[1])]
    if t is torch.flatten or (node.op == "call_method" and t == "flatten"):
        start = args[1] if len(args) > 1 else kwargs.pop("start_dim", 0)
        end = args[2] if len(args) > 2 else kwargs.pop("end_dim", -1)
        if start != 1 or end != -1 or kwargs:
            _fail(what, f"flatten(start_dim={start}, end_dim={end}) is not supported (start_dim=1 only)")
        return "flatten", [arg(args[0])]
    if node.op == "call_method" and t in ("view", "reshape"):
        shape = args[1:] if len(args) > 2 or not isinstance(args[1], (tuple, list)) else tuple(args[1])
        if len(shape) == 2 and shape[1] == -1 and batch_sizes.get(shape[0]) == args[0]:
            return "flatten", [arg(args[0])]
        _fail(what, f"{t} to {shape} is not supported (only x.{t}(x.size(0), -1))")
    _fail(what, f"is not supported (Crumb runs {_LAYERS})")


def from_torch(module, input_shape, name=None):
    """Converts `module` (a torch.nn.Module CNN over [batch, *input_shape] images, returning [batch, classes]
    scores) into a crumb.nn.Network with its weights (numpy float32, BatchNorm's running statistics and
    num_batches_tracked included). Raises crumb.Error naming the first layer or function Crumb cannot run."""
    import copy

    import numpy as np
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    if not isinstance(module, torch.nn.Module):
        raise Error(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise Error(f"from_torch: input_shape must be (channels, height, width), got {tuple(input_shape)}")
    try:
        traced = torch.fx.symbolic_trace(module)
    except Exception as e:  # torch.fx's errors name the Python construct it cannot trace
        raise Error(f"from_torch: torch.fx cannot trace {type(module).__name__}: {e}") from e
    # Values forward() computes but does not return are no part of the network.
    traced.graph.eliminate_dead_code()
    # The shapes of every value, from a forward pass of a copy in eval mode (the module stays untouched).
    probe = copy.deepcopy(traced).eval()
    with torch.no_grad():
        ShapeProp(probe).propagate(torch.zeros((2,) + shape))
    shapes = {n.name: getattr(n.meta.get("tensor_meta"), "shape", None) for n in probe.graph.nodes}

    desc = nn._Description()
    value = {}        # fx node -> the description's name of its value
    batch_sizes = {}  # fx node of x.size(0) -> x's fx node
    calls = {}        # module path -> times called
    used_params = set()
    output = None

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

    for node in traced.graph.nodes:
        if node.op == "placeholder":
            if "x" in value.values():
                _fail(f"input '{node.name}'", "the network must take one image tensor")
            value[node] = "x"
        elif node.op == "call_module":
            m = traced.get_submodule(node.target)
            what = f"layer '{node.target}' ({type(m).__name__})"
            converted = _convert_module(what, m, torch)
            if len(node.args) != 1 or node.kwargs:
                _fail(what, "must be called with the one tensor")
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
            if node.op == "call_method" and node.target == "size" and node.args[1:] in ((0,), ()) and not node.kwargs:
                if node.args[1:] == ():
                    _fail(f"call_method size (node '{node.name}')", "only x.size(0) is supported")
                batch_sizes[node] = node.args[0]
                continue
            if node.op == "call_function" and node.target is getattr and node.args[1:] == ("shape",):
                _fail(f"node '{node.name}'", "x.shape is not supported; flatten with torch.flatten(x, 1)")
            op, inputs = _convert_function(node, torch, batch_sizes, arg)
            value[node] = desc.add(unique(node.name), op, inputs)
        elif node.op == "get_attr":
            _fail(f"attribute '{node.target}' (node '{node.name}')", "parameters and buffers used directly in forward "
                  "are not supported; use the layers")
        elif node.op == "output":
            out = node.args[0]
            if not isinstance(out, torch.fx.Node):
                _fail("the output", "the network must return one tensor of class scores")
            output = arg(out)

    out_shape = shapes.get(next(n for n in traced.graph.nodes if n.op == "output").args[0].name)
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
