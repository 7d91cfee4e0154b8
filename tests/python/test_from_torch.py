"""crumb.from_torch: torchvision's resnet18 and a hand-written CNN convert with their weights and train in
Crumb to PyTorch's numbers: the forward loss of a batch, the weights and BatchNorm statistics after one
SGD step, and the evaluation loss after it. float32 on both sides, so the tolerances are float32's
(summation order differs: relative 1e-5 on the training loss, 1e-4 on the evaluation loss, 5e-4 of
the largest change of a tensor on its updated elements; measured: resnet18 4e-7, 3e-5 and 1.3e-4, the
hand-written CNN 1e-7, 1e-7 and 6e-6). The engine trains in float32 only (float64 graphs are for its
gradient checks), hence float32 tolerances. Every unsupported layer, function or setting is one error
naming it.""" 
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
pytest.importorskip("safetensors")
import torch.nn.functional as F  # noqa: E402
from torch import nn as tnn  # noqa: E402

import crumb  # noqa: E402
from crumb.torch_convert import from_torch  # noqa: E402

LR = 0.05


def arrays(shape, n, n_test, classes, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n + n_test,) + shape, generator=g)
    y = torch.randint(0, classes, (n + n_test,), generator=g)
    y[0] = classes - 1  # train's npy data has as many classes as its largest training label says
    return x[:n], y[:n], x[n:], y[n:]


