"""The Python module against the train program it drives the same engine as: the same plans, the same
weights from the same data and seed; and bad input as crumb.Error, never a crash."""

import os
import signal
import subprocess
import threading
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import crumb
from synthetic import images


def run_train(train_bin, *args):
    r = subprocess.run([train_bin, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("model,input,extra", [
    # auto's choice between swap and recompute rests on measured kernel times: it may differ between runs.
    ("resnet20", (3, 32, 32), dict(memory_budget="96MiB", strategy="micro-batch")),
    ("resnet50", (3, 224, 224), dict(memory_budget="16GiB", precision="bf16")),
    ("vgg11_bn", (3, 32, 32), dict(memory_budget="3GiB", strategy="micro-batch", optimizer="adamw")),
])
def test_plan_is_what_train_explains(train_bin, model, input, extra):
    p = crumb.plan(model=model, input=input, classes=10, batch=256, **extra)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in extra.items()]
    out = run_train(train_bin, f"--model={model}", "--dataset=synthetic", f"--input={'x'.join(map(str, input))}",
                    "--classes=10", "--batch=256", "--explain", *flags)
    # Every line but the strategy search's measured kernel times and copy bandwidth.
    def planned(text):
        return [line for line in text.splitlines() if "measured at" not in line]
    assert planned(p.explain()) == planned(out)
    assert len(planned(out)) > 20
    assert f"micro-batch(es) of {p.micro_batch} " in out
    assert p.arena_bytes > 0 and p.total_bytes <= p.budget
    # The breakdown's rows and the sweep agree with the plan.
    rows = {r["part"]: r["bytes"] for r in p.breakdown}
    assert rows["total"] == p.total_bytes
    chosen = [s for s in p.sweep() if s["micro_batch"] == p.micro_batch]
    assert chosen and chosen[0]["total"] == p.total_bytes


def test_fuse_keyword(train_bin):
    """fuse= is train's --fuse, a bool as the other on|off options are. The plan names the fused steps."""
    fused = crumb.plan(model="resnet20", input=(3, 32, 32), batch=32).explain()
    assert "layer1.0.bn2+add+relu" in fused and "batch_norm_add_relu_backward" in fused
    assert crumb.plan(model="resnet20", input=(3, 32, 32), batch=32, fuse=True).explain() == fused
    plain = crumb.plan(model="resnet20", input=(3, 32, 32), batch=32, fuse=False).explain()
    assert "+relu" not in plain and "layer1.0.relu2" in plain
    out = run_train(train_bin, "--model=resnet20", "--dataset=synthetic", "--input=3x32x32", "--batch=32",
                    "--explain", "--fuse=off")
    assert out.splitlines() == plain.splitlines()


def test_plan_pictures_and_report(tmp_path):
    p = crumb.plan(model="cnn", batch=512, memory_budget="8MiB")
    assert p.micro_batch < 512
    html = p._repr_html_()
    assert html.startswith("<div") and html.count("<svg") >= 3
    assert p.svg("sweep").startswith("<svg")
    assert {b["role"] for b in p.blocks} >= {"activation"}
    assert len(p.timeline) > 10
    bigger = p.sweep([p.micro_batch, 512])
    assert bigger[0]["fits"] and not bigger[1]["fits"] and bigger[1]["total"] > bigger[0]["total"]
    p.save_report(tmp_path / "r.html", tmp_path / "pictures")
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "pictures" / "arena_map.svg").exists()


