"""Data as people have it: read-only arrays (np.frombuffer, write=False), memory maps (np.load(mmap_mode="r"),
np.memmap), torch tensors (contiguous or not) and channels-last images train, evaluate and predict as the
plain arrays do, read in place where their layout allows."""

import os
import pathlib

import numpy as np
import pytest

import crumb
from synthetic import images


def run(x, y, **kwargs):
    """Weights after one epoch, then evaluate and predict, on the arrays given."""
    t = crumb.Trainer(model="cnn", batch=16, seed=1, progress=False)
    t.fit(x, y, epochs=1, validation=(x[:16], y[:16]), **kwargs)
    return t.state_dict(), t.evaluate(x[:32], y[:32], **kwargs), t.predict(x[:8], **kwargs)


def same(a, b):
    for name, value in a[0].items():
        np.testing.assert_array_equal(b[0][name], value, err_msg=name)
    assert a[1] == b[1]
    np.testing.assert_array_equal(a[2], b[2])


@pytest.fixture(scope="module")
def reference():
    x, y = images(64)
    return x, y, run(x, y)


def test_read_only_arrays(reference):
    x, y, want = reference
    locked, labels = x.copy(), y.copy()
    locked.flags.writeable = False
    labels.flags.writeable = False
    same(run(locked, labels), want)
    # How IDX files are read: np.frombuffer over bytes.
    buffer = np.frombuffer(x.tobytes(), dtype=np.uint8).reshape(x.shape)
    assert not buffer.flags.writeable
    same(run(buffer, np.frombuffer(y.astype(np.int32).tobytes(), dtype=np.int32)), want)


def test_memory_maps(reference, tmp_path):
    x, y, want = reference
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    same(run(mapped, np.load(tmp_path / "y.npy", mmap_mode="r")), want)
    raw = np.memmap(tmp_path / "raw.bin", dtype=np.uint8, mode="w+", shape=x.shape)
    raw[:] = x
    raw.flush()
    same(run(np.memmap(tmp_path / "raw.bin", dtype=np.uint8, mode="r", shape=x.shape), y), want)


def test_torch_tensors(reference):
    torch = pytest.importorskip("torch")
    x, y, want = reference
    same(run(torch.from_numpy(x), torch.from_numpy(y)), want)
    # Not contiguous: every other channel of a tensor with two copies of each (copied once into C order).
    strided = torch.from_numpy(np.concatenate([x, x], axis=1))[:, ::2]
    assert not strided.is_contiguous()
    same(run(strided, torch.from_numpy(y)), want)
    floats = torch.from_numpy(x.astype(np.float32) / 255).requires_grad_()
    t = crumb.Trainer(model="cnn", batch=16, progress=False)
    t.fit(floats, torch.from_numpy(y), epochs=1)


def test_channels_last_images(reference):
    x, y, want = reference
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    t = crumb.Trainer(model="cnn", batch=16, progress=False)
    with pytest.raises(crumb.Error, match=r"looks like N x H x W x C.*layout='nhwc'"):
        t.fit(nhwc, y)
    same(run(nhwc, y, layout="nhwc"), want)
    trained = crumb.Trainer(model="cnn", batch=16, progress=False)
    trained.fit(x, y, epochs=1)
    with pytest.raises(crumb.Error, match="looks like N x H x W x C"):
        trained.predict(nhwc[:2])
    with pytest.raises(crumb.Error, match="one image\\? add the batch dimension"):
        trained.predict(x[0])


def test_a_one_class_data_set_is_refused():
    x, y = images(32)
    with pytest.raises(crumb.Error, match="at least 2 classes"):
        crumb.Trainer(model="cnn", progress=False).fit(x, np.zeros(32, np.int64))
    crumb.Trainer(model="cnn", classes=2, progress=False, batch=16).fit(x, np.zeros(32, np.int64))


