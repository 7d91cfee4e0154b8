"""Networks of your own, written like torch.nn: the layers of Crumb's op set under torch.nn's names and
arguments, composed with Sequential and Residual. A network is data: ``to_json()`` gives its description
(docs/networks.md), which ``train --model-file`` and ``crumb.plan`` / ``crumb.Trainer`` take, and every
layer's parameters are named as PyTorch's state_dict names them ("features.0.weight", "bn1.running_mean").

    from crumb import nn
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Residual(nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    plan = net.plan(input=(3, 32, 32), batch=256, memory_budget="1GiB")

This module needs neither numpy nor the compiled binding to build descriptions; plan() and trainer()
import the binding when called.
"""
from collections import OrderedDict
import json

from ._crumb import Error

__all__ = [
    "Module", "Network", "Conv2d", "BatchNorm2d", "GroupNorm", "ReLU", "LeakyReLU", "ReLU6", "Hardtanh", "MaxPool2d",
    "AvgPool2d", "AdaptiveAvgPool2d", "Linear", "Dropout", "Flatten", "Sequential", "Residual",
]


def _square(layer, what, value):
    """An int, or a pair of equal ints (Crumb's windows are square)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or value[0] != value[1]:
            raise Error(f"{layer}: {what}={tuple(value)!r}: Crumb's windows are square; give one integer "
                             f"(or a pair of equal ones)")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int):
        raise Error(f"{layer}: {what} must be an integer, got {value!r}")
    return value


def _same_padding(layer, kernel_size, stride=1, dilation=1):
    """The symmetric padding of torch's padding="same" (stride 1, an odd kernel): (kernel_size - 1) / 2. An even
    kernel pads one more after than before, which Crumb's symmetric padding cannot express: an error."""
    if stride != 1 or dilation != 1:
        raise Error(f"{layer}: padding='same' needs stride 1 and dilation 1 (as in torch), got stride={stride!r}, "
                    f"dilation={dilation!r}")
    if kernel_size % 2 == 0:
        raise Error(f"{layer}: padding='same' with the even kernel_size {kernel_size} pads {kernel_size // 2 - 1} "
                    f"before and {kernel_size // 2} after; Crumb pads both sides alike: use an odd kernel or an "
                    f"integer padding")
    return (kernel_size - 1) // 2


def _count(layer, what, value, low=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise Error(f"{layer}: {what} must be an integer >= {low}, got {value!r}")
    return value


class _Description:
    """The nodes of a description as they are emitted, each with a unique name."""

    def __init__(self):
        self.nodes = []
        self.names = set()

    def add(self, name, op, inputs, **attrs):
        if name in self.names or name in ("x", "y", "loss"):
            raise Error(f"two layers would be named {name!r}; name the modules apart")
        self.names.add(name)
        self.nodes.append(dict(name=name, op=op, inputs=list(inputs), **attrs))
        return name


def _join(prefix, name):
    return f"{prefix}.{name}" if prefix else name


class Module:
    """The base of every layer and network. A layer emits its node(s) under its path in the network
    (``_emit``); the whole network gives its description (``to_json``) and, for the Python module,
    ``_crumb_network()`` -> (description text, weights or None)."""

    #: the node's name when the layer is the whole network (torch's names would then have no prefix)
    _default_name = "layer"

    def _emit(self, desc, prefix, x):
        raise NotImplementedError

    def named_modules(self, prefix=""):
        """(path, module) for this module and everything under it, as torch.nn.Module.named_modules."""
        yield prefix, self
        for name, child in self._named_children():
            yield from child.named_modules(_join(prefix, name))

    def _named_children(self):
        return iter(())

    def description(self, name=None):
        """The description as a dict (what to_json writes)."""
        desc = _Description()
        out = self._emit(desc, "", "x")
        if not desc.nodes:
            raise Error("the network has no layers")
        return {"name": name or type(self).__name__.lower(), "nodes": desc.nodes, "output": out}

    def to_json(self, name=None, indent=None):
        """The network's description (docs/networks.md) as JSON text: what train --model-file reads."""
        return json.dumps(self.description(name), indent=indent, ensure_ascii=False)

    def _crumb_network(self):
        """What crumb.plan and crumb.Trainer take as a model: (description text, weights by parameter name as
        numpy arrays, or None to start from Crumb's initialisation)."""
        return self.to_json(), None

    def plan(self, **kwargs):
        """crumb.plan(model=self, **kwargs)."""
        import crumb
        return crumb.plan(model=self, **kwargs)

    def trainer(self, **kwargs):
        """crumb.Trainer(model=self, **kwargs)."""
        import crumb
        return crumb.Trainer(model=self, **kwargs)

    def __repr__(self):
        inner = [f"  ({name}): " + repr(child).replace("\n", "\n  ") for name, child in self._named_children()]
        head = f"{type(self).__name__}({self._extra_repr()}"
        return head + ("\n" + "\n".join(inner) + "\n)" if inner else ")")

    def _extra_repr(self):
        return ""


class _Layer(Module):
    """One node of an op, with its attributes."""

    _op = ""

    def _attrs(self):
        return {}

    def _emit(self, desc, prefix, x):
        return desc.add(prefix or self._default_name, self._op, [x], **self._attrs())

    def _extra_repr(self):
        return ", ".join(f"{k}={v!r}" for k, v in self._attrs().items())


class Conv2d(_Layer):
    """torch.nn.Conv2d's arguments: padding an integer, "valid" (0) or "same" (stride 1, odd kernels); groups
    divides both channel counts (groups=in_channels: depthwise)."""

    _op, _default_name = "conv2d", "conv"

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, groups=1):
        self.in_channels = _count("Conv2d", "in_channels", in_channels)
        self.out_channels = _count("Conv2d", "out_channels", out_channels)
        self.kernel_size = _count("Conv2d", "kernel_size", _square("Conv2d", "kernel_size", kernel_size))
        self.stride = _count("Conv2d", "stride", _square("Conv2d", "stride", stride))
        if padding == "valid":
            padding = 0
        elif padding == "same":
            padding = _same_padding("Conv2d", self.kernel_size, self.stride)
        self.padding = _count("Conv2d", "padding", _square("Conv2d", "padding", padding), 0)
        self.bias = bool(bias)
        self.groups = _count("Conv2d", "groups", groups)
        if in_channels % groups or out_channels % groups:
            raise Error(f"Conv2d: groups {groups} must divide in_channels {in_channels} and out_channels "
                        f"{out_channels}")

    def _attrs(self):
        a = dict(in_channels=self.in_channels, out_channels=self.out_channels, kernel_size=self.kernel_size,
                 stride=self.stride, padding=self.padding, bias=self.bias)
        if self.groups != 1:
            a["groups"] = self.groups
        return a


