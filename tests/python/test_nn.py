"""crumb.nn: descriptions written like torch.nn, with torch's parameter names; `train` takes them; a
hand-written CNN in crumb.nn, given the weights of the same torch.nn model, trains to PyTorch's loss and
weights after one SGD step (float32; the tolerances of test_from_torch.py)."""
import json
import subprocess
from collections import OrderedDict

import pytest

import crumb
from crumb import nn


def small_resnet():
    def block(c_in, c_out, stride):
        body = nn.Sequential(OrderedDict(
            conv1=nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), bn1=nn.BatchNorm2d(c_out), relu=nn.ReLU(),
            conv2=nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), bn2=nn.BatchNorm2d(c_out, group="batch")))
        shortcut = None if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out, group=2))
        return nn.Sequential(nn.Residual(body, shortcut), nn.ReLU(inplace=True))

    return nn.Sequential(OrderedDict(
        stem=nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.GroupNorm(2, 8), nn.ReLU()),
        layer1=block(8, 8, 1), layer2=block(8, 16, 2),
        pool=nn.MaxPool2d(3, stride=1, padding=1), avg=nn.AvgPool2d((2, 2)),
        head=nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, 4))))


def test_names_follow_torch():
    d = small_resnet().description("mini")
    names = [n["name"] for n in d["nodes"]]
    assert names[:3] == ["stem.0", "stem.1", "stem.2"]
    assert "layer1.0.body.conv1" in names and "layer2.0.shortcut.0" in names and "layer2.0.add" in names
    assert d["output"] == "head.3" and d["name"] == "mini"
    add = next(n for n in d["nodes"] if n["name"] == "layer1.0.add")
    assert add["inputs"] == ["layer1.0.body.bn2", "stem.2"]  # the identity shortcut
    bn = {n["name"]: n for n in d["nodes"] if n["op"] == "batch_norm2d"}
    assert "group" not in bn["layer1.0.body.bn1"] and bn["layer1.0.body.bn2"]["group"] == "batch"
    assert bn["layer2.0.shortcut.1"]["group"] == 2
    assert next(n for n in d["nodes"] if n["name"] == "avg")["stride"] == 2  # torch's default: the kernel
    text, weights = small_resnet()._crumb_network()
    assert json.loads(text) == small_resnet().description() and weights is None
    assert [p for p, _ in small_resnet().named_modules()][:3] == ["", "stem", "stem.0"]
    assert nn.Linear(3, 2).description()["nodes"][0]["name"] == "fc"  # a lone layer has a name of its own


@pytest.mark.parametrize("make, what", [
    (lambda: nn.Conv2d(3, 4, (3, 5)), "Conv2d: kernel_size=(3, 5): Crumb's windows are square"),
    (lambda: nn.Conv2d(3, 0, 3), "Conv2d: out_channels must be an integer >= 1, got 0"),
    (lambda: nn.MaxPool2d(2, padding=-1), "MaxPool2d: padding must be an integer >= 0"),
    (lambda: nn.Linear(4, 10**20), "Linear: out_features is 100000000000000000000, above the largest a layer takes"),
    (lambda: nn.AdaptiveAvgPool2d((1, 2**40)), "AdaptiveAvgPool2d: output_size is 1099511627776, above the largest"),
    (lambda: nn.GroupNorm(3, 8), "GroupNorm: num_groups 3 does not divide num_channels 8"),
    (lambda: nn.BatchNorm2d(8, group="all"), "BatchNorm2d: group must be an integer >= 1, got 'all'"),
    (lambda: nn.BatchNorm2d(8, momentum=2), "BatchNorm2d: eps must be > 0 and momentum in [0, 1]"),
    (lambda: nn.Dropout(1.0), "Dropout: p must be in [0, 1)"),
    (lambda: nn.Conv2d(4, 6, 3, groups=4), "Conv2d: groups 4 must divide in_channels 4 and out_channels 6"),
    (lambda: nn.Conv2d(4, 4, 4, padding="same"), "Conv2d: padding='same' with the even kernel_size 4 pads 1 before "
                                                 "and 2 after"),
    (lambda: nn.Conv2d(4, 4, 3, stride=2, padding="same"), "padding='same' needs stride 1"),
    (lambda: nn.Conv2d(4, 4, 3, padding="full"), "Conv2d: padding must be an integer, got 'full'"),
    (lambda: nn.LeakyReLU(-0.5), "LeakyReLU: negative_slope must be a finite number >= 0, got -0.5"),
    (lambda: nn.Hardtanh(1, 1), "Hardtanh: min_val must be below max_val"),
    (lambda: nn.Sequential(nn.ReLU(), "relu"), "Sequential: '1' is str, not a crumb.nn module"),
    (lambda: nn.Residual(nn.ReLU(), 3), "Residual: shortcut is int"),
    (lambda: nn.Sequential().to_json(), "the network has no layers"),
])
def test_mistakes_are_caught_where_they_are_made(make, what):
    with pytest.raises(crumb.Error) as e:
        make()
    assert what in str(e.value)


