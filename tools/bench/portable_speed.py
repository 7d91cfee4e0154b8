"""What the portable build (pip install ., CRUMB_NATIVE=OFF) costs against -march=native: the same training
runs of `train` from a native build and from a portable one, alternately, best of N samples/s each. The
portable build runs with the kernels the loader picks for this CPU, and again with the loader held to
x86-64-v3 (AVX2 + FMA) and to the x86-64-v2 baseline, as on CPUs without AVX-512 or without AVX2.
Besides samples/s (wall clock), each run's CPU seconds (user + sys, the whole run): on a machine shared
with other jobs they move far less than the wall clock, and with one thread they are the run's cost.

    cmake -S . -B build-portable -G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCRUMB_NATIVE=OFF \\
          -DCRUMB_CUDA=OFF -DCRUMB_BUILD_TESTS=OFF -DCRUMB_BUILD_BENCH=OFF && cmake --build build-portable
    python3 tools/bench/portable_speed.py [--native build/train] [--portable build-portable/train] [--repeat 3]
"""

import argparse
import json
import pathlib
import re
import resource
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOADER = "/lib64/ld-linux-x86-64.so.2"

# Synthetic data (no files needed), one epoch; the test pass is small so that steps dominate.
MODELS = {
    "lenet5": ["--model=lenet5", "--dataset=synthetic", "--batch=64", "--limit-train=8192", "--limit-test=64"],
    "resnet20": ["--model=resnet20", "--dataset=synthetic", "--input=3x32x32", "--batch=128", "--limit-train=1280",
                 "--limit-test=128"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--native", default=str(ROOT / "build" / "train"))
    ap.add_argument("--portable", default=str(ROOT / "build-portable" / "train"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="lenet5,resnet20")
    a = ap.parse_args()

    supported = subprocess.run([LOADER, "--help"], capture_output=True, text=True).stdout
    levels = [lv for lv in ("x86-64-v4", "x86-64-v3") if re.search(rf"{lv} \(supported", supported)]
    builds = {"native": [a.native], "portable": [a.portable]}
    for level in levels[1:] + ["x86-64-v2"]:
        builds[f"portable, {level} kernels"] = [LOADER, "--glibc-hwcaps-mask", level, a.portable]
    for model in a.models.split(","):
        best = dict.fromkeys(builds, 0.0)
        cpu = dict.fromkeys(builds, float("inf"))
        for i in range(a.repeat):
            for name, command in builds.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                out = subprocess.run([*command, *MODELS[model], f"--threads={a.threads}", "--seed=0"],
                                     capture_output=True, text=True, check=True).stdout
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                seconds = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                speed = json.loads(out.strip().splitlines()[-1])["samples_per_s"]
                print(f"{model} run {i + 1}: {name} {speed:.0f} samples/s, {seconds:.2f} CPU s", flush=True)
                best[name], cpu[name] = max(best[name], speed), min(cpu[name], seconds)
        summary = ", ".join(f"{name} {s:.0f} ({s / best['native']:.2f})" for name, s in best.items())
        print(f"{model}, best of {a.repeat} (samples/s, against native): {summary}", flush=True)
        summary = ", ".join(f"{name} {s:.2f} ({cpu['native'] / s:.2f})" for name, s in cpu.items())
        print(f"{model}, least of {a.repeat} (CPU s, native's over this): {summary}", flush=True)


if __name__ == "__main__":
    main()
