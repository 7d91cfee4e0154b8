"""The throwaway layer clamp: crumb.nn has its class, from_torch maps torch.clamp and x.clamp to it."""
import pytest

import crumb
from crumb import nn


def test_clamp_is_a_class_and_a_mapping():
    assert nn.Clamp(-2, 3).description()["nodes"] == [
        {"name": "clamp", "op": "clamp", "inputs": ["x"], "min": -2.0, "max": 3.0}]
    with pytest.raises(crumb.Error, match="Clamp: min must be below max"):
        nn.Clamp(1, 1)
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(12, 3)

        def forward(self, x):
            return self.fc(torch.clamp(x, -0.5, max=0.5).flatten(1).clamp(min=-0.25, max=0.25))

    nodes = crumb.from_torch(M(), (3, 2, 2)).description()["nodes"]
    clamps = [(n["min"], n["max"]) for n in nodes if n["op"] == "clamp"]
    assert clamps == [(-0.5, 0.5), (-0.25, 0.25)]
