"""Plans as objects: the micro-batch a budget allows, the memory breakdown, the arena blocks, the timeline
and the batch sweep, displayed in a notebook as the pictures of ``train --report``."""

from __future__ import annotations

import os

from . import _crumb
from ._flags import reject, to_args


def _cell(text: str):
    """A report cell as a number where it is one ("4096" -> 4096, "1.062" -> 1.062), else the text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def model_args(model) -> tuple[list[str], dict | None]:
    """``--model`` for a built-in name, or ``--network`` (the description inline, docs/networks.md) for a
    network built with crumb.nn or converted by crumb.from_torch (anything with ``_crumb_network()``), with
    the weights it brings."""
    if isinstance(model, str):
        return [f"--model={model}"], None
    if not hasattr(model, "_crumb_network"):
        raise _crumb.Error(f"model= takes a model name ({', '.join(_crumb.models())}) or a crumb.nn network, "
                           f"got {type(model).__name__}")
    text, weights = model._crumb_network()
    return [f"--network={text}"], weights


class Plan:
    """The memory plan of a training run, before anything is allocated (``train --explain``)."""

    def __init__(self, native: _crumb.Plan):
        self._p = native

    micro_batch = property(lambda self: self._p.micro_batch, doc="samples per micro-batch the plan chose")
    arena_bytes = property(lambda self: self._p.arena_bytes, doc="the activation arena (values + workspace)")
    activation_bytes = property(lambda self: self._p.activation_bytes)
    workspace_bytes = property(lambda self: self._p.workspace_bytes)
    persistent_bytes = property(lambda self: self._p.persistent_bytes,
                                doc="parameters, gradients, optimizer state, 16-bit copies, running statistics")
    total_bytes = property(lambda self: self._p.total_bytes, doc="everything the budget counts")
    budget = property(lambda self: self._p.budget)
    batch = property(lambda self: self._p.batch)
    split = property(lambda self: self._p.split, doc='"batch 256 in 4 micro-batch(es) of 64 (...)"')
    device = property(lambda self: self._p.device)
    precision = property(lambda self: self._p.precision)
    strategy = property(lambda self: self._p.strategy, doc="micro-batch, swap, recompute or both")

    def explain(self) -> str:
        """What ``train --explain`` prints."""
        return self._p.explain()

    @property
    def breakdown(self) -> list[dict]:
        """The rows --explain prints (part, bytes, dtype, holds): ``pandas.DataFrame(plan.breakdown)``."""
        return self._p.breakdown()

    def table(self, name: str) -> list[dict]:
        """A table of the report as rows: "breakdown", "blocks", "timeline" or "sweep"."""
        tables = self._p.tables()
        if name not in tables:
            raise _crumb.Error(f"no table named {name!r} ({', '.join(tables)})")
        _caption, header, rows = tables[name]
        return [{h: _cell(c) for h, c in zip(header, row)} for row in rows]

    blocks = property(lambda self: self.table("blocks"), doc="the arena's blocks: offset, bytes, steps, role")
    timeline = property(lambda self: self.table("timeline"), doc="live bytes at each step")

    def sweep(self, micro_batches=None) -> list[dict]:
        """The memory of each micro-batch size (bytes per part, total, whether it fits the budget); by
        default the report's sizes (powers of two, the batch and the chosen one)."""
        if micro_batches is None:
            return self._p.default_sweep()
        return self._p.sweep([int(m) for m in micro_batches])

    def svg(self, name: str) -> str:
        """A picture of the report as SVG text: "arena_map", "timeline" or "sweep"."""
        return self._p.svg(name)

    def save_report(self, path: str | os.PathLike, dir: str | os.PathLike | None = None) -> None:
        """Writes the HTML report (``train --report``), and its pictures and tables to ``dir``."""
        self._p.save_report(os.fspath(path), os.fspath(dir) if dir else "")

    def _repr_html_(self) -> str:
        return self._p.html(True)

    def __repr__(self) -> str:
        return (f"<crumb.Plan {self._p.title}: {self.split}; arena {_crumb.format_bytes(self.arena_bytes)}, "
                f"total {_crumb.format_bytes(self.total_bytes)} of {_crumb.format_bytes(self.budget)}>")


def plan(model="lenet5", input=(1, 28, 28), classes: int = 10, batch: int = 64, **flags) -> Plan:
    """Plans ``model`` for images of shape ``input`` (C, H, W) and ``classes`` classes, trained in batches of
    ``batch`` within ``memory_budget`` (bytes or "16GiB"). Other keyword arguments are train's flags:
    ``strategy``, ``micro_batch``, ``precision``, ``optimizer``, ``norm``, ``bn_group``, ``device``, ..."""
    reject(flags, ["dataset", "data", "epochs", "save", "load", "resume", "log", "report", "report_dir", "sweep",
                   "explain", "limit_train", "limit_test"], "a plan takes only the model, input, classes and run flags")
    if len(tuple(input)) != 3:
        raise _crumb.Error(f"input must be (channels, height, width), got {input!r}")
    args, _weights = model_args(model)
    args += to_args(dict(dataset="synthetic", input=tuple(input), classes=classes, batch=batch, **flags))
    return Plan(_crumb.Plan(args))
