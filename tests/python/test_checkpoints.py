"""Save, load and predict never lie: a checkpoint's weights are the ones used, whatever the model came from; a
checkpoint alone is enough to predict (model, classes, image shape and normalisation come from it), one image
at a time too; the normalisation is visible; images of another pixel type than the training ones are either
read the documented way or refused."""

import json
import subprocess
import warnings

import numpy as np
import pytest

import crumb


def images(n, seed=0, shape=(1, 12, 12), classes=4):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    y = (x.reshape(n, -1)[:, :8].sum(axis=1) % classes).astype(np.int64)
    return x, y


def torch_cnn():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 10 * 10, 4))


def trained(model, tmp_path, x, y, batch=16, **flags):
    t = crumb.Trainer(model=model, progress=False, batch=batch, **{"lr": 0.5, **flags})
    t.fit(x, y, epochs=2)
    path = tmp_path / "run.safetensors"
    t.save(path)
    return t, path


@pytest.mark.parametrize("kind", ["builtin", "nn", "from_torch"])
def test_a_checkpoint_loads_into_every_kind_of_model(tmp_path, kind):
    x, y = images(64)

    def model():
        if kind == "builtin":
            return "cnn"
        if kind == "nn":
            n = crumb.nn
            return n.Sequential(n.Conv2d(1, 4, 3), n.ReLU(), n.Flatten(), n.Linear(4 * 10 * 10, 4))
        return crumb.from_torch(torch_cnn(), (1, 12, 12))

    t, path = trained(model(), tmp_path, x, y)
    want = t.predict(x[:8])
    # The converted model's own weights differ from the checkpoint's: they must not survive the load.
    later = crumb.Trainer(model=model(), classes=4, progress=False)
    later.load(path)
    np.testing.assert_array_equal(later.predict(x[:8]), want)
    given = crumb.Trainer(model=model(), classes=4, progress=False, load=path)
    np.testing.assert_array_equal(given.predict(x[:8]), want)
    # A state dict given after load() wins, as the latest call.
    ref = crumb.Trainer(model=model(), classes=4, mean=0.5, std=0.5, progress=False, seed=5)
    fresh = ref.predict(x[:8])
    last = crumb.Trainer(model=model(), classes=4, mean=0.5, std=0.5, progress=False)
    last.load(path)
    last.load_state_dict(ref.state_dict())
    np.testing.assert_array_equal(last.predict(x[:8]), fresh)


def test_a_checkpoint_of_another_model_is_refused_naming_the_tensor(tmp_path):
    x, y = images(64)
    _, path = trained("cnn", tmp_path, x, y)
    t = crumb.Trainer(model="mlp", progress=False, load=path)
    with pytest.raises(crumb.Error, match=r"fc1\.weight|0\.weight|is missing|has no"):
        t.predict(x[:2])


@pytest.mark.parametrize("model", ["cnn", "resnet20"])
def test_a_checkpoint_alone_predicts(tmp_path, model):
    shape = (3, 16, 16) if model == "resnet20" else (1, 12, 12)
    x, y = images(64, shape=shape)
    t, path = trained(model, tmp_path, x, y, batch=32, lr=0.05, mean=[0.4] * shape[0], std=[0.3] * shape[0])
    want = t.predict(x[:8])
    alone = crumb.Trainer(load=path, progress=False)  # no model=, classes= or mean/std
    assert alone.classes == 4
    assert alone.mean == pytest.approx([0.4] * shape[0]) and alone.std == pytest.approx([0.3] * shape[0])
    np.testing.assert_allclose(alone.predict(x[:8]), want, rtol=1e-5, atol=1e-5)
    # One image first, with a BatchNorm model too: the plan does not depend on the BatchNorm group.
    one = crumb.Trainer(load=path, progress=False)
    np.testing.assert_allclose(one.predict(x[:1]), want[:1], rtol=1e-5, atol=1e-5)
    # The model it was planned with trains on afterwards.
    one.fit(x, y, epochs=1)


def test_a_checkpoint_of_train_predicts_as_train_evaluates(train_bin, tmp_path):
    x, y = images(96)
    xt, yt = images(40, seed=1)
    for name, a in (("x", x), ("y", y), ("x_test", xt), ("y_test", yt)):
        np.save(tmp_path / f"{name}.npy", a)
    path = tmp_path / "cli.safetensors"
    r = subprocess.run([train_bin, "--model=cnn", "--dataset=npy", f"--data={tmp_path}", "--batch=16", "--lr=0.2",
                        f"--save={path}", "--threads=1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    # train normalised the uint8 .npy images with 0.5/0.5; the checkpoint says so, and Python uses it.
    t = crumb.Trainer(load=path, progress=False, threads=1)
    assert t.mean == [0.5] and t.std == [0.5]
    e = t.evaluate(xt, yt)
    assert e["accuracy"] == pytest.approx(summary["test_accuracy"], abs=1e-9)


def test_preprocess_is_what_the_model_sees(tmp_path):
    x, y = images(64)
    t, _ = trained("cnn", tmp_path, x, y)
    mean, std = np.float32(t.mean[0]), np.float32(t.std[0])
    seen = t.preprocess(x[:8])
    assert seen.dtype == np.float32 and seen.shape == (8, 1, 12, 12)
    np.testing.assert_array_equal(seen, (x[:8].astype(np.float32) / np.float32(255) - mean) / std)
    # The same weights fed the preprocessed images as float32, normalised with nothing: the same logits.
    raw = crumb.Trainer(model="cnn", classes=4, mean=0.0, std=1.0, progress=False)
    raw.load_state_dict(t.state_dict())
    np.testing.assert_array_equal(raw.predict(seen), t.predict(x[:8]))


def test_float_images_for_a_uint8_model_say_what_happens(tmp_path):
    x, y = images(64)
    t, path = trained("cnn", tmp_path, x, y)
    scaled = x[:8].astype(np.float32) / np.float32(255)
    with pytest.warns(UserWarning, match="pixel / 255"):
        got = t.predict(scaled)
    np.testing.assert_array_equal(got, t.predict(x[:8]))
    with pytest.raises(crumb.Error, match=r"trained on uint8 images.*\[0, 255\]"):
        t.predict(x[:8].astype(np.float32))
    with pytest.raises(crumb.Error, match="trained on uint8"):
        crumb.Trainer(load=path, progress=False).evaluate(x[:8].astype(np.float32) * 2, y[:8])
    f = crumb.Trainer(model="cnn", progress=False, batch=16)
    f.fit(scaled, y[:8], epochs=1)
    with pytest.raises(crumb.Error, match="trained on float32"):
        f.predict(x[:2])


def test_weights_without_a_known_normalisation_warn(tmp_path):
    x, y = images(16)
    t = crumb.Trainer(model="cnn", classes=4, progress=False)
    with pytest.warns(UserWarning, match="no normalisation is known"):
        t.predict(x[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        crumb.Trainer(model="cnn", classes=4, mean=0.5, std=0.25, progress=False).predict(x[:2])
