"""Finds train (for the comparisons with the command line): $CRUMB_TRAIN, else build/train."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def train_bin():
    path = pathlib.Path(os.environ.get("CRUMB_TRAIN", ROOT / "build" / "train"))
    if not path.exists():
        pytest.fail(f"{path} is missing: build train first (tools/setup.sh build) or set CRUMB_TRAIN")
    return str(path)
