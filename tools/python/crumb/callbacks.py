"""Callbacks of ``Trainer.fit(..., callbacks=[...])``: code of yours at the start and end of a fit, of each
epoch and after each optimizer step, which can end the run.

A callback subclasses ``Callback`` and overrides the hooks it needs. Each receives the Trainer and a dict:

- ``on_fit_begin(trainer, logs)``: ``{}``
- ``on_epoch_begin(trainer, logs)``: ``{"epoch": 1-based, "epochs": where the run ends}``
- ``on_step(trainer, logs)``: after each optimizer step: epoch, epochs, batch and batches (1-based), samples,
  loss, epoch_loss (the mean so far), step (optimizer steps taken), lr, skipped and loss_scale (fp16),
  samples_per_s
- ``on_epoch_end(trainer, logs)``: the history entry of the epoch: epoch, loss, accuracy, val_loss and
  val_accuracy (with validation data), seconds, samples_per_s, micro_batch, arena_bytes, memory_bytes,
  max_rss_bytes, step
- ``on_fit_end(trainer, logs)``: ``{"stopped": whether the run ended early, "signal": 0, "step": ...}``

``trainer.stop()`` in a hook ends the run after the step in progress (at an epoch's end: at once), exactly
as Ctrl-C does: ``save=`` is written and the run can be resumed from it; fit then returns normally. An
exception raised in a hook also ends the run that way, and fit raises it once the run has stopped. A hook may
read the trainer (``state_dict``, ``evaluate``, ``predict``, ``save``) but not start another fit.
"""

from __future__ import annotations

import math

from ._crumb import Error

__all__ = ["Callback", "EarlyStopping", "LambdaCallback"]


class Callback:
    """Base class: every hook does nothing."""

    def on_fit_begin(self, trainer, logs: dict) -> None:
        pass

    def on_epoch_begin(self, trainer, logs: dict) -> None:
        pass

    def on_step(self, trainer, logs: dict) -> None:
        pass

    def on_epoch_end(self, trainer, logs: dict) -> None:
        pass

    def on_fit_end(self, trainer, logs: dict) -> None:
        pass


class LambdaCallback(Callback):
    """A callback from functions: ``LambdaCallback(on_epoch_end=lambda trainer, logs: print(logs))``."""

    def __init__(self, on_fit_begin=None, on_epoch_begin=None, on_step=None, on_epoch_end=None, on_fit_end=None):
        for name, fn in (("on_fit_begin", on_fit_begin), ("on_epoch_begin", on_epoch_begin), ("on_step", on_step),
                         ("on_epoch_end", on_epoch_end), ("on_fit_end", on_fit_end)):
            if fn is not None:
                if not callable(fn):
                    raise Error(f"LambdaCallback: {name} must be callable, got {type(fn).__name__}")
                setattr(self, name, fn)


class EarlyStopping(Callback):
    """Stops training when a metric of the epoch (``monitor``: a key of the history, e.g. ``val_loss``,
    ``val_accuracy``, ``loss``) has not improved by more than ``min_delta`` for ``patience`` epochs in a
    row (at least one), as keras.callbacks.EarlyStopping does. ``mode``: "min", "max" or "auto" (max for accuracies, min
    otherwise). ``restore_best_weights``: at the end of the fit, the weights of the best epoch are put back
    (a copy of them is kept in memory). The stop is a stop as by Ctrl-C: saved with ``save=``, resumable.

    After the fit: ``stopped_epoch`` (0 if it ran to the end), ``best`` and ``best_epoch``."""

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0, mode: str = "auto",
                 restore_best_weights: bool = False):
        if mode not in ("auto", "min", "max"):
            raise Error(f"EarlyStopping: mode must be 'auto', 'min' or 'max', got {mode!r}")
        if patience < 0 or not math.isfinite(min_delta) or min_delta < 0:
            raise Error("EarlyStopping: patience and min_delta must be >= 0")
        self.monitor, self.min_delta, self.patience = monitor, float(min_delta), int(patience)
        self.mode = ("max" if "acc" in monitor else "min") if mode == "auto" else mode
        self.restore_best_weights = restore_best_weights
        self.best = self.best_epoch = None
        self.stopped_epoch = 0
        self._wait = 0
        self._best_weights = None

    def _better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta

    def on_fit_begin(self, trainer, logs):
        self.best = self.best_epoch = None
        self.stopped_epoch = self._wait = 0
        self._best_weights = None

    def on_epoch_end(self, trainer, logs):
        if self.monitor not in logs:
            known = ", ".join(k for k in logs if isinstance(logs[k], float))
            raise Error(f"EarlyStopping: the epoch has no '{self.monitor}' to monitor (it has {known}; "
                        f"val_* need validation=)")
        value = float(logs[self.monitor])
        if self._better(value):
            self.best, self.best_epoch, self._wait = value, logs["epoch"], 0
            if self.restore_best_weights:
                self._best_weights = trainer.state_dict()
            return
        self._wait += 1
        if self._wait >= self.patience:
            self.stopped_epoch = logs["epoch"]
            trainer.stop()

    def on_fit_end(self, trainer, logs):
        if self.restore_best_weights and self._best_weights is not None:
            trainer.load_state_dict(self._best_weights)