def torch_step(model, x, y, xt, yt):
    """PyTorch's side of a CrumbRun: the training-mode loss of the batch, one SGD step (momentum 0.9, the
    first step of which is plain SGD), then the evaluation loss. Returns (loss, state_dict, test loss)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        test_loss = F.cross_entropy(model(xt), yt)
    return loss.item(), {k: v.detach().numpy() for k, v in model.state_dict().items()}, test_loss.item()


def check_parity(crumb_run, model, shape, n=4, classes=10, extra=(), net=None, seed=0):
    """Trains `net` (default: from_torch(model)) one step in Crumb and `model` in PyTorch, from the same
    weights and data, and compares their losses and state_dicts. Returns the network."""
    x, y, xt, yt = arrays(shape, n, 3, classes, seed)
    net = net or from_torch(model, shape)
    before = {k: v.copy() for k, v in net.weights.items()}
    summary, after = crumb_run(net, x.numpy(), y.numpy(), xt.numpy(), yt.numpy(), LR, extra)
    loss, expected, test_loss = torch_step(model, x, y, xt, yt)
    assert summary["final_loss"] == pytest.approx(loss, rel=1e-5)
    assert summary["test_loss"] == pytest.approx(test_loss, rel=1e-4)
    assert sorted(after) == sorted(expected)
    for k, want in expected.items():
        got = after[k]
        assert got.shape == want.shape, k
        if k.endswith("num_batches_tracked"):
            assert got == want, k
            continue
        # The step's change, relative to its largest element: float32 reordering only.
        change = np.abs(want - before[k]).max()
        scale = max(change, 1e-6 * np.abs(want).max())
        assert np.abs(got - want).max() <= 5e-4 * scale + 1e-7, (k, np.abs(got - want).max(), change)
    return net


def test_resnet18_trains_as_in_pytorch(crumb_run):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    net = check_parity(crumb_run, model, (3, 32, 32), extra=("--bn-group", "batch"))
    assert net.classes == 10 and net.input_shape == (3, 32, 32)
    names = [n["name"] for n in net.description()["nodes"]]
    assert "layer2.0.downsample.0" in names and "layer4.1.bn2" in names
    assert sorted(net.weights) == sorted(model.state_dict())


class HandWritten(tnn.Module):
    """A CNN in the functional style: F.relu, an in-place residual sum, x.view(x.size(0), -1)."""

    def __init__(self):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding=1)
        self.gn = tnn.GroupNorm(2, 8)
        self.conv2 = tnn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = tnn.BatchNorm2d(8, eps=1e-3, momentum=0.2)
        self.pool = tnn.AvgPool2d(2)
        self.head = tnn.Sequential(tnn.MaxPool2d(2, 2), tnn.Flatten(), tnn.Identity())
        self.fc1 = tnn.Linear(8 * 4 * 4, 32)
        self.fc2 = tnn.Linear(32, 5)

    def forward(self, x):
        unused = torch.flatten(x, 1)  # noqa: F841 (dead code: not part of the network)
        h = F.relu(self.gn(self.conv1(x)))
        r = self.bn(self.conv2(h))
        r += h
        h = torch.relu(self.pool(r))
        h = self.head[0](h)
        h = h.view(h.size(0), -1)
        return self.fc2(self.fc1(h).relu())


def test_hand_written_cnn_trains_as_in_pytorch(crumb_run):
    torch.manual_seed(1)
    model = HandWritten()
    net = check_parity(crumb_run, model, (3, 16, 16), n=6, classes=5, extra=("--bn-group", "batch"))
    ops = [n["op"] for n in net.description()["nodes"]]
    assert ops.count("add") == 1 and ops.count("flatten") == 1 and ops.count("relu") == 3


@pytest.mark.parametrize("layer, what", [
    (tnn.GELU(), "layer '1' (GELU): torch.nn.modules.activation.GELU is not supported"),
    (tnn.Conv2d(4, 4, 3, groups=2), "layer '1' (Conv2d): groups=2 (grouped or depthwise convolution)"),
    (tnn.Conv2d(4, 4, 3, dilation=2), "layer '1' (Conv2d): dilation=(2, 2) is not supported"),
    (tnn.Conv2d(4, 4, (3, 1)), "layer '1' (Conv2d): kernel_size=(3, 1) is not square"),
    (tnn.MaxPool2d(2, ceil_mode=True), "layer '1' (MaxPool2d): ceil_mode=True is not supported"),
    (tnn.AvgPool2d(2, count_include_pad=False), "count_include_pad=False"),
    (tnn.BatchNorm2d(4, momentum=None), "momentum=None"),
    (tnn.BatchNorm2d(4, affine=False), "without affine"),
])
def test_the_first_unsupported_layer_is_named(layer, what):
    model = tnn.Sequential(tnn.Conv2d(3, 4, 3), layer, tnn.Sigmoid(), tnn.Flatten(), tnn.LazyLinear(3))
    with pytest.raises(crumb.Error) as e:
        from_torch(model, (3, 12, 12))
    assert what in str(e.value)
    assert str(e.value).startswith("from_torch: ") and "\n" not in str(e.value)


def test_unsupported_functions_and_sharing_are_named():
    class Sig(tnn.Module):
        def __init__(self):
            super().__init__()
            self.fc = tnn.Linear(12, 3)

        def forward(self, x):
            return self.fc(torch.sigmoid(x).flatten(1))

    with pytest.raises(crumb.Error, match=r"call_function sigmoid \(node 'sigmoid'\): is not supported"):
        from_torch(Sig(), (3, 2, 2))

    class Shared(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv = tnn.Conv2d(3, 3, 1)
            self.fc = tnn.Linear(12, 3)

        def forward(self, x):
            return self.fc(torch.flatten(self.conv(self.conv(x)), 1))

    with pytest.raises(crumb.Error, match="layer 'conv' \\(Conv2d\\): is called twice \\(shared weights\\)"):
        from_torch(Shared(), (3, 2, 2))

    class Scaled(tnn.Module):
        def forward(self, x):
            return torch.flatten(x, 1) * 2

    with pytest.raises(crumb.Error, match="call_function mul"):
        from_torch(Scaled(), (3, 2, 2))
    with pytest.raises(crumb.Error, match="input_shape must be \\(channels, height, width\\)"):
        from_torch(tnn.Flatten(), (3, 2))


def test_importing_needs_no_torch():
    code = "import sys, crumb, crumb.torch_convert, crumb.nn; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_converted_models_plan_and_train_from_python():
    """The issue's example, and a converted network's weights reaching crumb.Trainer: its outputs are
    torch's (evaluation mode, float32) before any training."""
    torchvision = pytest.importorskip("torchvision")
    p = from_torch(torchvision.models.resnet34(), (3, 224, 224)).plan(batch=512, memory_budget="8GiB")
    assert p.micro_batch < 512 and p.total_bytes <= p.budget
    model = torchvision.models.resnet18(num_classes=5).eval()
    with torch.no_grad():  # running statistics that are not the initial ones
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    net = from_torch(model, (3, 32, 32))
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    t = net.trainer(batch=4, bn_group="batch", progress=False)
    with torch.no_grad():
        theirs = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(t.predict(x), theirs, rtol=1e-4, atol=1e-4)
    y = np.arange(4) % 5
    history = t.fit(x, y, epochs=1)
    assert history[0]["step"] == 1