def test_plan_frontier(train_bin):
    """Plan.frontier() is train --explain --frontier's table: from the least memory to in memory, each point
    faster than the one before, ending with the plan in memory."""
    kw = dict(model="resnet20", input=(3, 16, 16), classes=4, batch=16, bn_group=8, micro_batch=16,
              memory_budget="10MiB", strategy="recompute")
    p = crumb.plan(**kw)
    points = p.frontier()
    assert len(points) >= 2
    assert points[-1]["plan"] == "in memory" and points[-1]["memory_ratio"] == 1.0
    assert all(p["swapped"] == 0 for p in points)
    for a, b in zip(points, points[1:]):
        assert a["total"] < b["total"] and a["predicted_s"] > b["predicted_s"]
    assert points[0]["fits"] and not points[-1]["fits"]
    out = run_train(train_bin, "--model=resnet20", "--dataset=synthetic", "--input=3x16x16", "--classes=4",
                    "--batch=16", "--bn-group=8", "--micro-batch=16", "--memory-budget=10MiB",
                    "--strategy=recompute", "--frontier")
    table = out[out.index("memory-time frontier"):].splitlines()[2:]
    # The ends are planned (the same every run); the points between are chosen by measured kernel times.
    memory = [" ".join(line.split()[:2]) for line in table if line.strip()]
    assert memory[0] == crumb.format_bytes(points[0]["total"])
    assert memory[-1] == crumb.format_bytes(points[-1]["total"])
    # The picture draws the points frontier() returned (measured once per plan), the budget's one marked.
    svg = ET.fromstring(p.svg("frontier"))
    drawn = [c for c in svg.iter("{http://www.w3.org/2000/svg}circle") if c.get("class") == "point"]
    assert [(int(c.get("data-total")), float(c.get("data-seconds"))) for c in drawn] == \
        [(q["total"], pytest.approx(q["predicted_s"], rel=1e-12)) for q in points]
    assert int(svg.get("data-marked")) == max(i for i, q in enumerate(points) if q["fits"])
    assert [int(r["memory_bytes"]) for r in p.table("frontier")] == [q["total"] for q in points]
    assert 'id="frontier"' in p._repr_html_()


def test_fit_gives_the_weights_of_train(train_bin, tmp_path):
    x, y = images(120)
    xt, yt = images(30, seed=1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "x_test.npy", xt)
    np.save(tmp_path / "y_test.npy", yt)
    flags = dict(batch=32, micro_batch=8, lr=0.05, seed=3, threads=1)
    run_train(train_bin, "--model=cnn", "--dataset=npy", f"--data={tmp_path}", "--epochs=2",
              f"--save={tmp_path / 'cli.safetensors'}", *[f"--{k.replace('_', '-')}={v}" for k, v in flags.items()])
    # train normalises uint8 .npy images with mean 0.5 and std 0.5 (engine/data/npy.h).
    t = crumb.Trainer(model="cnn", mean=0.5, std=0.5, progress=False, **flags)
    history = t.fit(x, y, epochs=2, validation=(xt, yt))
    assert [h["epoch"] for h in history] == [1, 2]
    assert all(k in history[-1] for k in ("loss", "accuracy", "val_loss", "val_accuracy", "samples_per_s",
                                          "memory_bytes", "max_rss_bytes"))
    assert history[-1]["arena_bytes"] < history[-1]["memory_bytes"] < history[-1]["max_rss_bytes"]
    cli = crumb.Trainer(model="cnn", classes=4, progress=False, **flags)
    cli.load(tmp_path / "cli.safetensors")
    cli.evaluate(xt, yt)  # plans the model for the images, with the loaded weights
    ours, theirs = t.state_dict(), cli.state_dict()
    assert list(ours) == list(theirs) == ["0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias",
                                          "9.weight", "9.bias"]
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    # evaluate and predict agree with each other.
    e = t.evaluate(xt, yt)
    logits = t.predict(xt)
    assert logits.shape == (30, 4) and logits.dtype == np.float32
    assert e["accuracy"] == pytest.approx((logits.argmax(1) == yt).mean())
    z = logits - logits.max(1, keepdims=True)
    loss = (np.log(np.exp(z).sum(1)) - z[np.arange(30), yt]).mean()
    assert e["loss"] == pytest.approx(loss, rel=1e-5)
    # A checkpoint saved from Python is train's: it loads back to the same weights.
    t.save(tmp_path / "py.safetensors")
    again = crumb.Trainer(model="cnn", classes=4, progress=False)
    again.load(tmp_path / "py.safetensors")
    # (in other chunks than t's micro-batches of 8: float rounding differs)
    np.testing.assert_allclose(again.predict(xt), logits, rtol=1e-5, atol=1e-6)


def test_the_optimizer_steps_in_the_backward_pass_where_nothing_else_fits():
    """Below the in-memory total of one micro-batch, the gradients go into the arena and each parameter is
    updated as soon as its last reader is done: the plan says so, and training gives the same weights."""
    kw = dict(model="mlp", batch=64, micro_batch=64, optimizer="adamw")
    roomy = crumb.plan(**kw, input=(1, 12, 12), classes=4)
    assert not roomy.step_in_backward
    budget = roomy.total_bytes - 100 * 1024  # mlp's gradients take 168 KiB more kept than in the arena
    tight = crumb.plan(**kw, input=(1, 12, 12), classes=4, memory_budget=budget)
    assert tight.step_in_backward and tight.total_bytes <= budget
    assert "the optimizer steps in the backward pass" in tight.split
    x, y = images(160)
    weights = []
    for b in (None, budget):
        t = crumb.Trainer(**kw, memory_budget=b, progress=False, seed=3)
        t.fit(x, y, epochs=2)
        weights.append(t.state_dict())
    for name, value in weights[0].items():
        np.testing.assert_array_equal(weights[1][name], value, err_msg=name)


