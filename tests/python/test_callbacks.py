"""Callbacks, stops and threads: a callback can stop a run exactly as a signal does (saved, resumable to the
bit); an exception raised in a callback (KeyboardInterrupt, BrokenPipeError, the user's own) stops the run
the same way and reaches the caller as itself, never aborting the interpreter; a stop does not outlive its
fit; a Trainer refuses a second call from another thread, and releases the GIL while it trains."""

import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import crumb
from synthetic import images


FLAGS = dict(model="cnn", batch=16, seed=2, lr=0.05, momentum=0.9, progress=False)


def assert_same_weights(a, b):
    for name, value in a.state_dict().items():
        np.testing.assert_array_equal(b.state_dict()[name], value, err_msg=name)


class StopAtStep(crumb.Callback):
    def __init__(self, step):
        self.step = step

    def on_step(self, trainer, logs):
        if logs["step"] == self.step:
            trainer.stop()


def test_hooks_see_the_run_in_order():
    x, y = images(64)
    seen = []
    t = crumb.Trainer(**FLAGS)
    returned = t.fit(x, y, epochs=2, validation=(x[:16], y[:16]), callbacks=[crumb.LambdaCallback(
        on_fit_begin=lambda tr, logs: seen.append(("fit_begin",)),
        on_epoch_begin=lambda tr, logs: seen.append(("epoch_begin", logs["epoch"], logs["epochs"])),
        on_step=lambda tr, logs: seen.append(("step", logs["epoch"], logs["batch"], logs["batches"], logs["step"])),
        on_epoch_end=lambda tr, logs: seen.append(("epoch_end", logs["epoch"], "val_loss" in logs)),
        on_fit_end=lambda tr, logs: seen.append(("fit_end", logs["stopped"])))])
    assert seen[0] == ("fit_begin",) and seen[1] == ("epoch_begin", 1, 2)
    assert seen[2] == ("step", 1, 1, 4, 1) and seen[5] == ("step", 1, 4, 4, 4)
    assert seen[6] == ("epoch_end", 1, True) and seen[7] == ("epoch_begin", 2, 2)
    assert seen[-1] == ("fit_end", False) and len(seen) == 2 + 2 * (4 + 2)
    # fit returns its own epochs, counted from 1 over the run; history keeps them all.
    assert [h["epoch"] for h in returned] == [1, 2]
    assert [h["epoch"] for h in t.fit(x, y, epochs=1)] == [3]
    assert [h["epoch"] for h in t.history] == [1, 2, 3]


def test_a_stop_from_a_callback_is_saved_and_resumes_to_the_bit(tmp_path):
    x, y = images(64)
    whole = crumb.Trainer(**FLAGS)
    whole.fit(x, y, epochs=3)
    stopped = crumb.Trainer(save=tmp_path / "run.safetensors", **FLAGS)
    stopped.fit(x, y, epochs=3, callbacks=[StopAtStep(6)])
    assert stopped._run.info()["steps"] == 6
    resumed = crumb.Trainer(resume=tmp_path / "run.safetensors", **FLAGS)
    resumed.fit(x, y, epochs=3)
    assert resumed._run.info()["steps"] == 12
    assert_same_weights(whole, resumed)
    # The stop ended that fit only: the next one trains its whole epoch.
    stopped.fit(x, y, epochs=1)
    assert stopped._run.info()["steps"] == 6 + 4


def test_early_stopping(tmp_path):
    x, y = images(64)
    flags = {**FLAGS, "lr": 1e-9, "momentum": 0.0}  # the loss does not move: no epoch improves on the first
    t = crumb.Trainer(save=tmp_path / "run.safetensors", **flags)
    stop = crumb.EarlyStopping(monitor="val_loss", patience=2, min_delta=1e-3)
    history = t.fit(x, y, epochs=10, validation=(x[:16], y[:16]), callbacks=[stop])
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert stop.stopped_epoch == 3 and stop.best_epoch == 1
    resumed = crumb.Trainer(resume=tmp_path / "run.safetensors", **flags)
    assert [h["epoch"] for h in resumed.fit(x, y, epochs=4)] == [4]  # saved after its third epoch
    with pytest.raises(crumb.Error, match="no 'val_accuracy' to monitor"):
        crumb.Trainer(**FLAGS).fit(x, y, epochs=2, callbacks=[crumb.EarlyStopping(monitor="val_accuracy")])


