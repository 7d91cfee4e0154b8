"""Training progress: a bar redrawn in place in a notebook (IPython display) or on a terminal (stderr),
and one line per epoch where neither redraws (a log file)."""

from __future__ import annotations

import sys
import time


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _bar(fraction: float, width: int = 24) -> str:
    done = int(round(fraction * width))
    return "[" + "#" * done + "." * (width - done) + "]"


class Progress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.notebook = enabled and _in_notebook()
        self.terminal = enabled and not self.notebook and sys.stderr.isatty()
        self.handle = None
        self.last = 0.0
        self.epochs = 0  # where the run ends, as the steps report it

    def _line(self, s: dict) -> str:
        return (f"epoch {s['epoch']}/{s['epochs']} {_bar(s['batch'] / s['batches'])} "
                f"{s['batch']}/{s['batches']}  loss {s['epoch_loss']:.4f}  {s['samples_per_s']:.0f} samples/s")

    def _show(self, text: str, final: bool) -> None:
        if self.notebook:
            from IPython.display import display

            if self.handle is None:
                self.handle = display({"text/plain": text}, raw=True, display_id=True)
            else:
                self.handle.update({"text/plain": text}, raw=True)
            if final:
                self.handle = None
        elif self.terminal:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
            sys.stderr.flush()
        elif final:
            print(text, file=sys.stderr)

    def step(self, s: dict) -> None:
        self.epochs = s["epochs"]
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.2 and s["batch"] < s["batches"]:
            return
        self.last = now
        if self.notebook or self.terminal:
            self._show(self._line(s), final=False)

    def epoch(self, e: dict) -> None:
        if not self.enabled:
            return
        text = (f"epoch {e['epoch']}/{self.epochs}  loss {e['loss']:.4f}  accuracy {e['accuracy']:.4f}")
        if "val_loss" in e:
            text += f"  val_loss {e['val_loss']:.4f}  val_accuracy {e['val_accuracy']:.4f}"
        text += f"  {e['samples_per_s']:.0f} samples/s  {e['seconds']:.1f} s"
        self._show(text, final=True)
