"""Keyword arguments from the option table (engine/train/options.cc): the signatures of Trainer and plan are
the table's, values are typed (a bool is a bool), a misspelt keyword is Python's TypeError with a suggestion,
help() lists every keyword, and log= writes the JSON lines of train --log."""

import importlib.util
import json
import pathlib
import pydoc
import re
import subprocess

import numpy as np
import pytest

import crumb
from synthetic import images
from crumb import _crumb

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = _crumb.options()


def generator():
    spec = importlib.util.spec_from_file_location("gen_keywords", ROOT / "tools" / "python" / "gen_keywords.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_flags(path):
    """The options a checkpoint records (train.args), as train's flags."""
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        return f.metadata()["train.args"].split(" ")


def test_signatures_are_the_option_tables():
    # The committed code is what the generator writes from this build's table.
    for path, text in generator().regions(ROWS).items():
        assert path.read_text() == text, f"{path} is not the option table's: run tools/python/gen_keywords.py"
    own = {"Trainer": {"self", "model", "classes", "mean", "std", "progress"}, "plan": {"model"}}
    for client, fn in (("Trainer", crumb.Trainer.__init__), ("plan", crumb.plan)):
        params = dict(__import__("inspect").signature(fn).parameters)
        taken = {r["name"].replace("-", "_") for r in ROWS if client in r["clients"]}
        assert set(params) - own[client] == taken - own[client], client
        assert taken, client


def test_bools_are_bools_and_cuda_graphs_false_turns_graphs_off(tmp_path):
    x, y = images(32)
    off = crumb.Trainer(model="cnn", batch=16, cuda_graphs=False, progress=False, save=tmp_path / "off.st")
    off.fit(x, y)
    assert "--cuda-graphs=off" in recorded_flags(tmp_path / "off.st")
    # True is "on", and takes nothing from the keyword after it.
    on = crumb.Trainer(model="cnn", cuda_graphs=True, batch=16, nesterov=True, progress=False, save=tmp_path / "on.st")
    on.fit(x, y)
    flags = recorded_flags(tmp_path / "on.st")
    assert {"--cuda-graphs=on", "--batch=16", "--nesterov"} <= set(flags), flags
    assert on._run.info()["split"].startswith("batch 16 in ")
    # False for a bare flag of train (--nesterov) is its absence.
    plain = crumb.Trainer(model="cnn", batch=16, nesterov=False, progress=False, save=tmp_path / "plain.st")
    plain.fit(x, y)
    assert not any(f.startswith("--nesterov") for f in recorded_flags(tmp_path / "plain.st"))


@pytest.mark.parametrize("kwargs,message", [
    (dict(cuda_graphs="off"), "argument 'cuda_graphs' must be True or False, got str"),
    (dict(nesterov=1), "argument 'nesterov' must be True or False, got int"),
    (dict(batch=True), "argument 'batch' must be an int, got bool"),
    (dict(batch="64"), "argument 'batch' must be an int, got str"),
    (dict(batch=6.4), "argument 'batch' must be an int, got float"),
    (dict(lr="0.1"), "argument 'lr' must be a number, got str"),
    (dict(memory_budget=1.5), "argument 'memory_budget' must be bytes"),
    (dict(save=3), "argument 'save' must be a path"),
    (dict(optimizer=1), "argument 'optimizer' must be one of 'sgd', 'adamw'"),
    (dict(bn_group="all"), "argument 'bn_group' must be an int or \"batch\""),
])
def test_values_of_the_wrong_type_are_type_errors(kwargs, message):
    with pytest.raises(TypeError, match=re.escape(f"Trainer.__init__() {message}")):
        crumb.Trainer(progress=False, **kwargs)


def test_typed_values():
    # A size as text or as bytes, numpy integers, a shape as any sequence of three ints, a word for an int.
    a = crumb.plan(model="cnn", batch=np.int64(512), memory_budget="16MiB")
    b = crumb.plan(model="cnn", batch=512, memory_budget=16 << 20)
    assert a.budget == b.budget == 16 << 20 and a.micro_batch == b.micro_batch
    assert "(3x32x32)" in crumb.plan(model="cnn", input=[3, 32, 32], classes=10)._p.title
    assert crumb.plan(model="resnet20", input=(3, 32, 32), batch=16, bn_group="batch").micro_batch == 16
    assert crumb.plan(model="cnn", micro_batch=None).micro_batch == crumb.plan(model="cnn").micro_batch
    with pytest.raises(TypeError, match=r"plan\(\) argument 'input' must be a sequence of 3 ints"):
        crumb.plan(input=(3, 32))
    # The engine checks the values, with train's messages.
    with pytest.raises(crumb.Error, match="--input channels: 0 is out of range"):
        crumb.plan(input=(0, 32, 32))


def test_misspelt_keywords_are_type_errors_with_a_suggestion():
    with pytest.raises(TypeError, match=re.escape(
            "Trainer.__init__() got an unexpected keyword argument 'micro_bach'; did you mean 'micro_batch'?")):
        crumb.Trainer(micro_bach=8)
    with pytest.raises(TypeError, match=re.escape(
            "plan() got an unexpected keyword argument 'memory_budjet'; did you mean 'memory_budget'?")):
        crumb.plan(memory_budjet="1GiB")
    # An option of train that this client does not take says so (not the nearest name: epochs is not eps).
    with pytest.raises(TypeError, match=r"'epochs' \(--epochs is an option of train that plan does not take\)"):
        crumb.plan(epochs=2)
    with pytest.raises(TypeError, match=r"'dataset' \(Trainer takes its data as arrays in fit\(\)"):
        crumb.Trainer(dataset="cifar10")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'$"):
        crumb.Trainer(bogus=1)


@pytest.mark.parametrize("client,obj", [("Trainer", crumb.Trainer), ("plan", crumb.plan)])
def test_help_lists_every_keyword_with_its_help(client, obj):
    text = " ".join(pydoc.render_doc(obj, renderer=pydoc.plaintext).split())
    assert "train --help" not in text
    for row in ROWS:
        if client not in row["clients"]:
            continue
        name = row["name"].replace("-", "_")
        assert f"{name}: " in text or f"{name} (" in text, name
        # The help's first words, as the docstring has them (--flag is ``flag`` there).
        words = " ".join(re.sub(r"--([a-z0-9-]+)", lambda m: f"``{m.group(1).replace('-', '_')}``",
                                row["help"]).split()[:4])
        if name != "model":
            assert words in text, (name, words)
    # Typed: the annotations as objects, the defaults as values.
    assert "cuda_graphs: bool = True" in text
    assert "memory_budget: int | str | None = None" in text
    assert "optimizer: Literal['sgd', 'adamw'] = 'sgd'" in text


def test_log_writes_the_lines_of_trains_log(train_bin, tmp_path):
    x, y = images(120)
    xt, yt = images(30, seed=1)
    for name, a in (("x", x), ("y", y), ("x_test", xt), ("y_test", yt)):
        np.save(tmp_path / f"{name}.npy", a)
    flags = dict(batch=32, micro_batch=8, lr=0.05, seed=3, threads=1)
    r = subprocess.run([train_bin, "--model=cnn", "--dataset=npy", f"--data={tmp_path}", "--epochs=2",
                        f"--log={tmp_path / 'cli.jsonl'}", *[f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # train normalises uint8 .npy images with mean 0.5 and std 0.5 (engine/data/npy.h).
    t = crumb.Trainer(model="cnn", mean=0.5, std=0.5, progress=False, log=tmp_path / "py.jsonl", **flags)
    t.fit(x, y, epochs=2, validation=(xt, yt))
    cli = [json.loads(line) for line in (tmp_path / "cli.jsonl").read_text().splitlines()]
    py = [json.loads(line) for line in (tmp_path / "py.jsonl").read_text().splitlines()]
    assert len(py) == len(cli) == 2 * (4 + 1)  # 4 steps and an epoch, twice
    # The same lines, but for what measures the machine (speed, memory, time).
    measured = {"samples_per_s", "max_rss_bytes", "seconds"}
    for ours, theirs in zip(py, cli):
        assert list(ours) == list(theirs)
        assert {k: v for k, v in ours.items() if k not in measured} == \
            {k: v for k, v in theirs.items() if k not in measured}
    # A later fit goes on in the same log.
    t.fit(x, y, epochs=1)
    more = [json.loads(line) for line in (tmp_path / "py.jsonl").read_text().splitlines()]
    assert more[:len(py)] == py and [line.get("step") for line in more[len(py):]] == [9, 10, 11, 12, None]


def test_log_keeps_its_lines_when_the_trainer_is_planned_again(tmp_path):
    """load() plans the model again at the next call; the log it then opens goes on after the earlier fits'
    lines instead of truncating them."""
    x, y = images(64)
    log = tmp_path / "run.jsonl"
    t = crumb.Trainer(model="cnn", batch=16, progress=False, log=log)
    t.fit(x, y, epochs=1)
    t.save(tmp_path / "w.st")
    before = log.read_text().splitlines()
    assert len(before) == 4 + 1
    t.load(tmp_path / "w.st")
    t.fit(x, y, epochs=1)
    after = log.read_text().splitlines()
    assert after[:len(before)] == before and len(after) == 2 * len(before)


def test_resume_accepts_an_unchangeable_option_as_recorded(tmp_path):
    x, y = images(64)
    flags = dict(model="cnn", batch=16, precision="fp16", loss_scale=1024, progress=False)
    crumb.Trainer(save=tmp_path / "run.st", **flags).fit(x, y, epochs=1)
    # The original keywords with resume= added: fp16's loss scale as recorded is fine.
    resumed = crumb.Trainer(resume=tmp_path / "run.st", **flags)
    resumed.fit(x, y, epochs=2)
    assert [h["epoch"] for h in resumed.history] == [2]  # counted from 1 over the run
    with pytest.raises(crumb.Error, match=r"--loss-scale cannot change when resuming: the run recorded 1024(\.0)?, "
                                          r"given 2048"):
        crumb.Trainer(resume=tmp_path / "run.st", loss_scale=2048, progress=False)
    # Nor does a resumed run need its model again: the checkpoint has it.
    again = crumb.Trainer(resume=tmp_path / "run.st", progress=False)
    again.fit(x, y, epochs=3)
    assert again.history[-1]["epoch"] == 3
