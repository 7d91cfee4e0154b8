"""Data as people have it: numpy arrays (read-only ones and memory maps included), torch tensors and
anything numpy can view, checked and turned into what the engine reads in place (N x C x H x W, uint8 or
float32, C order) without a copy where the layout allows."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from ._crumb import Error

# Bytes of a float32 array checked for NaN at a time: a memory map larger than RAM is read once, in
# pieces, never copied whole.
_CHUNK_BYTES = 64 << 20


def _as_array(x, what: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):  # a torch tensor, shared where it can be
        t = x.detach()
        if t.device.type != "cpu":
            raise Error(f"{what} is a torch tensor on {t.device}: give a CPU tensor ({what}.cpu())")
        return t.numpy()
    if hasattr(x, "__array__") or hasattr(x, "__array_interface__") or isinstance(x, (list, tuple)):
        return np.asarray(x)
    raise Error(f"{what} must be a numpy array or a torch tensor, got {type(x).__name__}")


def _chunks(a: np.ndarray):
    step = max(1, _CHUNK_BYTES // max(1, a[0].nbytes))
    for i in range(0, a.shape[0], step):
        yield a[i:i + step]


def finite(a: np.ndarray) -> bool:
    return all(np.isfinite(c).all() for c in _chunks(a))


def value_range(a: np.ndarray) -> tuple[float, float]:
    lo, hi = np.inf, -np.inf
    for c in _chunks(a):
        lo, hi = min(lo, float(c.min())), max(hi, float(c.max()))
    return lo, hi


def images(x, what: str, layout: str = "auto", shape=None) -> np.ndarray:
    """x as N x C x H x W uint8 or float32, C-contiguous: the array itself where it already is (read-only
    arrays and memory maps included). layout "nhwc" takes N x H x W x C (channels last) and copies it into
    N x C x H x W; "auto" takes N x C x H x W and refuses what looks channels-last; shape: the model's
    C x H x W where it is known."""
    if layout not in ("auto", "nchw", "nhwc"):
        raise Error(f"layout must be 'nchw', 'nhwc' or 'auto', got {layout!r}")
    x = _as_array(x, what)
    if x.ndim != 4:
        hint = " (one image? add the batch dimension: x[None])" if x.ndim == 3 else ""
        raise Error(f"{what} must be N x C x H x W (4 dimensions), got shape {x.shape}{hint}")
    if x.dtype not in (np.uint8, np.float32):
        raise Error(f"{what} must be uint8 or float32, got {x.dtype} (convert with {what}.astype(np.float32))")
    if 0 in x.shape:
        raise Error(f"{what} has shape {x.shape}: no samples")
    if layout == "nhwc":
        x = x.transpose(0, 3, 1, 2)
    elif layout == "auto":
        channels_last = (tuple(x.shape[1:]) == (shape[1], shape[2], shape[0]) and tuple(x.shape[1:]) != tuple(shape)
                         if shape is not None else x.shape[3] <= 4 < x.shape[1])
        if channels_last:
            raise Error(f"{what} has shape {x.shape}, which looks like N x H x W x C (channels last); crumb takes "
                        f"N x C x H x W: pass layout='nhwc' (copied into N x C x H x W), or "
                        f"{what}.transpose(0, 3, 1, 2), or layout='nchw' if it is N x C x H x W")
    if shape is not None and tuple(x.shape[1:]) != tuple(shape):
        raise Error(f"{what} has images of {'x'.join(map(str, x.shape[1:]))} but the model takes "
                    f"{'x'.join(map(str, shape))} (C x H x W)")
    if x.dtype == np.float32 and not finite(x):
        raise Error(f"{what} holds NaN or infinite values")
    return np.ascontiguousarray(x)


def labels(y, count: int, what: str) -> np.ndarray:
    y = _as_array(y, what)
    if y.ndim != 1 or y.shape[0] != count:
        raise Error(f"{what} must be one label per sample ({count}), got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise Error(f"{what} must hold integer class labels, got {y.dtype}")
    if count and (int(y.min()) < 0 or int(y.max()) >= 2**31 - 1):
        raise Error(f"{what} holds a label outside [0, 2^31 - 1): {int(y.min())}..{int(y.max())}")
    return np.ascontiguousarray(y, dtype=np.int32)


def is_chunks(data) -> bool:
    """Whether data is an iterable of (x, y) chunks rather than an array."""
    if isinstance(data, (np.ndarray, str, bytes, dict)) or hasattr(data, "__array__") or hasattr(data, "detach"):
        return False
    return hasattr(data, "__iter__")


def spool(chunks, what: str, layout: str, shape, folder=None) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) chunks of an iterable (a generator over files, a torch DataLoader, ...) written one after
    the other into a temporary file and mapped back: images of any total size in bounded memory, read by
    the engine in place as a memory map is (the file is unlinked at once; its space returns when the map
    is released). Labels are kept in memory (4 bytes a sample)."""
    fd, path = tempfile.mkstemp(prefix="crumb-chunks-", suffix=".bin", dir=folder)
    labels_, count, dtype = [], 0, None
    try:
        with os.fdopen(fd, "wb") as out:
            for i, chunk in enumerate(chunks):
                if not isinstance(chunk, (tuple, list)) or len(chunk) != 2:
                    raise Error(f"{what}: chunk {i} must be a pair (x, y), got {type(chunk).__name__}")
                x = images(chunk[0], f"{what} chunk {i} x", layout, shape)
                y = labels(chunk[1], x.shape[0], f"{what} chunk {i} y")
                if dtype is not None and x.dtype != dtype:
                    raise Error(f"{what}: chunk {i} is {x.dtype}, the first chunk {dtype}")
                dtype, shape = x.dtype, tuple(x.shape[1:])
                out.write(memoryview(x).cast("B"))
                labels_.append(y)
                count += x.shape[0]
        if count == 0:
            raise Error(f"{what}: the iterable gave no chunks")
        x = np.memmap(path, dtype=dtype, mode="r", shape=(count, *shape))
    finally:
        os.unlink(path)
    return x, np.concatenate(labels_)
