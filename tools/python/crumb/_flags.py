"""Keyword arguments as train's flags: ``micro_batch=8`` is ``--micro-batch=8``, so every argument means
what the flag means (``train --help``) and a bad one fails with the flag's own message."""

from __future__ import annotations

import os


# Flags that take on|off: True and False mean on and off (False must not read as "not given").
ON_OFF = {"fuse", "cuda_graphs", "channels_last"}


def to_args(kwargs: dict) -> list[str]:
    args = []
    for key, value in kwargs.items():
        if key in ON_OFF and isinstance(value, bool):
            value = "on" if value else "off"
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
            continue
        if isinstance(value, (tuple, list)):
            value = ("x" if key == "input" else ",").join(str(v) for v in value)
        elif isinstance(value, os.PathLike):
            value = os.fspath(value)
        args.append(f"{flag}={value}")
    return args


def reject(kwargs: dict, names, why: str) -> None:
    from ._crumb import Error

    for name in names:
        if name in kwargs:
            raise Error(f"{name}=: {why}")