class BatchNorm2d(_Layer):
    """BatchNorm over groups of `group` samples (docs/normalization.md): None takes the run's --bn-group,
    "batch" normalises the whole batch (PyTorch's semantics, one micro-batch)."""

    _op, _default_name = "batch_norm2d", "bn"

    def __init__(self, num_features, eps=1e-5, momentum=0.1, group=None):
        self.num_features = _count("BatchNorm2d", "num_features", num_features)
        self.eps, self.momentum = float(eps), float(momentum)
        if not (self.eps > 0 and 0 <= self.momentum <= 1):
            raise Error(f"BatchNorm2d: eps must be > 0 and momentum in [0, 1], got {eps!r}, {momentum!r}")
        if group is not None and group != "batch":
            _count("BatchNorm2d", "group", group)
        self.group = group

    def _attrs(self):
        a = dict(num_features=self.num_features, eps=self.eps, momentum=self.momentum)
        if self.group is not None:
            a["group"] = self.group
        return a


class GroupNorm(_Layer):
    _op, _default_name = "group_norm", "gn"

    def __init__(self, num_groups, num_channels, eps=1e-5):
        self.num_groups = _count("GroupNorm", "num_groups", num_groups)
        self.num_channels = _count("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise Error(f"GroupNorm: num_groups {num_groups} does not divide num_channels {num_channels}")
        self.eps = float(eps)

    def _attrs(self):
        return dict(num_groups=self.num_groups, num_channels=self.num_channels, eps=self.eps)


class ReLU(_Layer):
    _op, _default_name = "relu", "relu"

    def __init__(self, inplace=False):
        self.inplace = inplace  # accepted as torch does; Crumb's planner places ReLU in place itself


class LeakyReLU(_Layer):
    _op, _default_name = "leaky_relu", "relu"

    def __init__(self, negative_slope=0.01, inplace=False):
        if isinstance(negative_slope, bool) or not isinstance(negative_slope, (int, float)) or \
                not 0 <= negative_slope < float("inf"):
            raise Error(f"LeakyReLU: negative_slope must be a finite number >= 0, got {negative_slope!r}")
        self.negative_slope, self.inplace = float(negative_slope), inplace

    def _attrs(self):
        return dict(negative_slope=self.negative_slope)


class Hardtanh(_Layer):
    """min(max(x, min_val), max_val)."""

    _op, _default_name = "hardtanh", "hardtanh"

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (min_val, max_val))
        if not ok or not float("-inf") < min_val < max_val < float("inf"):
            raise Error(f"Hardtanh: min_val must be below max_val (finite numbers), got {min_val!r}, {max_val!r}")
        self.min_val, self.max_val, self.inplace = float(min_val), float(max_val), inplace

    def _attrs(self):
        return dict(min_val=self.min_val, max_val=self.max_val)


class ReLU6(_Layer):
    """min(max(x, 0), 6), as MobileNet uses."""

    _op, _default_name = "relu6", "relu"

    def __init__(self, inplace=False):
        self.inplace = inplace


class _Pool(_Layer):
    def __init__(self, kernel_size, stride=None, padding=0):
        name = type(self).__name__
        self.kernel_size = _count(name, "kernel_size", _square(name, "kernel_size", kernel_size))
        self.stride = self.kernel_size if stride is None else _count(name, "stride", _square(name, "stride", stride))
        self.padding = _count(name, "padding", _square(name, "padding", padding), 0)

    def _attrs(self):
        return dict(kernel_size=self.kernel_size, stride=self.stride, padding=self.padding)