def test_later_fits_continue_the_run():
    x, y = images(64)
    t = crumb.Trainer(model="cnn", batch=16, progress=False, seed=1)
    t.fit(x, y, epochs=1)
    t.fit(x, y, epochs=2)
    assert [h["epoch"] for h in t.history] == [1, 2, 3]
    assert t.history[-1]["step"] == 12
    whole = crumb.Trainer(model="cnn", batch=16, progress=False, seed=1)
    whole.fit(x, y, epochs=3)
    for name, value in whole.state_dict().items():
        np.testing.assert_array_equal(t.state_dict()[name], value, err_msg=name)


def test_ctrl_c_stops_at_a_step_with_the_weights_intact(tmp_path):
    x, y = images(2048, shape=(1, 28, 28))
    t = crumb.Trainer(model="cnn", batch=16, progress=False, save=tmp_path / "run.safetensors")
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        t.fit(x, y, epochs=20)
    timer.join()
    steps = t._run.info()["steps"]
    assert 0 < steps < 20 * 128
    assert (tmp_path / "run.safetensors").exists()  # saved at the stop, as train does
    for value in t.state_dict().values():
        assert np.isfinite(value).all()
    saved = crumb.Trainer(model="cnn", classes=4, progress=False)
    saved.load(tmp_path / "run.safetensors")
    saved.predict(x[:2])
    np.testing.assert_array_equal(saved.state_dict()["0.weight"], t.state_dict()["0.weight"])
    t.fit(x[:64], y[:64], epochs=1)  # and the run goes on


BAD_ARRAYS = [
    (lambda x, y: (x.astype(np.float64), y), "uint8 or float32"),
    (lambda x, y: (x[:, 0], y), "4 dimensions"),
    (lambda x, y: (x, y[:-1]), "one label per sample"),
    (lambda x, y: (x, y.astype(np.float32)), "integer class labels"),
    (lambda x, y: (x, y - 5), r"outside \[0, 2\^31 - 1\): -5"),
    (lambda x, y: (x, np.where(np.arange(len(y)) == 3, 2**31 - 1, y)), r"outside \[0, 2\^31 - 1\): 0\.\.2147483647"),
    # The engine refuses one class for every client, as train refuses all-zero labels.
    (lambda x, y: (x, np.zeros_like(y)), "has 1 class \\(every label is 0\\): training needs at least 2 classes"),
    (lambda x, y: (np.full(x.shape, np.nan, np.float32), y), "NaN"),
    (lambda x, y: (x[:0], y[:0]), "no samples"),
    (lambda x, y: (object(), y), "numpy array or a torch tensor"),
]


@pytest.mark.parametrize("make,message", BAD_ARRAYS)
def test_bad_arrays_raise_one_error(make, message):
    x, y = images(32)
    t = crumb.Trainer(model="cnn", progress=False)
    with pytest.raises(crumb.Error, match=message):
        t.fit(*make(x, y))


@pytest.mark.parametrize("mean,std,message", [
    (float("nan"), 1.0, r"mean\[0\] is nan"),
    (0.5, 0.0, r"std\[0\] is 0"),
    (0.5, float("inf"), r"std\[0\] is inf"),
])
def test_bad_normalisation_is_refused_where_it_is_given(mean, std, message):
    x, y = images(32)
    with pytest.raises(crumb.Error, match=message):
        crumb.Trainer(model="cnn", mean=mean, std=std, progress=False).fit(x, y)


@pytest.mark.parametrize("kwargs,message", [
    (dict(lr=-1), "--lr"),
    (dict(model="resnet9000"), "resnet9000"),
    (dict(optimizer="adam"), "--optimizer"),
    (dict(momentum=0.9, optimizer="adamw"), "--momentum"),
    (dict(memory_budget="lots"), "--memory-budget"),
    (dict(precision="fp8"), "--precision"),
    (dict(model=42), "model="),
])
def test_bad_arguments_raise_one_error(kwargs, message):
    with pytest.raises(crumb.Error, match=message):
        crumb.Trainer(progress=False, **kwargs)


