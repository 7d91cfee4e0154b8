"""Crumb from Python: plan, picture and train CNNs at batch sizes beyond memory.

    import crumb
    p = crumb.plan(model="resnet50", input=(3, 224, 224), classes=1000, batch=256, memory_budget="16GiB")
    p.micro_batch, p.arena_bytes          # what the budget allows; p displays as the memory report
    t = crumb.Trainer(model="cnn", batch=256, memory_budget="64MiB", lr=0.05)
    history = t.fit(x, y, epochs=2, validation=(xv, yv))   # numpy arrays, N x C x H x W

Keyword arguments are the flags of the ``train`` program under the same names (``micro_batch`` is
``--micro-batch``); errors are ``crumb.Error`` with train's messages. See docs/python.md.
"""

import importlib.util as _util

# torch's Linux wheels carry their own CUDA libraries (NCCL, cuDNN, cuBLAS) under the sonames of the
# system's, which libcrumb links, and a process keeps whichever copy it loaded first: after crumb, torch
# would get the system's older NCCL and fail to import (undefined symbol ncclCommResume). Where torch is
# installed it is loaded first, so both use its newer copies (Crumb runs on either).
if _util.find_spec("torch") is not None:
    import torch as _torch  # noqa: F401

from ._crumb import Error, format_bytes, parse_bytes
from ._crumb import models as _models
from .plan import Plan, plan
from .trainer import Trainer

__all__ = ["Error", "Plan", "Trainer", "format_bytes", "models", "parse_bytes", "plan"]


def models() -> list[str]:
    """The names of the built-in models (``model=``)."""
    return _models()
