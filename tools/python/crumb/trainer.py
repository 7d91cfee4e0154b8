"""Training on arrays: ``crumb.Trainer(model=..., **train_flags).fit(x, y, epochs=..., validation=...)``."""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict

import numpy as np

from . import _arrays, _crumb
from ._flags import reject, to_args
from ._progress import Progress
from .callbacks import Callback
from .plan import model_args

Error = _crumb.Error

# The flags that shape a model's parameters: what a checkpoint alone brings back as the model.
_MODEL_FLAGS = ("model", "network", "norm", "bn-group", "bn-stats", "dropout")


def _checkpoint(path) -> dict:
    return dict(_crumb.checkpoint_metadata(os.fspath(path)))


def _model_of_checkpoint(path) -> list[str]:
    """The flags that rebuild the model a checkpoint was saved from (its recorded --model or --network,
    and normalisation flags)."""
    meta = _checkpoint(path)
    if "train.args" not in meta and "train.network" not in meta:
        raise Error(f"{path} does not record its model (it was not saved by crumb or train): give model=")
    args = [a for a in (_crumb.recorded_args(os.fspath(path)) if "train.args" in meta else [])
            if a[2:].split("=", 1)[0] in _MODEL_FLAGS]
    if "train.network" in meta and not any(a.startswith("--network=") for a in args):
        args = [a for a in args if not a.startswith("--model=")] + ["--network=" + meta["train.network"]]
    return args