def test_errors_during_a_run_are_errors_not_crashes():
    x, y = images(32)
    t = crumb.Trainer(model="cnn", classes=4, progress=False)
    with pytest.raises(crumb.Error, match="classes"):
        t.fit(x, y + 4)
    with pytest.raises(crumb.Error, match="more than a 32-bit class count"):
        crumb.Trainer(model="cnn", classes=2**31, progress=False).fit(x, y)
    with pytest.raises(crumb.Error, match="no weights yet"):
        t.state_dict()
    t.fit(x, y)
    with pytest.raises(crumb.Error, match="3x12x12 but the model takes 1x12x12"):
        t.fit(*images(32, shape=(3, 12, 12)))
    with pytest.raises(crumb.Error, match="1x16x16 but the model takes 1x12x12"):
        t.predict(images(4, shape=(1, 16, 16))[0])
    with pytest.raises(crumb.Error, match="missing"):
        t.load_state_dict({"0.weight": t.state_dict()["0.weight"]})
    with pytest.raises(crumb.Error, match="shape"):
        t.load_state_dict({**t.state_dict(), "0.bias": np.zeros(3, np.float32)})
    with pytest.raises(crumb.Error, match="budget"):
        crumb.plan(model="resnet50", input=(3, 224, 224), batch=64, memory_budget="1MiB")
    with pytest.raises(crumb.Error, match="diverged"):
        crumb.Trainer(model="cnn", lr=1e5, progress=False, batch=8).fit(x, y, epochs=3)


def test_load_state_dict_converts_as_torch_and_refuses_what_it_cannot_load():
    """Weights as people have them (float64 or float16 numpy, torch tensors in bfloat16, big-endian, strided)
    load as torch's load_state_dict would load them, converted to float32; a NaN, an object array or a mapping
    that is not one is refused with one line naming it, and nothing is loaded then."""
    torch = pytest.importorskip("torch")
    x, y = images(16, shape=(1, 8, 8))
    t = crumb.Trainer(model="mlp", classes=10, batch=8, progress=False)
    t.fit(x, y)
    ref = t.state_dict()
    name = next(k for k, v in ref.items() if v.ndim == 2)
    w = np.random.default_rng(1).standard_normal(ref[name].shape)
    bf16 = torch.from_numpy(w).to(torch.bfloat16)
    for given, expect in [(w, w.astype(np.float32)), (w.astype(np.float16), w.astype(np.float16).astype(np.float32)),
                          (bf16, bf16.float().numpy()),
                          (w.astype(">f4"), w.astype(np.float32)), (np.asfortranarray(w), w.astype(np.float32))]:
        t.load_state_dict({**ref, name: given})
        np.testing.assert_array_equal(t.state_dict()[name], expect)
    t.load_state_dict(ref)
    bad = w.copy()
    bad[1, 2] = np.nan
    for given, said in [({**ref, name: bad}, f"load_state_dict: '{name}' holds nan at [1, 2] (1 value(s) not finite)"),
                        ({**ref, name: np.array([None] * 3)}, f"load_state_dict: '{name}' holds object values"),
                        ({**ref, name: w.astype(np.int32)}, f"load_state_dict: '{name}' is I64 but the model's is F32"),
                        ([1, 2], "load_state_dict takes a mapping of names to arrays (a state_dict), got list")]:
        with pytest.raises(crumb.Error) as e:
            t.load_state_dict(given)
        assert said in str(e.value)
        for k, v in ref.items():
            np.testing.assert_array_equal(t.state_dict()[k], v)


def test_outputs_never_replace_inputs(tmp_path, train_bin):
    """The Trainer checks its files for every client: load= and save= naming one checkpoint is train's error,
    before anything is written."""
    x, y = images(64)
    a = tmp_path / "a.safetensors"
    crumb.Trainer(model="cnn", batch=16, progress=False, save=a).fit(x, y, epochs=1)
    before = a.read_bytes()
    r = subprocess.run([train_bin, "--model=cnn", f"--load={a}", f"--save={a}"], capture_output=True, text=True)
    assert r.returncode == 1
    said = r.stderr.strip().splitlines()[-1].removeprefix("train: error: ")
    assert said == f"--save {a} is the same file as --load {a}, which the run reads: give --save a file of its own"
    with pytest.raises(crumb.Error) as e:
        crumb.Trainer(model="cnn", batch=16, progress=False, load=a, save=a).fit(x, y, epochs=1)
    assert str(e.value) == said
    assert a.read_bytes() == before


