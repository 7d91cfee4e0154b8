"""Keyword arguments from the option table (engine/train/options.cc), the rows train's flags come from:
``micro_batch=8`` is ``--micro-batch 8``. The signatures of ``Trainer.__init__`` and ``plan`` are written
from the table by tools/python/gen_keywords.py; here their values' Python types are checked and turned into
the engine's text, whose values the engine checks with train's messages."""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import os
from typing import Callable, TypeVar, Union

import numpy as np

from . import _crumb

# By Python name: "micro_batch" -> the row of --micro-batch.
ROWS = {row["name"].replace("-", "_"): row for row in _crumb.options()}

# Rows that describe the data train reads: Trainer takes arrays instead.
_DATA = {"dataset", "data", "input", "classes", "limit_train", "limit_test"}

F = TypeVar("F", bound=Callable)


def _text(where: str, keyword: str, value) -> str:
    """A value as the engine's text, or TypeError naming the keyword and the type it takes."""
    row = ROWS[keyword]
    kind = row["type"]

    def wrong(expected: str):
        return TypeError(f"{where}() argument '{keyword}' must be {expected}, got {type(value).__name__} "
                         f"({value!r})")

    def integer(v) -> str:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise wrong("an int")
        return str(int(v))

    def integers(v, count=None) -> list:
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise wrong(f"a sequence of {count} ints" if count else "a sequence of ints")
        items = [integer(i) for i in v]
        if count is not None and len(items) != count:
            raise wrong(f"a sequence of {count} ints")
        return items

    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise wrong("True or False")
        return "on" if value else "off"
    if kind == "int":
        if row["choices"] and value in row["choices"]:  # bn_group="batch"
            return value
        if row["choices"] and isinstance(value, str):
            raise wrong(f'an int or "{row["choices"][0]}"')
        return integer(value)
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise wrong("a number")
        return repr(float(value))
    if kind == "size":
        if isinstance(value, str):
            return value
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise wrong('bytes (an int) or a size such as "64MiB"')
        return str(int(value))
    if kind == "path":
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise wrong("a path (str or os.PathLike)")
        return value
    if kind == "shape":
        return "x".join(integers(value, 3))
    if kind == "ints":
        return ",".join(integers(value))
    if not isinstance(value, str):
        raise wrong("one of " + ", ".join(repr(c) for c in row["choices"]) if kind == "choice" else "a str")
    return value


def _unexpected(where: str, client: str, keyword: str, names) -> TypeError:
    """Python's own TypeError for a keyword the function does not take, with the closest one it takes, or
    what the keyword is where it is an option of another client (train's --report)."""
    message = f"{where}() got an unexpected keyword argument {keyword!r}"
    if keyword in ROWS:
        flag = "--" + ROWS[keyword]["name"]
        if client == "Trainer" and keyword in _DATA:
            return TypeError(f"{message} (Trainer takes its data as arrays in fit(); {flag} is train's)")
        return TypeError(f"{message} ({flag} is an option of train that {client} does not take)")
    close = difflib.get_close_matches(keyword, names, n=1)
    return TypeError(f"{message}; did you mean {close[0]!r}?" if close else message)


def options(client: str, impl: Union[Callable, str]) -> Callable[[F], F]:
    """Makes the decorated function, a signature and a docstring written by tools/python/gen_keywords.py, call
    ``impl(<its other parameters>, model=<model if given, else None>, options=[(name, text), ...])`` with the
    options given explicitly (None is the default) in the engine's names; impl is a function, or the name of a
    method of the first argument. The signature stays the function's: ``help()`` and IDEs show it."""

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        try:  # the annotations as objects, for help() (they are strings under `from __future__ import annotations`)
            shown = inspect.signature(fn, eval_str=True)
        except Exception:  # a Python without X | Y at run time
            shown = signature
        names = list(signature.parameters)
        where = fn.__qualname__
        # The table's rows among them (Trainer's own classes= is not the synthetic data's).
        rows = [k for k in names if k in ROWS and client in ROWS[k]["clients"]]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for keyword in kwargs:
                if keyword not in signature.parameters:
                    raise _unexpected(where, client, keyword, names)
            bound = signature.bind(*args, **kwargs)
            given = set(bound.arguments)
            bound.apply_defaults()
            values = bound.arguments
            settings = [(ROWS[k]["name"], _text(where, k, values[k])) for k in rows
                        if k != "model" and k in given and values[k] is not None]
            model = values["model"] if "model" in given else None
            rest = {k: v for k, v in values.items() if k not in rows}
            call = impl
            if isinstance(impl, str):
                call = getattr(rest.pop("self"), impl)
            return call(**rest, model=model, options=settings)

        wrapper.__signature__ = shown
        return wrapper

    return decorate