class MaxPool2d(_Pool):
    _op, _default_name = "max_pool2d", "maxpool"


class AvgPool2d(_Pool):
    """Average pooling with PyTorch's defaults (count_include_pad=True)."""

    _op, _default_name = "avg_pool2d", "avgpool"


class AdaptiveAvgPool2d(_Layer):
    _op, _default_name = "adaptive_avg_pool2d", "avgpool"

    def __init__(self, output_size):
        size = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size, output_size)
        if len(size) != 2:
            raise Error(f"AdaptiveAvgPool2d: output_size must be an integer or (height, width), got {output_size!r}")
        self.output_size = tuple(_count("AdaptiveAvgPool2d", "output_size", s) for s in size)

    def _attrs(self):
        return dict(output_size=list(self.output_size))


class Linear(_Layer):
    _op, _default_name = "linear", "fc"

    def __init__(self, in_features, out_features, bias=True):
        self.in_features = _count("Linear", "in_features", in_features)
        self.out_features = _count("Linear", "out_features", out_features)
        self.bias = bool(bias)

    def _attrs(self):
        return dict(in_features=self.in_features, out_features=self.out_features, bias=self.bias)


class Dropout(_Layer):
    _op, _default_name = "dropout", "dropout"

    def __init__(self, p=0.5, inplace=False):
        if not 0 <= p < 1:
            raise Error(f"Dropout: p must be in [0, 1), got {p!r}")
        self.p, self.inplace = float(p), inplace

    def _attrs(self):
        return dict(p=self.p)


class Flatten(_Layer):
    """torch.nn.Flatten() with its defaults (start_dim=1): [batch, ...] -> [batch, features]."""

    _op, _default_name = "flatten", "flatten"


class Sequential(Module):
    """Modules applied in order, named "0", "1", ... or by an OrderedDict's keys, as torch.nn.Sequential."""

    def __init__(self, *modules):
        if len(modules) == 1 and isinstance(modules[0], (OrderedDict, dict)):
            items = list(modules[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(modules)]
        for name, m in items:
            if not isinstance(m, Module):
                raise Error(f"Sequential: {name!r} is {type(m).__name__}, not a crumb.nn module")
            if not name or "." in name:
                raise Error(f"Sequential: module name {name!r} must be non-empty and without '.'")
        self._items = OrderedDict(items)

    def _named_children(self):
        return iter(self._items.items())

    def __getitem__(self, i):
        return list(self._items.values())[i] if isinstance(i, int) else self._items[i]

    def __len__(self):
        return len(self._items)

    def _emit(self, desc, prefix, x):
        for name, m in self._items.items():
            x = m._emit(desc, _join(prefix, name), x)
        return x


class Residual(Module):
    """body(x) + shortcut(x) (the identity when shortcut is None): a residual block. Its parts are named
    "body" and "shortcut", the sum "<path>.add"."""

    def __init__(self, body, shortcut=None):
        for what, m in (("body", body), ("shortcut", shortcut)):
            if m is not None and not isinstance(m, Module):
                raise Error(f"Residual: {what} is {type(m).__name__}, not a crumb.nn module")
        self.body, self.shortcut = body, shortcut

    def _named_children(self):
        yield "body", self.body
        if self.shortcut is not None:
            yield "shortcut", self.shortcut

    def _emit(self, desc, prefix, x):
        a = self.body._emit(desc, _join(prefix, "body"), x)
        b = self.shortcut._emit(desc, _join(prefix, "shortcut"), x) if self.shortcut is not None else x
        return desc.add(_join(prefix, "add"), "add", [a, b])


class Network(Module):
    """A description with its weights (what crumb.from_torch returns). `weights`: parameter name -> numpy
    array (torch's state_dict names), or None. `input_shape` (channels, height, width) and `classes`, where
    known, are the shapes it was converted for."""

    def __init__(self, description, weights=None, input_shape=None, classes=None):
        self._description = json.loads(description) if isinstance(description, str) else dict(description)
        self.weights = weights
        self.input_shape = tuple(input_shape) if input_shape is not None else None
        self.classes = classes

    def description(self, name=None):
        d = dict(self._description)
        if name:
            d["name"] = name
        return d

    def _crumb_network(self):
        return self.to_json(), self.weights

    def plan(self, **kwargs):
        """crumb.plan(model=self, **kwargs), for the input shape and classes it was converted for unless given."""
        if self.input_shape is not None:
            kwargs.setdefault("input", self.input_shape)
        if self.classes is not None:
            kwargs.setdefault("classes", self.classes)
        return super().plan(**kwargs)

    def trainer(self, **kwargs):
        """crumb.Trainer(model=self, **kwargs), for the classes it was converted for unless given."""
        if self.classes is not None:
            kwargs.setdefault("classes", self.classes)
        return super().trainer(**kwargs)

    def state_dict(self):
        """The weights by torch's names (numpy arrays), as converted."""
        return dict(self.weights or {})

    def __repr__(self):
        d = self._description
        return f"Network({d.get('name', 'network')!r}, {len(d.get('nodes', []))} layers, weights={self.weights is not None})"
