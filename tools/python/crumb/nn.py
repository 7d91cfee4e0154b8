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

The layers (Conv2d, BatchNorm2d, ReLU, ...) are those the engine registers beside their op families
(engine/ops/*_layer.cc): each class is made from its registration (crumb._crumb.layers()), which gives its
torch.nn-style constructor, and the engine checks its attributes as it checks a description. numpy is not
needed to build descriptions.
"""
from collections import OrderedDict
import inspect
import json
import math

from . import _crumb
from ._crumb import Error


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


def _count(layer, what, value, low=1, high=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise Error(f"{layer}: {what} must be an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise Error(f"{layer}: {what} is {value}, above the largest a layer takes ({high})")
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
    """One node of a layer the engine registers (engine/ops/layer.h): its constructor takes torch.nn's
    arguments as the registration writes them, each checked where it is given, then the engine checks the
    attributes together as it checks a description's node."""

    _layer = {}  # the layer's description, from crumb._crumb.layers()
    _signature = inspect.Signature()

    def __init__(self, *args, **kwargs):
        cls = type(self).__name__
        given = self._signature.bind(*args, **kwargs)
        given.apply_defaults()
        fields = {f["name"] for f in self._layer["fields"]}
        for name, value in given.arguments.items():
            if name not in fields:
                setattr(self, name, value)  # torch's arguments Crumb has no use for (inplace), kept as given
        for f in self._layer["fields"]:
            if f["name"] in given.arguments:
                setattr(self, f["name"], _field(cls, f, given.arguments[f["name"]], self))
        _crumb.check_layer(self._layer["name"], json.dumps(self._attrs()), cls)

    def _attrs(self):
        a = {}
        for f in self._layer["fields"]:
            value = getattr(self, f["name"], None)
            if value is not None and not (f["quiet"] and value == f["default"]):
                a[f["name"]] = list(value) if f["kind"] in ("size2", "dims") else value
        return a

    def _emit(self, desc, prefix, x):
        return desc.add(prefix or self._default_name, self._layer["name"], [x], **self._attrs())

    def _extra_repr(self):
        return ", ".join(f"{k}={v!r}" for k, v in self._attrs().items())


def _field(layer, f, value, module):
    """A constructor argument as the field `f` of the description takes it (the fields before it are already
    on `module`), or crumb.Error naming the layer."""
    name, kind = f["name"], f["kind"]
    if value is None and (f["optional"] or f["same_as"]):
        return getattr(module, f["same_as"]) if f["same_as"] else None
    if kind == "int":
        if f["word"] and value == f["word"]:
            return value
        if f["same_padding"] and value in ("valid", "same"):
            return 0 if value == "valid" else _same_padding(layer, module.kernel_size, module.stride)
        return _count(layer, name, _square(layer, name, value) if f["square"] else value, f["lo"], f["hi"])
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Error(f"{layer}: {name} must be a finite number, got {value!r}")
        return float(value)
    if kind == "bool":
        return bool(value)
    if kind == "size2":
        size = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
        if len(size) != 2:
            raise Error(f"{layer}: {name} must be an integer or (height, width), got {value!r}")
        return tuple(_count(layer, name, s, 1, f["hi"]) for s in size)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise Error(f"{layer}: {name} must be 1 to 3 per-sample dims, got {value!r}")
    return tuple(_count(layer, name, d, 1, f["hi"]) for d in value)


def _layer_class(layer):
    """crumb.nn's class of a registered layer, named and documented as its registration says."""
    py = layer["python"]
    scope = {}
    exec(f"def signature({py['signature']}): pass", {}, scope)  # the registration's own text, not user input
    signature = inspect.signature(scope["signature"])
    return type(py["class"], (_Layer,), {
        "__doc__": py["doc"] or None, "__module__": __name__, "__signature__": signature, "_signature": signature,
        "_layer": layer, "_default_name": py["node"]})


_LAYER_CLASSES = [_layer_class(layer) for layer in _crumb.layers() if layer["python"]["class"]]
globals().update((c.__name__, c) for c in _LAYER_CLASSES)
__all__ = ["Module", "Network", *(c.__name__ for c in _LAYER_CLASSES), "Sequential", "Residual"]


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
