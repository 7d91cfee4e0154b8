"""The README's Python example runs as written and visibly learns (Fashion-MNIST, as tools/setup.sh installs it)."""
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_example_learns(tmp_path):
    if not pathlib.Path("/usr/share/datasets/fashion-mnist").is_dir():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (tools/setup.sh installs it)")
    text = README.read_text()
    code = re.search(r"## From Python.*?```python\n(.*?)```", text, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    accuracy = float(r.stdout.splitlines()[-1].split()[0])
    assert accuracy > 0.75, r.stdout  # ten classes: chance is 0.1
    assert (tmp_path / "lenet5.safetensors").exists()
