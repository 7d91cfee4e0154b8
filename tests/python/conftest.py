"""pytest for the Python module: `import crumb` is the installed package (pip install ., tools/python/test.sh)
or a build's (PYTHONPATH=build/python with -DCRUMB_PYTHON=ON). Tests that compare with the command line
run train: $CRUMB_TRAIN, else build/train."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def train_bin():
    path = pathlib.Path(os.environ.get("CRUMB_TRAIN", ROOT / "build" / "train"))
    if not path.exists():
        pytest.fail(f"{path} is missing: build train first (tools/setup.sh build) or set CRUMB_TRAIN")
    return str(path)


class CrumbRun:
    """One `train` run of a description on arrays: one epoch of one batch (the whole training set) of SGD
    from the given weights, then an evaluation of the test arrays."""

    def __init__(self, train_bin, folder):
        self.train_bin, self.folder = train_bin, pathlib.Path(folder)

    def __call__(self, network, x, y, x_test, y_test, lr, extra=()):
        import numpy as np
        from safetensors.numpy import save_file, load_file

        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        for name, a in (("x", x), ("y", y), ("x_test", x_test), ("y_test", y_test)):
            np.save(data / f"{name}.npy", np.ascontiguousarray(a))
        text, weights = network._crumb_network()
        model = self.folder / "net.json"
        model.write_text(text)
        args = [str(self.train_bin), "--model-file", str(model), "--dataset", "npy", "--data", str(data),
                "--batch", str(len(x)), "--epochs", "1", "--lr", str(lr), "--momentum", "0.9", "--device", "cpu",
                "--save", str(self.folder / "after.safetensors"), *extra]
        if weights is not None:
            save_file({k: np.asarray(v, order="C") for k, v in weights.items()}, str(self.folder / "before.safetensors"))
            args += ["--load", str(self.folder / "before.safetensors")]
        r = subprocess.run(args, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1]), load_file(str(self.folder / "after.safetensors"))


@pytest.fixture
def crumb_run(train_bin, tmp_path):
    return CrumbRun(train_bin, tmp_path)
