"""The build backend of `pip install .` (pyproject.toml): scikit-build-core's, with defaults of its own.

- The CMake build folder lives in the user's cache, one per checkout and wheel tag
  ($XDG_CACHE_HOME or ~/.cache, then crumb/pip-build/<checkout hash>/<tag>), so the checkout stays clean,
  and it is kept across pip's throwaway build environments, so a second install with nothing changed
  compiles nothing. `-C build-dir=DIR` or $SKBUILD_BUILD_DIR choose another; where the cache cannot be
  written, the build is in a temporary folder.
- ccache, where it is installed, compiles (as in tools/setup.sh), unless $CMAKE_CXX_COMPILER_LAUNCHER says
  otherwise: a new build folder then compiles only what no earlier build did.
- pip shows a build's output only with -v. Without it, where there is a terminal, the build's progress
  (CMake's [step/steps] lines) is written to it on the line where pip turns its spinner;
  CRUMB_PIP_PROGRESS=0 turns that off.
"""

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import sys
import threading
import time

from scikit_build_core import build as _skbuild
from scikit_build_core.build import (  # noqa: F401 (the hooks pip calls as they are)
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)


def _cache_build_dir():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    source = str(pathlib.Path.cwd().resolve())
    root = pathlib.Path(cache) / "crumb" / "pip-build" / hashlib.sha256(source.encode()).hexdigest()[:12]
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".writable-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError:
        return None
    _keep_across_environments(root, source)
    # scikit-build-core fills in {wheel_tag}.
    return str(root / "{wheel_tag}")


def _keep_across_environments(root, source):
    """scikit-build-core deletes a build folder's CMake cache and objects (CMakeFiles/) when the folder
    was built from another scikit-build-core installation, for the paths into that installation the
    cache may hold; and pip installs it anew, in a new temporary folder, for every build. This project's
    cache holds none that a configure does not set again (scikit-build-core sets its own paths with FORCE,
    CMakeLists.txt builds nanobind from a copy in the build folder), so the folder's record of the
    installation is brought up to date and the build goes on where the last one stopped."""
    current = str(pathlib.Path(_skbuild.__file__).resolve().parent.parent)
    for record in root.glob("*/.skbuild-info.json"):
        try:
            info = json.loads(record.read_text())
            if not isinstance(info, dict) or info.get("source_dir") != source or "skbuild_path" not in info:
                continue
            if info["skbuild_path"] != current:
                info["skbuild_path"] = current
                record.write_text(json.dumps(info, indent=2))
        except (OSError, ValueError):
            continue


def _settings(config_settings):
    settings = dict(config_settings or {})
    if "build-dir" not in settings and not os.environ.get("SKBUILD_BUILD_DIR"):
        build_dir = _cache_build_dir()
        if build_dir:
            settings["build-dir"] = build_dir
    if "CMAKE_CXX_COMPILER_LAUNCHER" not in os.environ and shutil.which("ccache"):
        # CMake reads the launchers from the environment where the build does not set them.
        os.environ["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache"
        os.environ.setdefault("CMAKE_CUDA_COMPILER_LAUNCHER", "ccache")
    return settings


def _pip_is_verbose():
    # pip runs the backend as its child; with -v it shows the build's own output, progress included.
    try:
        args = pathlib.Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    verbose = any(a == b"--verbose" or re.fullmatch(rb"-[a-zA-Z]*v[a-zA-Z]*", a) for a in args)
    return verbose or os.environ.get("PIP_VERBOSE", "0") not in ("", "0")


_STEP = re.compile(rb"^\[(\d+)/(\d+)\] (?:Building \S+ object |Linking \S+ (?:\S+ )?(?:library|module|executable) )?(.*)$")


class _Progress:
    """Copies everything the build writes to fds 1 and 2 on to where they went (pip), each to its own, and
    writes its [step/steps] lines to the terminal as one line, rewritten in place. pip's spinner backspaces
    over the last character it wrote and turns at the end of that line."""

    def __init__(self, tty):
        self.tty = tty
        self.start = time.monotonic()
        self.steps = None
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved, self.threads = [], []
        for fd in (1, 2):
            read_fd, write_fd = os.pipe()
            saved = os.dup(fd)
            os.dup2(write_fd, fd)
            os.close(write_fd)
            self.saved.append(saved)
            thread = threading.Thread(target=self._copy, args=(read_fd, saved), daemon=True)
            thread.start()
            self.threads.append(thread)
        self._show("crumb: configuring (CMake) ...")

    def _show(self, text):
        width = shutil.get_terminal_size((100, 20)).columns
        try:
            self.tty.write("\r  " + text[: max(10, width - 6)] + " \033[K")
            self.tty.flush()
        except (OSError, ValueError):  # the terminal went away, or a late copy outlived it
            pass

    def _copy(self, read_fd, to_fd):
        pending = b""
        while True:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            os.write(to_fd, chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                m = _STEP.match(line.rstrip(b"\r"))
                if m:
                    self.steps = m.group(2).decode()
                    what = m.group(3).decode(errors="replace").split(" ")[0]
                    what = re.sub(r"^CMakeFiles/[^/]+\.dir/|\.o$", "", what)
                    self._show(f"crumb: building [{m.group(1).decode()}/{self.steps}] {what}")
        os.close(read_fd)
        os.close(to_fd)

    def close(self):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
        # The copies end when every writer is gone; a process the build left running may hold a pipe open,
        # and then its copy goes on in the background.
        for thread in self.threads:
            thread.join(timeout=10)
        if self.steps:
            self._show(f"crumb: built in {time.monotonic() - self.start:.0f} s ({self.steps} steps) ... ")


@contextlib.contextmanager
def _progress():
    tty = None
    if os.environ.get("CRUMB_PIP_PROGRESS", "1") != "0" and not sys.stdout.isatty() and not _pip_is_verbose():
        try:
            tty = open("/dev/tty", "w")
        except OSError:
            tty = None
    if tty is None:
        yield
        return
    progress = _Progress(tty)
    try:
        yield
    finally:
        progress.close()
        tty.close()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    settings = _settings(config_settings)
    with _progress():
        return _skbuild.build_wheel(wheel_directory, settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    settings = _settings(config_settings)
    with _progress():
        return _skbuild.build_editable(wheel_directory, settings, metadata_directory)


if hasattr(_skbuild, "prepare_metadata_for_build_wheel"):

    def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
        return _skbuild.prepare_metadata_for_build_wheel(metadata_directory, _settings(config_settings))

    def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
        return _skbuild.prepare_metadata_for_build_editable(metadata_directory, _settings(config_settings))
