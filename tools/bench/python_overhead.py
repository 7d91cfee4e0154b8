"""What the Python module costs: the same training run through `train` (on .npy files) and through
crumb.Trainer.fit (on the same arrays in memory), alternately, best of N samples/s each.

    PYTHONPATH=build/python .venv-py/bin/python tools/bench/python_overhead.py [--model cnn] [--repeat 3]

(or with the module installed: pip install .). Prints one line per run and the ratio Python / train.
"""

import argparse
import json
import pathlib
import subprocess
import tempfile

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
    with tempfile.TemporaryDirectory() as d:
        for name, array in (("x", x), ("y", y), ("x_test", x[:256]), ("y_test", y[:256])):
            np.save(f"{d}/{name}.npy", array)
        for i in range(a.repeat):
            out = subprocess.run([a.train, "--dataset=npy", f"--data={d}", "--epochs=1",
                                  *[f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]],
                                 capture_output=True, text=True, check=True).stdout
            cli = json.loads(out.strip().splitlines()[-1])["samples_per_s"]
            t = crumb.Trainer(mean=0.5, std=0.5, progress=False, **flags)
            py = t.fit(x, y, epochs=1, validation=(x[:256], y[:256]))[-1]["samples_per_s"]
            print(f"run {i + 1}: train {cli:.0f} samples/s, crumb.Trainer {py:.0f} samples/s")
            best["train"], best["python"] = max(best["train"], cli), max(best["python"], py)
    print(f"best of {a.repeat}: train {best['train']:.0f}, Python {best['python']:.0f} samples/s; "
          f"ratio {best['python'] / best['train']:.3f}")


if __name__ == "__main__":
    main()
