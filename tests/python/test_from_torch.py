"""crumb.from_torch: torchvision's resnet18 and mobilenet_v2, PyTorch's MNIST example and hand-written CNNs
in the functional style convert with their weights and train in Crumb to PyTorch's numbers: the forward
loss of a batch, the weights and BatchNorm statistics after one SGD step, and the evaluation loss after
it. float32 on both sides (mobilenet_v2: PyTorch in float64, see its test), so the tolerances are
float32's (summation order differs: relative 1e-5 on the training loss, 1e-4 on the evaluation loss,
5e-4 of the largest change of a tensor on its updated elements; measured: resnet18 4e-7, 3e-5 and
1.3e-4, the hand-written CNN 1e-7, 1e-7 and 6e-6, MNIST 2.1e-7, 9.1e-8 and 1.4e-5, the functional CNN
3.7e-7, 2.6e-7 and 3.0e-6, mobilenet_v2 6.5e-7, 4.5e-8 and 4.7e-5). The engine trains in float32 only
(float64 graphs are for its gradient checks), hence float32 tolerances. Every unsupported layer,
function or setting is one error naming it.""" 
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


def torch_step(model, x, y, xt, yt, loss_fn=F.cross_entropy):
    """PyTorch's side of a CrumbRun: the training-mode loss of the batch, one SGD step (momentum 0.9, the
    first step of which is plain SGD), then the evaluation loss. Returns (loss, state_dict, test loss)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        test_loss = loss_fn(model(xt), yt)
    return loss.item(), {k: v.detach().numpy() for k, v in model.state_dict().items()}, test_loss.item()


def check_parity(crumb_run, model, shape, n=4, classes=10, extra=(), net=None, seed=0, loss_fn=F.cross_entropy,
                 exact=False):
    """Trains `net` (default: from_torch(model)) one step in Crumb and `model` in PyTorch (with `loss_fn`), from
    the same weights and data, and compares their losses and state_dicts. exact: PyTorch runs in float64, the
    exact result of the same float32 weights and data, for networks where PyTorch's own float32 run is
    further from it than the tolerances. Returns the network."""
    x, y, xt, yt = arrays(shape, n, 3, classes, seed)
    net = net or from_torch(model, shape)
    before = {k: v.copy() for k, v in net.weights.items()}
    summary, after = crumb_run(net, x.numpy(), y.numpy(), xt.numpy(), yt.numpy(), LR, extra)
    if exact:
        model, x, xt = model.double(), x.double(), xt.double()
    loss, expected, test_loss = torch_step(model, x, y, xt, yt, loss_fn)
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


class MnistNet(tnn.Module):
    """PyTorch's MNIST example (github.com/pytorch/examples, mnist/main.py), as written there."""

    def __init__(self):
        super(MnistNet, self).__init__()
        self.conv1 = tnn.Conv2d(1, 32, 3, 1)
        self.conv2 = tnn.Conv2d(32, 64, 3, 1)
        self.dropout1 = tnn.Dropout(0.25)
        self.dropout2 = tnn.Dropout(0.5)
        self.fc1 = tnn.Linear(9216, 128)
        self.fc2 = tnn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def no_dropout(model):
    """model with every Dropout's p set to 0: Crumb's masks are its own, so only p = 0 trains to PyTorch's
    numbers; the tests check the converted p separately."""
    for m in model.modules():
        if isinstance(m, tnn.Dropout):
            m.p = 0.0
    return model


def test_pytorch_mnist_example_converts_and_trains_with_nll_loss(crumb_run):
    """The final log_softmax becomes nothing: Crumb's softmax cross-entropy on the scores is the example's
    nll_loss on their log_softmax, and predict returns the scores (logits), whose log_softmax is the
    module's output."""
    torch.manual_seed(2)
    model = MnistNet()
    net = from_torch(model, (1, 28, 28))
    nodes = net.description()["nodes"]
    assert [n["op"] for n in nodes] == ["conv2d", "relu", "conv2d", "relu", "max_pool2d", "dropout", "flatten",
                                        "linear", "relu", "dropout", "linear"]
    assert [n["p"] for n in nodes if n["op"] == "dropout"] == [0.25, 0.5]
    assert net.description()["output"] == "fc2" and net.classes == 10
    x = np.random.default_rng(1).standard_normal((5, 1, 28, 28)).astype(np.float32)
    with torch.no_grad():
        theirs = model.eval()(torch.from_numpy(x))
    logits = net.trainer(batch=5, progress=False).predict(x)
    np.testing.assert_allclose(torch.log_softmax(torch.from_numpy(logits), 1).numpy(), theirs.numpy(), rtol=1e-4,
                               atol=1e-4)
    assert (logits.argmax(1) == theirs.numpy().argmax(1)).all()
    check_parity(crumb_run, no_dropout(model), (1, 28, 28), loss_fn=F.nll_loss)