def test_early_stopping_restores_the_best_weights():
    x, y = images(64)
    best = {}

    class Spoiler(crumb.Callback):  # the loss improves, then the weights are spoilt by a huge step
        def on_epoch_end(self, trainer, logs):
            if logs["epoch"] == 1:
                best.update(trainer.state_dict())
                trainer.load_state_dict({k: v * (3 if k.endswith("weight") else 1) for k, v in best.items()})

    stop = crumb.EarlyStopping(monitor="loss", patience=1, restore_best_weights=True)
    t = crumb.Trainer(**FLAGS)
    t.fit(x, y, epochs=6, callbacks=[stop, Spoiler()])
    assert stop.best_epoch == 1
    for name, value in best.items():
        np.testing.assert_array_equal(t.state_dict()[name], value, err_msg=name)


class Boom(Exception):
    pass


# Where each stops: after the raising step; after the first step of the second epoch; at its end.
@pytest.mark.parametrize("event,steps", [("on_step", 6), ("on_epoch_begin", 5), ("on_epoch_end", 8)])
def test_an_exception_in_a_callback_stops_saved_and_reaches_the_caller(tmp_path, event, steps):
    x, y = images(64)

    def hook(trainer, logs):
        if (logs["step"] == 6) if event == "on_step" else logs["epoch"] == 2:
            raise Boom(event)

    t = crumb.Trainer(save=tmp_path / "run.safetensors", **FLAGS)
    with pytest.raises(Boom, match=event):
        t.fit(x, y, epochs=3, callbacks=[crumb.LambdaCallback(**{event: hook})])
    assert t._run.info()["steps"] == steps
    resumed = crumb.Trainer(resume=tmp_path / "run.safetensors", **FLAGS)
    resumed.fit(x, y, epochs=3)
    whole = crumb.Trainer(**FLAGS)
    whole.fit(x, y, epochs=3)
    assert_same_weights(whole, resumed)
    t.fit(x, y, epochs=1)  # the stop request did not outlive the fit
    assert t._run.info()["steps"] == steps + 4


SCRIPT = """
import os, signal, sys, threading, numpy as np, crumb
rng = np.random.default_rng(0)
x = rng.integers(0, 256, (256, 1, 12, 12), dtype=np.uint8); y = rng.integers(0, 4, 256)
xv = rng.integers(0, 256, (20000, 1, 12, 12), dtype=np.uint8); yv = rng.integers(0, 4, 20000)
t = crumb.Trainer(model="cnn", batch=64, save=sys.argv[1], progress={progress})
{body}
"""

CTRL_C_DURING_VALIDATION = """
def at_epoch_end(tr, s):
    if s["batch"] == s["batches"]:  # the validation comes next
        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    t.fit(x, y, epochs=3, validation=(xv, yv), callbacks=[crumb.LambdaCallback(on_step=at_epoch_end)])
except KeyboardInterrupt:
    print("KeyboardInterrupt at step", t._run.info()["steps"])
t.fit(x, y, epochs=1)
print("trained on to step", t._run.info()["steps"])
"""


def run_script(tmp_path, body, progress=False, **kwargs):
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT.format(body=textwrap.dedent(body), progress=progress))
    return subprocess.run([sys.executable, str(script), str(tmp_path / "run.safetensors")], timeout=300, **kwargs)


