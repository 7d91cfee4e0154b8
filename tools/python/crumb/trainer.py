"""Training on numpy arrays: ``crumb.Trainer(model=..., **train_flags).fit(x, y, epochs=..., validation=...)``."""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from . import _crumb
from ._flags import reject, to_args
from ._progress import Progress
from .plan import model_args

Error = _crumb.Error


def _images(x, what: str) -> np.ndarray:
    """N x C x H x W uint8 or float32, C-contiguous: the array itself where it already is (no copy)."""
    if not isinstance(x, np.ndarray):
        raise Error(f"{what} must be a numpy array, got {type(x).__name__}")
    if x.ndim != 4:
        raise Error(f"{what} must be N x C x H x W (4 dimensions), got shape {x.shape}")
    if x.dtype not in (np.uint8, np.float32):
        raise Error(f"{what} must be uint8 or float32, got {x.dtype} (convert with {what}.astype(np.float32))")
    if x.shape[0] == 0 or 0 in x.shape:
        raise Error(f"{what} has shape {x.shape}: no samples")
    if x.dtype == np.float32 and not np.isfinite(x).all():
        raise Error(f"{what} holds NaN or infinite values")
    return np.ascontiguousarray(x)


def _labels(y, count: int, what: str) -> np.ndarray:
    if not isinstance(y, np.ndarray):
        y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != count:
        raise Error(f"{what} must be one label per sample ({count}), got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise Error(f"{what} must hold integer class labels, got {y.dtype}")
    # The class count (the largest label + 1) must fit an int32, as the engine counts classes.
    if count and (y.min() < 0 or y.max() >= 2**31 - 1):
        raise Error(f"{what} holds a negative or too large label ({y.min()}..{y.max()}; labels are 0 to 2^31 - 2)")
    return np.ascontiguousarray(y, dtype=np.int32)


class Trainer:
    """A training run. Keyword arguments are train's flags under the same names (``lr``, ``momentum``,
    ``optimizer``, ``batch``, ``micro_batch``, ``memory_budget``, ``strategy``, ``precision``, ``seed``,
    ``save``, ``load``, ``resume``, ...; see ``train --help``), plus:

    model     a built-in model's name, or a network from crumb.nn or crumb.from_torch
    classes   the number of classes (default: the largest label of the first fit's y, plus 1)
    mean, std per-channel normalisation (default: the first fit's per-channel statistics for uint8
              images, scaled to [0, 1]; float32 images as they are)
    progress  a progress bar in notebooks and terminals (default True)
    """

    def __init__(self, model="lenet5", *, classes: int | None = None, mean=None, std=None, progress: bool = True,
                 **flags):
        reject(flags, ["dataset", "data", "input", "limit_train", "limit_test", "explain", "explain_csv", "report",
                       "report_dir", "sweep", "help"], "Trainer takes its data as arrays in fit()")
        args, weights = model_args(model)
        self._epochs = int(flags.get("epochs", 1))
        self._run = _crumb.Run(args + to_args(flags))
        if weights is not None:
            self.load_state_dict(weights)
        if (mean is None) != (std is None):
            raise Error("give mean and std together")
        self._classes = classes
        self._mean = None if mean is None else [float(v) for v in np.atleast_1d(mean)]
        self._std = None if std is None else [float(v) for v in np.atleast_1d(std)]
        self._progress = progress
        self.history: list[dict] = []

    def _classes_for(self, *label_arrays) -> int:
        if self._classes is None:
            self._classes = int(max(int(y.max()) for y in label_arrays if len(y))) + 1
        if self._classes > 2**31 - 1:
            raise Error(f"classes={self._classes} is more than a 32-bit class count holds (2^31 - 1)")
        for y in label_arrays:
            if len(y) and y.max() >= self._classes:
                raise Error(f"label {int(y.max())} is outside [0, {self._classes}) (classes={self._classes})")
        return self._classes

    def fit(self, x, y, epochs: int | None = None, validation=None, progress: bool | None = None) -> list[dict]:
        """Trains on x (N x C x H x W, uint8 or float32) and y (N integer labels). The first fit trains to
        ``epochs`` (train's --epochs: a resumed run continues to it); each later fit trains ``epochs`` more.
        Returns the history: one dict per epoch (loss, accuracy, val_loss, val_accuracy, samples_per_s,
        seconds, micro_batch, arena_bytes, memory_bytes: the plan's total, max_rss_bytes: the process's
        peak resident memory, step). Ctrl-C stops after the optimizer step in progress (and
        saves, with save=), then raises KeyboardInterrupt with the weights intact."""
        x = _images(x, "x")
        y = _labels(y, x.shape[0], "y")
        xv = yv = None
        if validation is not None:
            if not isinstance(validation, (tuple, list)) or len(validation) != 2:
                raise Error("validation must be a pair (x, y)")
            xv = _images(validation[0], "validation x")
            yv = _labels(validation[1], xv.shape[0], "validation y")
            if xv.shape[1:] != x.shape[1:]:
                raise Error(f"validation images are {xv.shape[1:]} but training images {x.shape[1:]}")
        classes = self._classes_for(y, *([] if yv is None else [yv]))
        epochs = self._epochs if epochs is None else int(epochs)
        if epochs < 1:
            raise Error(f"epochs must be >= 1, got {epochs}")
        # The first fit trains to `epochs`; a later one (train_more) `epochs` past where the run ends.
        info = self._run.info()
        bar = Progress(info["epochs"] + epochs if info["built"] else epochs,
                       enabled=self._progress if progress is None else progress)

        def on_epoch(e: dict) -> None:
            self.history.append(e)
            bar.epoch(e)

        self._run.fit(x, y, xv, yv, classes, self._mean, self._std, epochs, bar.step, on_epoch)
        return self.history

    def evaluate(self, x, y) -> dict:
        """Mean loss and accuracy over (x, y), normalised like the training data."""
        x = _images(x, "x")
        y = _labels(y, x.shape[0], "y")
        return self._run.evaluate(x, y, self._classes_for(y))

    def predict(self, x) -> np.ndarray:
        """The model's outputs (logits) for x, N x classes float32; ``.argmax(1)`` gives the classes."""
        if self._classes is None:
            raise Error("predict needs classes= (or a fit first)")
        return self._run.predict(_images(x, "x"), self._classes)

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Weights and running statistics by torchvision's names, as numpy copies:
        ``model.load_state_dict({k: torch.from_numpy(v) for k, v in t.state_dict().items()})``."""
        return OrderedDict(self._run.state_dict())

    def load_state_dict(self, state) -> None:
        """Loads weights by name (every parameter and running statistic, with its shape)."""
        tensors = []
        for name, value in state.items():
            if hasattr(value, "detach"):  # a torch tensor
                value = value.detach().cpu().numpy()
            tensors.append((name, np.asarray(value, order="C")))  # (ascontiguousarray makes 0-d arrays 1-d)
        self._run.load_state_dict(tensors)

    def save(self, path) -> None:
        """A checkpoint (safetensors, with the optimizer beside it) as ``train --save`` writes it."""
        self._run.save(os.fspath(path))

    def load(self, path) -> None:
        """The weights of a checkpoint written by ``save`` or by ``train``."""
        self._run.load(os.path.abspath(os.fspath(path)))

    @property
    def micro_batch(self) -> int | None:
        return self._run.info().get("micro_batch")

    def __repr__(self) -> str:
        info = self._run.info()
        return f"<crumb.Trainer {info.get('split', 'not planned yet')}, epoch {info['epoch']}>"
