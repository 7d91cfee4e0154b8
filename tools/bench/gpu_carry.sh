#!/usr/bin/env bash
# Assembles gpu-carry/ (git-ignored): what the bare GPU machine lacks to build and benchmark Crumb.
# That machine has nvcc, CMake, ninja, PyTorch and compute-sanitizer but no package registry, so this
# copies from this machine's Debian packages: the Fashion-MNIST files, Eigen's headers and CMake package,
# GoogleTest's headers and static libraries, and zlib's headers and static library. Name gpu-carry in
# the device tool's `carry`, then run tools/bench/gpu.sh there.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out="$repo/gpu-carry"
rm -rf "$out"
mkdir -p "$out/data" "$out/eigen/include" "$out/eigen/share" "$out/gtest/include" "$out/gtest/lib" \
         "$out/zlib/include" "$out/zlib/lib"
cp /usr/share/datasets/fashion-mnist/*.gz "$out/data/"
cp -r /usr/include/eigen3 "$out/eigen/include/"
cp -r /usr/share/eigen3 "$out/eigen/share/"   # Eigen3Config.cmake finds include/eigen3 from here
cp -r /usr/include/gtest "$out/gtest/include/"
cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$out/gtest/lib/"
cp /usr/include/zlib.h /usr/include/zconf.h "$out/zlib/include/"
cp /usr/lib/x86_64-linux-gnu/libz.a "$out/zlib/lib/"
du -sh "$out"