def test_resume_continues_the_run(tmp_path):
    x, y = images(96)
    flags = dict(batch=16, seed=2, lr=0.05, momentum=0.9)  # a constant learning rate
    whole = crumb.Trainer(model="cnn", progress=False, **flags)
    whole.fit(x, y, epochs=3)
    first = crumb.Trainer(model="cnn", progress=False, save=tmp_path / "run.safetensors", **flags)
    first.fit(x, y, epochs=1)
    resumed = crumb.Trainer(model="cnn", progress=False, resume=tmp_path / "run.safetensors", **flags)
    resumed.fit(x, y, epochs=3)  # train's --epochs: to the third, momentum and step count restored
    assert [h["epoch"] for h in resumed.history] == [2, 3]
    assert resumed.history[-1]["step"] == 18
    for name, value in whole.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[name], value, err_msg=name)
    with pytest.raises(crumb.Error, match="backwards"):
        crumb.Trainer(model="cnn", progress=False, resume=tmp_path / "run.safetensors", **flags).fit(x, y, epochs=1)
    with pytest.raises(crumb.Error, match="--lr"):  # a resumed run keeps its settings
        crumb.Trainer(model="cnn", progress=False, resume=tmp_path / "run.safetensors", batch=16, seed=2, lr=0.1)


def test_fp64_trains_and_loads_weights_in_float64(tmp_path):
    """precision="fp64" trains in float64 on the CPU: its state_dict is float64, weights of any width load
    widened to float64 (torch's float64 model's without rounding), it preprocesses and predicts in float64,
    its checkpoint holds F64 and loads back; device="cuda" is refused with one line."""
    torch = pytest.importorskip("torch")
    x, y = images(16, shape=(1, 8, 8))
    t = crumb.Trainer(model="mlp", classes=4, batch=8, precision="fp64", progress=False)
    t.fit(x, y)
    ref = t.state_dict()
    assert ref and all(v.dtype == np.float64 for k, v in ref.items() if not k.endswith("num_batches_tracked"))
    name = next(k for k, v in ref.items() if v.ndim == 2)
    w = np.random.default_rng(2).standard_normal(ref[name].shape)
    for given, expect in [(w, w), (w.astype(np.float32), w.astype(np.float32).astype(np.float64)),
                          (torch.from_numpy(w), w)]:
        t.load_state_dict({**ref, name: given})
        np.testing.assert_array_equal(t.state_dict()[name], expect)
    # What the model sees and says, in float64: the logits of numpy's float64 forward pass over the
    # preprocessed images, to float64's rounding (float32 outputs would miss by 1e-7 of their size).
    seen = t.preprocess(x)
    assert seen.dtype == np.float64 and seen.shape == x.shape
    sd = t.state_dict()
    h = seen.reshape(len(x), -1)
    for i, layer in enumerate(k[:-len(".weight")] for k in sd if k.endswith(".weight")):
        h = h @ sd[layer + ".weight"].T + sd[layer + ".bias"]
        h = np.maximum(h, 0) if i < 2 else h
    logits = t.predict(x)
    assert logits.dtype == np.float64
    np.testing.assert_allclose(logits, h, rtol=1e-12, atol=1e-12)
    t.save(tmp_path / "f64.safetensors")
    back = crumb.Trainer(load=str(tmp_path / "f64.safetensors"), precision="fp64", progress=False)
    np.testing.assert_array_equal(back.predict(x), t.predict(x))
    with pytest.raises(crumb.Error) as e:
        crumb.Trainer(model="mlp", classes=4, batch=8, precision="fp64", device="cuda", progress=False).fit(x, y)
    assert "--precision fp64 runs on the CPU only" in str(e.value)


def test_state_dict_is_torchvisions(tmp_path):
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 7, 6)
    t = crumb.Trainer(model="resnet18", classes=7, batch=6, bn_group="batch", progress=False, lr=0.01)
    t.fit(x, y, epochs=1)
    ours = t.predict(x)
    model = torchvision.models.resnet18(num_classes=7)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in t.state_dict().items()}, strict=True)
    model.eval()
    with torch.no_grad():
        theirs = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    # and back: torch's weights load into Crumb by name
    other = crumb.Trainer(model="resnet18", classes=7, batch=6, bn_group="batch", progress=False)
    other.load_state_dict(torchvision.models.resnet18(num_classes=7).state_dict())
    assert other.predict(x).shape == (6, 7)