def test_mobilenet_v2_trains_as_in_pytorch(crumb_run):
    """Depthwise convolutions, ReLU6, residual adds, functional adaptive_avg_pool2d and flatten, against
    PyTorch in float64 (the exact result of the same float32 weights and data). On 48x48 images, whose
    last maps are 2x2: on 32x32 ones BatchNorm normalises 4 values per channel there, which amplifies
    rounding so much that PyTorch's own float32 evaluation loss is 7e-4 from its float64 one. Of a million
    ReLU6 inputs, some lie within 1e-6 of 0, where float32 rounding can switch the gradient: with
    torch.manual_seed(3) one 2.4e-7 from 0 (features.17.conv.0.2) switches and moves the earlier weights by
    1% of their change; seed 1 has none that switches (measured: weights 4.7e-5 of their change, training
    loss 6.5e-7, evaluation loss 4.5e-8)."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(1)
    model = torchvision.models.mobilenet_v2(num_classes=10)
    assert from_torch(model, (3, 48, 48)).description()["nodes"][-2] == \
        {"name": "classifier.0", "op": "dropout", "inputs": ["flatten"], "p": 0.2}
    net = check_parity(crumb_run, no_dropout(model), (3, 48, 48), extra=("--bn-group", "batch"), exact=True)
    ops = [n["op"] for n in net.description()["nodes"]]
    assert ops.count("relu6") == 35 and ops.count("add") == 10
    depthwise = [n for n in net.description()["nodes"] if n.get("groups", 1) > 1]
    assert len(depthwise) == 17 and all(n["groups"] == n["in_channels"] == n["out_channels"] for n in depthwise)
    assert sorted(net.weights) == sorted(model.state_dict())


class Functional(tnn.Module):
    """Tutorial code: functional pools and activations, padding="same", grouped convolutions, LeakyReLU
    and ReLU6 layers, and views written every way."""

    def __init__(self):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding="same")
        self.conv2 = tnn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)  # depthwise
        self.conv3 = tnn.Conv2d(8, 12, 1, groups=2, padding="valid")
        self.act = tnn.LeakyReLU(0.2)
        self.act6 = tnn.ReLU6(inplace=True)
        self.unflatten = tnn.Unflatten(1, (12, 4, 4))
        self.fc1 = tnn.Linear(12 * 4 * 4, 16)
        self.fc2 = tnn.Linear(16, 5)

    def forward(self, x):
        x = F.leaky_relu(self.conv1(x), negative_slope=0.1)
        x = F.max_pool2d(x, kernel_size=2, stride=2)
        x = self.act6(self.conv2(x))
        x = F.relu6(self.act(self.conv3(x)))
        x = F.avg_pool2d(x, 2)
        x = F.dropout(x, 0.0, training=self.training)
        x = F.dropout(x, 0.5, training=False)
        x = x.view(-1, 12 * 4 * 4)
        x = self.unflatten(x)
        x = x.view(x.size(0), 12, -1).contiguous()  # [12, 16] per sample
        x = F.hardtanh(x.reshape(x.shape[0], -1), -2.0, 2.0)
        x = F.relu(self.fc1(x.unsqueeze(-1).squeeze(-1)))
        return self.fc2(x).log_softmax(dim=-1)


def test_functional_tutorial_code_trains_as_in_pytorch(crumb_run):
    torch.manual_seed(4)
    model = Functional()
    net = check_parity(crumb_run, model, (3, 16, 16), n=5, classes=5, loss_fn=F.nll_loss)
    nodes = {n["name"]: n for n in net.description()["nodes"]}
    assert nodes["conv1"]["padding"] == 1 and nodes["conv2"]["groups"] == 8 and nodes["conv3"]["groups"] == 2
    assert nodes["leaky_relu"] == {"name": "leaky_relu", "op": "leaky_relu", "inputs": ["conv1"],
                                   "negative_slope": 0.1}
    assert nodes["act"]["negative_slope"] == 0.2 and nodes["act6"]["op"] == nodes["relu6"]["op"] == "relu6"
    assert nodes["hardtanh"]["min_val"] == -2.0 and nodes["hardtanh"]["max_val"] == 2.0
    assert nodes["dropout"]["p"] == 0.0 and "dropout_1" not in nodes  # training=False: the identity
    assert nodes["view_1"] == {"name": "view_1", "op": "reshape", "inputs": ["unflatten"], "shape": [12, 16]}
    # Every view to [features] is a flatten, every other one a reshape; contiguous() is nothing.
    views = [(n["name"], n["op"], n.get("shape")) for n in net.description()["nodes"]
             if n["op"] in ("flatten", "reshape")]
    assert views == [("view", "flatten", None), ("unflatten", "reshape", [12, 4, 4]), ("view_1", "reshape", [12, 16]),
                     ("reshape", "flatten", None), ("unsqueeze", "reshape", [192, 1]), ("squeeze", "flatten", None)]
    assert net.description()["output"] == "fc2"


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("layer, what", [
    (tnn.GELU(), "layer '1' (GELU): torch.nn.modules.activation.GELU is not supported"),
    (tnn.Conv2d(4, 4, 4, padding="same"), "layer '1' (Conv2d): padding='same' with the even kernel_size 4 pads 1 "
                                          "before and 2 after"),
    (tnn.Conv2d(4, 4, 3, padding="same", padding_mode="reflect"), "padding_mode='reflect' is not supported"),
    (tnn.LeakyReLU(-0.1), "layer '1' (LeakyReLU): negative_slope=-0.1 is not supported"),
    (tnn.LogSoftmax(dim=1), "layer '1' (LogSoftmax): log_softmax is supported only where it gives the output"),
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

    def fails(forward, what, shape=(3, 4, 4)):
        module = type("M", (tnn.Module,), {"forward": lambda self, x: forward(x)})()
        with pytest.raises(crumb.Error) as e:
            from_torch(module, shape)
        assert what in str(e.value) and str(e.value).startswith("from_torch: ") and "\n" not in str(e.value)

    fails(lambda x: x.view(-1, 24), "call_method view (node 'view'): mixes the batch into the other dims (it gives "
          "(4, 24) for a batch of 2 and (6, 24) for 3); keep the batch first")
    fails(lambda x: torch.flatten(x), "call_function flatten (node 'flatten'): mixes the batch")
    fails(lambda x: x.view(x.size(0), 3, 4, 2, 2).flatten(1), "gives per-sample [3, 4, 2, 2]; Crumb's values have 1 "
          "to 3 dims")
    fails(lambda x: x.view(2, 48), "the module fails on a batch of 3 images of shape (3, 4, 4): RuntimeError")
    fails(lambda x: F.softmax(torch.flatten(x, 1), 1), "softmax is not supported: Crumb's loss takes the scores")
    fails(lambda x: F.log_softmax(torch.flatten(x, 1), 1) + 1, "call_function log_softmax (node 'log_softmax'): "
          "log_softmax is supported only where it gives the output")
    fails(lambda x: F.log_softmax(torch.flatten(x, 1), 0), "log_softmax(dim=0, dtype=None) is not supported")
    fails(lambda x: torch.flatten(F.max_pool2d(x, 2, ceil_mode=True), 1), "call_function max_pool2d (node "
          "'max_pool2d'): ceil_mode=True is not supported")
    fails(lambda x: torch.flatten(F.avg_pool2d(x, 2, count_include_pad=False), 1), "count_include_pad=False")
    fails(lambda x: torch.flatten(F.dropout2d(x), 1), "call_function dropout2d (node 'dropout2d'): is not supported")
    fails(lambda x: torch.flatten(F.leaky_relu(x, -0.5), 1), "negative_slope=-0.5 is not supported")
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