def test_train_takes_every_layer(train_bin):
    r = subprocess.run([str(train_bin), "--network", small_resnet().to_json("mini"), "--dataset", "synthetic",
                        "--input", "3x8x8", "--classes", "4", "--batch", "4", "--bn-group", "2", "--explain",
                        "--device", "cpu"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("mini on cpu in fp32, batch 4 in 1 micro-batch(es) of 4")


def test_plan_calls_the_binding_lazily(monkeypatch):
    import sys
    import types
    fake = types.ModuleType("crumb")
    fake.plan = lambda **kw: ("plan", kw)
    fake.Trainer = lambda **kw: ("trainer", kw)
    monkeypatch.setitem(sys.modules, "crumb", fake)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    assert net.plan(batch=8) == ("plan", {"model": net, "batch": 8})
    assert net.trainer(lr=0.1) == ("trainer", {"model": net, "lr": 0.1})


def test_hand_written_cnn_trains_as_in_pytorch(crumb_run):
    torch = pytest.importorskip("torch")
    from test_from_torch import check_parity

    mine = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 32), nn.ReLU(), nn.Linear(32, 10))
    torch.manual_seed(2)
    tnn = torch.nn
    theirs = tnn.Sequential(
        tnn.Conv2d(1, 6, 5, padding=2), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Conv2d(6, 16, 5), tnn.BatchNorm2d(16), tnn.ReLU(), tnn.AvgPool2d(2),
        tnn.Flatten(), tnn.Linear(16 * 5 * 5, 32), tnn.ReLU(), tnn.Linear(32, 10))
    start = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    check_parity(crumb_run, theirs, (1, 28, 28), n=8, extra=("--bn-group", "batch"), net=nn.Network(mine.to_json(), start),
                 seed=3)


def test_mobile_layers_train_as_in_pytorch(crumb_run):
    """Grouped and depthwise convolutions, padding="same", LeakyReLU, ReLU6 and Hardtanh."""
    torch = pytest.importorskip("torch")
    from test_from_torch import check_parity

    mine = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding="same", bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
        nn.Conv2d(8, 8, 3, 2, 1, groups=8), nn.LeakyReLU(0.1), nn.Conv2d(8, 12, 1, groups=4, padding="valid"),
        nn.Hardtanh(-0.5, 0.5), nn.Flatten(), nn.Linear(12 * 6 * 6, 5))
    d = mine.description()["nodes"]
    assert d[0]["padding"] == 1 and d[3]["groups"] == 8 and d[5]["groups"] == 4 and "groups" not in d[0]
    assert [n["op"] for n in d][2:7] == ["relu6", "conv2d", "leaky_relu", "conv2d", "hardtanh"]
    torch.manual_seed(5)
    tnn = torch.nn
    theirs = tnn.Sequential(
        tnn.Conv2d(3, 8, 3, padding="same", bias=False), tnn.BatchNorm2d(8), tnn.ReLU6(),
        tnn.Conv2d(8, 8, 3, 2, 1, groups=8), tnn.LeakyReLU(0.1), tnn.Conv2d(8, 12, 1, groups=4, padding="valid"),
        tnn.Hardtanh(-0.5, 0.5), tnn.Flatten(), tnn.Linear(12 * 6 * 6, 5))
    start = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}
    check_parity(crumb_run, theirs, (3, 12, 12), n=6, classes=5, extra=("--bn-group", "batch"),
                 net=nn.Network(mine.to_json(), start))