def test_an_iterable_of_chunks(reference, tmp_path):
    x, y, want = reference

    def chunks():  # a generator, read once: uneven chunks, across batch boundaries
        for start, stop in ((0, 10), (10, 37), (37, 64)):
            yield x[start:stop], y[start:stop]

    t = crumb.Trainer(model="cnn", batch=16, seed=1, progress=False)
    t.fit(chunks(), epochs=1, validation=chunks(), spool_dir=tmp_path)
    same((t.state_dict(), t.evaluate(x[:32], y[:32]), t.predict(x[:8])), want)
    assert not list(tmp_path.iterdir())  # the spool file is gone (its space returns with the map)
    torch = pytest.importorskip("torch")
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(data, batch_size=24)
    t = crumb.Trainer(model="cnn", batch=16, seed=1, progress=False)
    t.fit(loader, epochs=1, validation=(x[:16], y[:16]))
    same((t.state_dict(), t.evaluate(x[:32], y[:32]), t.predict(x[:8])), want)
    with pytest.raises(crumb.Error, match="chunk 1 must be a pair"):
        crumb.Trainer(model="cnn", progress=False).fit(iter([(x, y), x]))
    with pytest.raises(crumb.Error, match="chunk 1 x has images of 1x8x8 but the model takes 1x12x12"):
        crumb.Trainer(model="cnn", progress=False).fit(iter([(x, y), images(4, shape=(1, 8, 8))]))
    with pytest.raises(crumb.Error, match="y is missing"):
        crumb.Trainer(model="cnn", progress=False).fit(x)


LARGER_THAN_MEMORY = """
import sys, numpy as np, crumb
n = crumb.nn
x = np.load(sys.argv[1], mmap_mode="r")
y = np.load(sys.argv[2])
model = n.Sequential(n.AvgPool2d(8), n.Flatten(), n.Linear(3 * 8 * 8, 10))  # cheap: the data is the point
h = crumb.Trainer(model=model, batch=512, threads=2, progress=False).fit(x, y, epochs=1)
print(len(x), x.nbytes, h[-1]["loss"])
"""


def test_a_memory_map_larger_than_the_memory_allowed_trains(tmp_path):
    """A data set 4x larger than the memory the process may use (a memory cgroup's limit) trains: the images
    are read in place from the map, the page cache reclaimed as the epoch goes."""
    import subprocess
    import sys
    cgroup = pathlib.Path("/sys/fs/cgroup/memory") / f"crumb-test-{os.getpid()}"
    try:
        cgroup.mkdir()
    except OSError as e:
        pytest.skip(f"no memory cgroup to limit the process with ({e})")
    try:
        limit, shape = 256 << 20, (3, 64, 64)
        (cgroup / "memory.limit_in_bytes").write_text(str(limit))
        n = -(-4 * limit // int(np.prod(shape)))
        x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.uint8, shape=(n, *shape))
        rng = np.random.default_rng(0)
        for start in range(0, n, 4096):
            x[start:start + 4096] = rng.integers(0, 256, (min(4096, n - start), *shape), dtype=np.uint8)
        x.flush()
        del x
        np.save(tmp_path / "y.npy", rng.integers(0, 10, n).astype(np.uint8))
        (tmp_path / "fit.py").write_text(LARGER_THAN_MEMORY)
        r = subprocess.run(["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$0" "$@"', sys.executable,
                            str(tmp_path / "fit.py"), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                           capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr
        count, nbytes, loss = r.stdout.split()
        assert int(count) == n and int(nbytes) >= 4 * limit
        assert np.isfinite(float(loss))
        assert int((cgroup / "memory.max_usage_in_bytes").read_text()) <= limit
    finally:
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except OSError:
                import time
                time.sleep(0.1)


@pytest.mark.parametrize("shuffle", [False, True])
def test_shuffle_off_trains_in_the_data_order(shuffle):
    """shuffle=False (train --shuffle off) takes the batches in the data's own order, every epoch, as
    PyTorch's DataLoader(shuffle=False). With a learning rate of 1e-12 the weights stay put, so each step's
    loss is the loss of the samples it took; lenet5 has no BatchNorm or dropout, so that equals evaluate's
    loss of the same samples. shuffle=True (the default) must then not match, or the test could not fail."""
    x, y = images(32, shape=(1, 28, 28))
    losses = []
    t = crumb.Trainer(model="lenet5", batch=8, lr=1e-12, momentum=0, seed=3, shuffle=shuffle, progress=False)
    t.fit(x, y, epochs=2, callbacks=[crumb.LambdaCallback(on_step=lambda tr, logs: losses.append(logs["loss"]))])
    in_order = [t.evaluate(x[i:i + 8], y[i:i + 8])["loss"] for i in range(0, 32, 8)] * 2
    matches = [abs(a - b) <= 1e-5 * abs(b) for a, b in zip(losses, in_order)]
    assert len(losses) == 8
    assert all(matches) if not shuffle else not all(matches), (losses, in_order)
