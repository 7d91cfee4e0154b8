"""Crumb from Python: plan, picture and train CNNs at batch sizes beyond memory.

    import crumb
    p = crumb.plan(model="resnet50", input=(3, 224, 224), classes=1000, batch=256, memory_budget="16GiB")
    p.micro_batch, p.arena_bytes          # what the budget allows; p displays as the memory report
    t = crumb.Trainer(model="cnn", batch=256, memory_budget="64MiB", lr=0.05)
    history = t.fit(x, y, epochs=2, validation=(xv, yv))   # numpy arrays, N x C x H x W

Keyword arguments are the flags of the ``train`` program under the same names (``micro_batch`` is
``--micro-batch``); errors are ``crumb.Error`` with train's messages. See docs/python.md.
"""

def _share_cuda_libraries() -> None:
    """torch's Linux wheels carry CUDA's libraries (nvidia-* packages) under the sonames of the system's,
    which libcrumb links, and a process keeps whichever copy it loads first: after crumb, torch would get
    the system's older NCCL and fail to import (undefined symbol ncclCommResume). Where those packages are
    installed, their copies are loaded first, so crumb and torch share them (same major versions; crumb
    runs on either). torch itself is not imported."""
    import ctypes
    import glob
    import importlib.util
    import os

    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for pattern in ("cu*/lib/libcudart.so.*", "cu*/lib/libcublasLt.so.*", "cu*/lib/libcublas.so.*",
                        "cudnn/lib/libcudnn.so.*", "nccl/lib/libnccl.so.*"):
            for path in sorted(glob.glob(os.path.join(base, pattern))):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


_share_cuda_libraries()

from ._crumb import Error, format_bytes, parse_bytes
from ._crumb import models as _models
from . import callbacks, nn
from .callbacks import Callback, EarlyStopping, LambdaCallback
from .plan import Plan, plan
from .torch_convert import from_torch
from .trainer import Trainer

__all__ = ["Callback", "EarlyStopping", "Error", "LambdaCallback", "Plan", "Trainer", "callbacks", "format_bytes",
           "from_torch", "models", "nn", "parse_bytes", "plan"]


def models() -> list[str]:
    """The names of the built-in models (``model=``)."""
    return _models()