def test_ctrl_c_during_validation_raises_keyboard_interrupt(tmp_path):
    r = run_script(tmp_path, CTRL_C_DURING_VALIDATION, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "KeyboardInterrupt at step 4" in r.stdout, r.stdout
    assert "trained on to step 8" in r.stdout  # a whole epoch: the Ctrl-C did not outlive its fit
    assert (tmp_path / "run.safetensors").exists()


SIGTERM_MID_EPOCH = """
def at_step(tr, s):
    if s["step"] == 2:
        os.kill(os.getpid(), signal.SIGTERM)
try:
    t.fit(x, y, epochs=3, callbacks=[crumb.LambdaCallback(on_step=at_step)])
finally:
    print("stopped at step", t._run.info()["steps"], flush=True)
"""


def test_sigterm_stops_saves_and_exits_143(tmp_path):
    # timeout's or a batch system's SIGTERM (here during step 2's callback, so the engine sees it at the
    # next step): the run stops after step 3, save= holds it, and the program ends with 128 + 15 through
    # SystemExit (finally blocks run), where the default action lost the steps since the last save.
    r = run_script(tmp_path, SIGTERM_MID_EPOCH, capture_output=True, text=True)
    assert r.returncode == 143, (r.returncode, r.stderr)
    assert "stopped at step 3" in r.stdout, r.stdout
    data = (tmp_path / "run.safetensors").read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    assert header["__metadata__"]["optimizer_steps"] == "3"


SIGTERM_FROM_OUTSIDE = """
t.fit(x, y, epochs=1)
print("first fit done", flush=True)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
try:
    t.fit(x, y, epochs=400)
finally:
    print("stopped at step", t._run.info()["steps"], flush=True)
"""


def test_sigterm_while_the_engine_runs_stops_it_and_the_default_returns_after(tmp_path):
    # SIGTERM while no Python code runs (the steps themselves): the engine's handler, installed for the fit
    # only, notes it and the run stops after the step in progress; a fit that ended normally left
    # SIGTERM's default behind (the first fit here; the last line's kill ends the process at once).
    r = run_script(tmp_path, SIGTERM_FROM_OUTSIDE, capture_output=True, text=True)
    assert r.returncode == 143, (r.returncode, r.stderr)
    stopped = int(r.stdout.split("stopped at step")[1].split()[0])
    assert 4 < stopped < 4 + 400 * 4, r.stdout
    data = (tmp_path / "run.safetensors").read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    assert header["__metadata__"]["optimizer_steps"] == str(stopped)
    after = run_script(tmp_path, "t.fit(x, y, epochs=1)\nos.kill(os.getpid(), signal.SIGTERM)\nprint('alive')",
                       capture_output=True, text=True)
    assert after.returncode == -signal.SIGTERM and "alive" not in after.stdout, (after.returncode, after.stdout)


def test_a_closed_stderr_stops_the_run_with_broken_pipe(tmp_path):
    # python fit.py 2>&1 | head: the progress lines meet a closed pipe.
    read, write = os.pipe()
    os.close(read)
    r = run_script(tmp_path, "t.fit(x, y, epochs=3)", progress=True, stderr=write, stdout=subprocess.PIPE)
    os.close(write)
    assert r.returncode == 120 or r.returncode == 1, r.returncode  # a Python exception, not SIGABRT (-6)
    assert (tmp_path / "run.safetensors").exists()


def test_a_trainer_refuses_a_second_thread_and_releases_the_gil():
    x, y = images(1024)
    t = crumb.Trainer(**FLAGS)
    t.fit(x[:32], y[:32], epochs=1)
    started, errors, ticks = threading.Event(), [], []

    def first():
        t.fit(x, y, epochs=2, callbacks=[crumb.LambdaCallback(on_step=lambda tr, s: started.set())])

    worker = threading.Thread(target=first)
    worker.start()
    assert started.wait(60)
    for call in (lambda: t.fit(x, y, epochs=1), lambda: t.predict(x[:2]), lambda: t.state_dict(),
                 lambda: t.load_state_dict({}), lambda: t.save("/tmp/never.safetensors")):
        with pytest.raises(crumb.Error, match="running fit in another thread"):
            call()
    while worker.is_alive():  # Python runs meanwhile: the engine trains without the GIL
        ticks.append(1)
        worker.join(0.001)
    assert len(ticks) > 10
    assert t._run.info()["steps"] == 2 + 2 * 64
    assert not pathlib.Path("/tmp/never.safetensors").exists()