class Trainer:
    """A training run. Keyword arguments are train's flags under the same names (``lr``, ``momentum``,
    ``optimizer``, ``batch``, ``micro_batch``, ``memory_budget``, ``strategy``, ``precision``, ``seed``,
    ``save``, ``load``, ``resume``, ...), plus:

    model     a built-in model's name, or a network from crumb.nn or crumb.from_torch; by default the
              model ``load=`` or ``resume=`` was saved from (else lenet5)
    classes   the number of classes (default: the checkpoint's, else the largest label of the first fit's y,
              plus 1)
    mean, std per-channel normalisation (default: the checkpoint's, else the first fit's per-channel
              statistics for uint8 images, scaled to [0, 1]; float32 images as they are); ``preprocess(x)``
              shows what the model sees
    progress  a progress bar in notebooks and terminals (default True)
    """

    def __init__(self, model=None, *, classes: int | None = None, mean=None, std=None, progress: bool = True,
                 **flags):
        reject(flags, ["dataset", "data", "input", "limit_train", "limit_test", "explain", "explain_csv", "report",
                       "report_dir", "sweep", "help"], "Trainer takes its data as arrays in fit()")
        source = flags.get("resume") or flags.get("load")
        meta = _checkpoint(source) if source else {}
        if model is None:
            args, weights = (_model_of_checkpoint(source) if source else ["--model=lenet5"]), None
        else:
            args, weights = model_args(model)
        self._epochs = int(flags.get("epochs", 1))
        self._run = _crumb.Run(args + to_args(flags))
        if weights is not None and not source:  # a checkpoint's weights replace the converted model's
            self._run.load_state_dict(_tensors(weights))
        if (mean is None) != (std is None):
            raise Error("give mean and std together")
        self._norm_given = mean is not None
        if mean is not None:
            self._run.set_normalization([float(v) for v in np.atleast_1d(mean)], [float(v) for v in np.atleast_1d(std)])
        recorded = int(meta["data.classes"]) if "data.classes" in meta else None
        if classes is not None and recorded is not None and classes != recorded:
            raise Error(f"classes={classes} but {source} was trained with {recorded} classes")
        self._classes = classes if classes is not None else recorded
        self._shape = tuple(int(v) for v in meta["data.shape"].split("x")) if "data.shape" in meta else None
        self._pixels = meta.get("data.pixels")
        self._norm = _norm_of(meta, mean, std)
        self._progress = progress
        self.history: list[dict] = []

    # ---- data

    def _classes_for(self, *label_arrays) -> int:
        if self._classes is None:
            self._classes = int(max(int(y.max()) for y in label_arrays if len(y))) + 1
            if self._classes < 2:
                raise Error(f"every label is {self._classes - 1}: a classifier needs at least 2 classes "
                            f"(give classes= if the data holds only some of them)")
        for y in label_arrays:
            if len(y) and y.max() >= self._classes:
                raise Error(f"label {int(y.max())} is outside [0, {self._classes}) (classes={self._classes})")
        return self._classes

    def _images(self, x, what: str, layout: str) -> np.ndarray:
        x = _arrays.images(x, what, layout, self._shape)
        if self._pixels is not None and x.dtype != self._pixels:
            self._check_pixels(x, what)
        return x

    def _check_pixels(self, x: np.ndarray, what: str) -> None:
        """Images of another dtype than the model was trained on: float32 ones are read as uint8 pixels
        divided by 255 (what the loader does with uint8), so they must lie in [0, 1]; uint8 images for a
        model trained on float32 ones are refused (their scale is unknown)."""
        if self._pixels == "uint8":
            lo, hi = _arrays.value_range(x)
            if lo < 0 or hi > 1:
                raise Error(f"the model was trained on uint8 images, but {what} is float32 with values in "
                            f"[{lo:g}, {hi:g}]: give uint8 images, or float32 ones scaled to [0, 1] (pixel / 255)")
            warnings.warn(f"the model was trained on uint8 images: float32 {what} is taken as pixel / 255 and "
                          f"normalised the same way (see Trainer.preprocess)", stacklevel=3)
        else:
            raise Error(f"the model was trained on float32 images (taken as they are), but {what} is uint8: "
                        f"convert it as the training images were (e.g. x.astype(np.float32) / 255)")

    def _settle_pixels(self, x: np.ndarray) -> None:
        if self._pixels is None:
            self._pixels = str(x.dtype)
        if self._shape is None:
            self._shape = tuple(x.shape[1:])

    def _unsettled_norm(self, x: np.ndarray) -> None:
        if self._norm is None and not self._run.info()["built"] and x.dtype == np.uint8:
            warnings.warn("no normalisation is known for these weights (no fit, checkpoint or mean=/std=): the "
                          "images are normalised with their own per-channel statistics; give mean= and std= as the "
                          "weights were trained with", stacklevel=3)

    # ---- training

    def fit(self, x, y=None, epochs: int | None = None, validation=None, progress: bool | None = None,
            callbacks=(), layout: str = "auto", spool_dir=None) -> list[dict]:
        """Trains on x (N x C x H x W, uint8 or float32: a numpy array, read-only or memory-mapped, or a CPU
        torch tensor) and y (N integer labels); or on an iterable of (x, y) chunks given as x alone (a
        generator, a torch DataLoader), written once into a temporary file in ``spool_dir`` (default: the
        system's temporary folder) and read from there as a memory map is, so its size is bounded by the
        disk, not the memory. Memory maps and chunks are read in place through the loader's two
        micro-batch slots, so a data set larger than RAM trains. The first fit trains to ``epochs`` (train's --epochs: a
        resumed run continues to it); each later fit trains ``epochs`` more. ``callbacks``: crumb.Callback
        objects (crumb.callbacks: EarlyStopping, LambdaCallback, your own). ``layout="nhwc"`` takes N x H x W
        x C images.

        Returns this fit's history: one dict per epoch (epoch, counted from 1 over the whole run; loss,
        accuracy, val_loss, val_accuracy, samples_per_s, seconds, micro_batch, arena_bytes, memory_bytes:
        the plan's total, max_rss_bytes: the process's peak resident memory, step); ``self.history`` holds
        every fit's. Ctrl-C (or an exception in a callback) stops after the optimizer step in progress, saves
        with save=, and raises KeyboardInterrupt (the exception) with the weights intact; ``stop()`` from a
        callback stops the same way and returns."""
        if y is None:
            if not _arrays.is_chunks(x):
                raise Error("fit(x, y): y is missing (or give x as an iterable of (x, y) chunks)")
            x, y = _arrays.spool(x, "x", layout, self._shape, spool_dir)
            layout = "nchw"  # the chunks' own layout was taken on the way
        x = self._images(x, "x", layout)
        y = _arrays.labels(y, x.shape[0], "y")
        xv = yv = None
        if validation is not None:
            pair = isinstance(validation, (tuple, list)) and len(validation) == 2 and not isinstance(
                validation[0], (tuple, list))
            vlayout = layout
            if not pair and _arrays.is_chunks(validation):
                validation = _arrays.spool(validation, "validation", layout, tuple(x.shape[1:]), spool_dir)
                vlayout = "nchw"
            elif not pair:
                raise Error("validation must be a pair (x, y) or an iterable of (x, y) chunks")
            xv = _arrays.images(validation[0], "validation x", vlayout, tuple(x.shape[1:]))
            yv = _arrays.labels(validation[1], xv.shape[0], "validation y")
            if xv.dtype != x.dtype:
                raise Error(f"validation images are {xv.dtype} but training images {x.dtype}")
        classes = self._classes_for(y, *([] if yv is None else [yv]))
        epochs = self._epochs if epochs is None else int(epochs)
        if epochs < 1:
            raise Error(f"epochs must be >= 1, got {epochs}")
        callbacks = list(callbacks)
        for c in callbacks:
            if not isinstance(c, Callback):
                raise Error(f"callbacks must be crumb.Callback objects, got {type(c).__name__}")
        self._settle_pixels(x)
        bar = Progress(enabled=self._progress if progress is None else progress)
        done: list[dict] = []

        def events(event: str, logs: dict) -> None:
            if event == "epoch_end":
                self.history.append(logs)
                done.append(logs)
            if event == "step":
                bar.step(logs)
            elif event == "epoch_end":
                bar.epoch(logs)
            for c in callbacks:
                getattr(c, "on_" + event)(self, logs)

        self._run.fit(x, y, xv, yv, classes, epochs, events)
        return done

    def stop(self) -> None:
        """Ends the fit in progress after its optimizer step (at an epoch's end: at once), saving with save=,
        as Ctrl-C does but without an exception: for callbacks, or another thread."""
        self._run.request_stop()

    # ---- inference

    def evaluate(self, x, y, layout: str = "auto") -> dict:
        """Mean loss and accuracy over (x, y), normalised like the training data."""
        x = self._images(x, "x", layout)
        y = _arrays.labels(y, x.shape[0], "y")
        self._unsettled_norm(x)
        return self._run.evaluate(x, y, self._classes_for(y))

    def predict(self, x, layout: str = "auto") -> np.ndarray:
        """The model's outputs (logits) for x, N x classes float32; ``.argmax(1)`` gives the classes. Works
        from a checkpoint alone (``Trainer(load=path).predict(x)``), and for a single image."""
        if self._classes is None:
            raise Error("predict needs classes= (or a fit first, or load= of a checkpoint that records them)")
        x = self._images(x, "x", layout)
        self._unsettled_norm(x)
        return self._run.predict(x, self._classes)

    def preprocess(self, x, layout: str = "auto") -> np.ndarray:
        """x as the model sees it: float32 N x C x H x W, normalised (uint8 pixels / 255, then (v - mean) /
        std per channel; float32 values v as they are). By the same code that feeds training."""
        x = self._images(x, "x", layout)
        self._unsettled_norm(x)
        return self._run.preprocess(x, self._classes or 2)

    @property
    def mean(self) -> list[float] | None:
        """The per-channel mean the images are normalised with (None until it is known: given, from a
        checkpoint, or from the first images seen)."""
        info = self._run.info()
        return info["mean"] if info["built"] else self._norm and self._norm[0]

    @property
    def std(self) -> list[float] | None:
        """The per-channel standard deviation the images are normalised with (as ``mean``)."""
        info = self._run.info()
        return info["std"] if info["built"] else self._norm and self._norm[1]

    @property
    def classes(self) -> int | None:
        return self._classes

    # ---- weights

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Weights and running statistics by torchvision's names, as numpy copies:
        ``model.load_state_dict({k: torch.from_numpy(v) for k, v in t.state_dict().items()})``."""
        return OrderedDict(self._run.state_dict())

    def load_state_dict(self, state) -> None:
        """Loads weights by name: every parameter and running statistic, with its shape and dtype, or an
        error naming the first that differs (nothing is loaded then)."""
        self._run.load_state_dict(_tensors(state))

    def save(self, path) -> None:
        """A checkpoint (safetensors, with the optimizer beside it) as ``train --save`` writes it, recording
        what the model's inputs were (shape, classes, pixel type, normalisation)."""
        self._run.save(os.fspath(path))

    def load(self, path) -> None:
        """Starts again from a checkpoint written by ``save`` or by ``train``: its weights and optimizer state,
        and the classes and normalisation it records. The model must be the checkpoint's (every tensor is
        checked)."""
        path = os.path.abspath(os.fspath(path))
        meta = _checkpoint(path)
        recorded = int(meta["data.classes"]) if "data.classes" in meta else None
        self._run.load(path)
        if recorded is not None:
            self._classes = recorded
        if "data.shape" in meta:
            self._shape = tuple(int(v) for v in meta["data.shape"].split("x"))
        self._pixels = meta.get("data.pixels", self._pixels)
        if self._norm is None or not self._norm_given:
            self._norm = _norm_of(meta, None, None)

    @property
    def micro_batch(self) -> int | None:
        return self._run.info().get("micro_batch")

    def __repr__(self) -> str:
        info = self._run.info()
        return f"<crumb.Trainer {info.get('split', 'not planned yet')}, epoch {info['epoch']}>"


def _norm_of(meta: dict, mean, std):
    """(mean, std) as lists: the given ones, else the checkpoint's, else None."""
    if mean is not None:
        return [float(v) for v in np.atleast_1d(mean)], [float(v) for v in np.atleast_1d(std)]
    for m, s in (("data.mean", "data.std"), ("python.mean", "python.std")):
        if m in meta and s in meta:
            return [float(v) for v in meta[m].split(",")], [float(v) for v in meta[s].split(",")]
    return None


def _tensors(state) -> list:
    tensors = []
    for name, value in state.items():
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        tensors.append((name, np.asarray(value, order="C")))  # (ascontiguousarray makes 0-d arrays 1-d)
    return tensors
