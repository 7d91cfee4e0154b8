"""The installed package runs on any x86-64 CPU since about 2009 (x86-64-v2) and is fast on newer ones:
libcrumb and the module hold no instruction beyond x86-64-v2, the CPU kernels come three times
(libcrumb_kernels_cpu.so for x86-64-v2, glibc-hwcaps/x86-64-v3/ for AVX2 + FMA, glibc-hwcaps/x86-64-v4/
for AVX-512), and the dynamic loader loads the best one the CPU runs. Skipped for a build that is not
portable (PYTHONPATH=build/python of a -march=native build)."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import crumb

PACKAGE = pathlib.Path(crumb.__file__).resolve().parent
KERNELS = "libcrumb_kernels_cpu.so"
LEVELS = ("x86-64-v3", "x86-64-v4")
LOADER = pathlib.Path("/lib64/ld-linux-x86-64.so.2")

pytestmark = pytest.mark.skipif(not (PACKAGE / "glibc-hwcaps").is_dir(),
                                reason="not a portable build (CRUMB_NATIVE=OFF): no glibc-hwcaps/ in the package")

# Instructions x86-64-v2 lacks, as objdump spells them: anything VEX or EVEX encoded (AVX and later: their
# mnemonics start with v, apart from the old verr/verw; and the BMI/BMI2 ones that act on general
# registers), LZCNT and MOVBE, and any ymm/zmm/mask register.
BEYOND_V2 = re.compile(r"\t(v(?!err|erw)[a-z0-9]+|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|"
                       r"lzcnt|movbe)\b")
REGISTERS = re.compile(r"%(ymm|zmm|k[0-7])")


def beyond_v2(path):
    """What a shared library holds that an x86-64-v2 CPU does not have: instructions by mnemonic, and
    registers by kind (ymm, zmm, k for AVX-512's masks), with their counts."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                          check=True).stdout
    found = {}
    for line in text.splitlines():
        m = BEYOND_V2.search(line)
        keys = ([m.group(1)] if m else []) + [r[:1] if r.startswith("k") else r for r in REGISTERS.findall(line)]
        for key in keys:
            found[key] = found.get(key, 0) + 1
    return found


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")
def test_only_the_kernels_for_newer_cpus_use_their_instructions():
    baseline = [p for p in PACKAGE.glob("*.so")]
    assert {p.name for p in baseline} >= {"libcrumb.so", KERNELS}
    for path in baseline:
        assert beyond_v2(path) == {}, f"{path.name} has instructions beyond x86-64-v2"
    # The check sees them where they are: AVX2 + FMA in the x86-64-v3 kernels, AVX-512 in the v4 ones.
    v3 = beyond_v2(PACKAGE / "glibc-hwcaps" / "x86-64-v3" / KERNELS)
    assert v3.get("vfmadd231ps", 0) > 0 and v3.get("ymm", 0) > 0 and "zmm" not in v3
    v4 = beyond_v2(PACKAGE / "glibc-hwcaps" / "x86-64-v4" / KERNELS)
    assert v4.get("zmm", 0) > 0
    # AVX512_BF16 (beyond v4, chosen at run time) in the v4 kernels only, F16C's conversions from v3 up.
    assert v4.get("vdpbf16ps", 0) > 0 and "vdpbf16ps" not in v3 and v3.get("vcvtph2ps", 0) > 0


# Trains a few steps and prints the kernel library the process loaded and the last loss.
TRAIN = """
import numpy as np, crumb
rng = np.random.default_rng(0)
x = rng.integers(0, 256, size=(96, 1, 28, 28), dtype=np.uint8)
y = (x[:, 0, :14].mean(axis=(1, 2)) > x[:, 0, 14:].mean(axis=(1, 2))).astype(np.int64)
t = crumb.Trainer(model="lenet5", batch=32, lr=0.05, seed=0, threads=1, progress=False, precision=PRECISION)
loss = t.fit(x, y, epochs=1)[-1]["loss"]
maps = open("/proc/self/maps").read().split()
print([m for m in maps if m.endswith("libcrumb_kernels_cpu.so")][0], loss)
"""


def run_training(prefix=(), precision="fp32"):
    out = subprocess.run([*prefix, sys.executable, "-c", TRAIN.replace("PRECISION", repr(precision))],
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(PACKAGE.parent)))
    assert out.returncode == 0, out.stderr[-2000:]
    library, loss = out.stdout.split()[-2:]
    return pathlib.Path(library).resolve(), float(loss)


def expected_library(level):
    return (PACKAGE / KERNELS if level == "x86-64-v2" else PACKAGE / "glibc-hwcaps" / level / KERNELS).resolve()


@pytest.mark.skipif(not LOADER.exists(), reason="needs glibc's x86-64 loader")
def test_each_cpu_level_loads_its_kernels_and_trains_alike():
    # The loader runs the program with only the glibc-hwcaps levels listed (up to what the CPU has).
    supported = subprocess.run([str(LOADER), "--help"], capture_output=True, text=True).stdout
    levels = ["x86-64-v2"] + [lv for lv in LEVELS if re.search(rf"{lv} \(supported", supported)]
    losses = {}
    for level in levels:
        library, losses[level] = run_training([str(LOADER), "--glibc-hwcaps-mask", level])
        assert library == expected_library(level)
    # FMA or not rounds differently, no more.
    for level in levels:
        assert losses[level] == pytest.approx(losses["x86-64-v2"], rel=1e-4), losses
    # bf16 takes each level's own kernels (widened on v2 and v3; vdpbf16ps or AMX tiles on v4 where the CPU
    # has them, whose tile configuration the portable build once compiled away: SIGILL), which round their
    # sums differently.
    bf16 = {level: run_training([str(LOADER), "--glibc-hwcaps-mask", level], "bf16")[1] for level in levels}
    for level in levels:
        assert bf16[level] == pytest.approx(losses["x86-64-v2"], rel=0.05), bf16


@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="needs qemu-x86_64 (Debian: qemu-user)")
@pytest.mark.parametrize("cpu,level", [("SandyBridge", "x86-64-v2"), ("Haswell-v4", "x86-64-v3")])
def test_runs_on_an_older_cpu(cpu, level):
    # The whole process (Python, numpy, crumb) on an emulated CPU of 2011 (AVX, no AVX2 or FMA: the
    # baseline kernels) or 2013 (AVX2 and FMA): an instruction it lacks ends it with SIGILL. (Not older:
    # numpy 2.4 from PyPI needs AVX itself; the instructions above cover x86-64-v2.)
    library, loss = run_training(["qemu-x86_64", "-cpu", cpu])
    assert library == expected_library(level)
    assert 0 < loss < 10
