"""What the Python module costs: the same training run through `train` (on .npy files) and through
crumb.Trainer.fit (on the same arrays in memory), alternately, best of N samples/s each.

    PYTHONPATH=build/python .venv-py/bin/python tools/bench/python_overhead.py [--model cnn] [--repeat 3]

(or with the module installed: pip install .). Prints one line per run and the ratio Python / train; and
the least CPU seconds of each (the train process, all of it; the Python process's while it trains), which
on a machine shared with other jobs moves far less than samples/s.
"""

import argparse
import json
import pathlib
import resource
import subprocess
import tempfile
import time

import numpy as np

import crumb

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--train", default=str(ROOT / "build" / "train"))
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(a.samples, 1, 28, 28), dtype=np.uint8)
    y = (x[:, 0, :14].mean(axis=(1, 2)) > x[:, 0, 14:].mean(axis=(1, 2))).astype(np.int64)
    flags = dict(model=a.model, batch=a.batch, threads=a.threads, lr=0.05, seed=0)
    best = {"train": 0.0, "python": 0.0}
    cpu = {"train": float("inf"), "python": float("inf")}
    with tempfile.TemporaryDirectory() as d:
        for name, array in (("x", x), ("y", y), ("x_test", x[:256]), ("y_test", y[:256])):
            np.save(f"{d}/{name}.npy", array)
        for i in range(a.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([a.train, "--dataset=npy", f"--data={d}", "--epochs=1",
                                  *[f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]],
                                 capture_output=True, text=True, check=True).stdout
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cli_cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            cli = json.loads(out.strip().splitlines()[-1])["samples_per_s"]
            start = time.process_time()
            t = crumb.Trainer(mean=0.5, std=0.5, progress=False, **flags)
            py = t.fit(x, y, epochs=1, validation=(x[:256], y[:256]))[-1]["samples_per_s"]
            py_cpu = time.process_time() - start
            print(f"run {i + 1}: train {cli:.0f} samples/s ({cli_cpu:.2f} CPU s), "
                  f"crumb.Trainer {py:.0f} samples/s ({py_cpu:.2f} CPU s)")
            best["train"], best["python"] = max(best["train"], cli), max(best["python"], py)
            cpu["train"], cpu["python"] = min(cpu["train"], cli_cpu), min(cpu["python"], py_cpu)
    print(f"best of {a.repeat}: train {best['train']:.0f}, Python {best['python']:.0f} samples/s; "
          f"ratio {best['python'] / best['train']:.3f}")
    print(f"least of {a.repeat}: train {cpu['train']:.2f}, Python {cpu['python']:.2f} CPU s; "
          f"ratio train / Python {cpu['train'] / cpu['python']:.3f}")


if __name__ == "__main__":
    main()
