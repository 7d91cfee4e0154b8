#!/usr/bin/env bash
# Assembles gpu-carry/ (git-ignored): what the bare GPU machine lacks to build and benchmark Crumb.
# That machine has nvcc, CMake, ninja, PyTorch and compute-sanitizer but no package registry, so this
# copies from this machine's Debian packages: the Fashion-MNIST files, Eigen's headers and CMake package,
# GoogleTest's headers and static libraries, zlib's headers and shared library, Google Benchmark (for
# kernels_bench) and a relocatable Open MPI 4.1 runtime (mpirun, libmpi, PMIx; for the NCCL path, which
# CMake builds only with MPI). Name gpu-carry in the device tool's `carry`, then run tools/bench/gpu.sh
# there. The device tool sends at most 64 MiB (tracked files + carried folders): the size is checked.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out="$repo/gpu-carry"
L=/usr/lib/x86_64-linux-gnu
rm -rf "$out"
mkdir -p "$out/data" "$out/eigen/include" "$out/eigen/share" "$out/gtest/include" "$out/gtest/lib" \
         "$out/zlib/include" "$out/zlib/lib"
cp /usr/share/datasets/fashion-mnist/*.gz "$out/data/"
cp -r /usr/include/eigen3 "$out/eigen/include/"
cp -r /usr/share/eigen3 "$out/eigen/share/"   # Eigen3Config.cmake finds include/eigen3 from here
cp -r /usr/include/gtest "$out/gtest/include/"
cp $L/libgtest.a $L/libgtest_main.a "$out/gtest/lib/"
cp /usr/include/zlib.h /usr/include/zconf.h "$out/zlib/include/"
# The shared library: libcrumb.so links zlib, and Debian's libz.a is not position-independent.
cp -L $L/libz.so "$out/zlib/lib/libz.so"

# Google Benchmark (libbenchmark-dev): its CMake package finds the prefix four folders up, so the
# Debian layout is kept (-Dbenchmark_DIR=gpu-carry/benchmark/lib/x86_64-linux-gnu/cmake/benchmark).
if [[ -f /usr/include/benchmark/benchmark.h && -d $L/cmake/benchmark ]]; then
  mkdir -p "$out/benchmark/include" "$out/benchmark/lib/x86_64-linux-gnu/cmake"
  cp -r /usr/include/benchmark "$out/benchmark/include/"
  cp -r $L/cmake/benchmark "$out/benchmark/lib/x86_64-linux-gnu/cmake/"
  cp -a $L/libbenchmark.so* $L/libbenchmark_main.a "$out/benchmark/lib/x86_64-linux-gnu/"
else
  echo "gpu_carry.sh: no Google Benchmark here (apt-get install libbenchmark-dev): kernels_bench will not build there" >&2
fi

# Open MPI 4.1 (openmpi-bin, libopenmpi-dev) laid out under one prefix, relocated there by OPAL_PREFIX
# (gpu.sh sets it, with PMIX_MCA_mca_base_component_path and LD_LIBRARY_PATH): the Debian prefix is /usr,
# the libraries and plugins under lib/x86_64-linux-gnu/openmpi/lib, help files under share/openmpi. Only
# plugins whose libraries come along (no UCX, libfabric, verbs, PSM: shared memory is all one machine
# needs). Checked on this machine with the system's Open MPI and PMIx hidden (mpirun -np 1 and 2).
if [[ -x /usr/bin/orterun && -e $L/libmpi.so.40 && -e $L/libpmix.so.2 ]]; then
  mpi="$out/mpi" lib="$out/mpi/lib/x86_64-linux-gnu/openmpi/lib"
  mkdir -p "$mpi/bin" "$lib/openmpi3" "$mpi/lib/x86_64-linux-gnu/openmpi/include" "$mpi/share" "$mpi/pmix/lib/pmix"
  cp /usr/bin/orterun /usr/bin/orted "$mpi/bin/"
  ln -s orterun "$mpi/bin/mpirun"
  libs=(libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 libevent_core-2.1.so.7
        libevent_pthreads-2.1.so.7 libudev.so.1 libpmix.so.2 libmunge.so.2 libmca_common_sm.so.40
        libmca_common_monitoring.so.50)
  for so in "${libs[@]}"; do cp -L "$L/$so" "$lib/$so"; done
  ln -s libmpi.so.40 "$lib/libmpi.so"
  ok=$(printf '%s\n' "${libs[@]}" linux-vdso.so.1 libc.so.6 libm.so.6 libz.so.1 /lib64/ld-linux-x86-64.so.2)
  for f in $L/openmpi/lib/openmpi3/*.so; do
    ldd "$f" | awk '{print $1}' | grep -qvxF "$ok" || cp -L "$f" "$lib/openmpi3/"
  done
  cp $L/openmpi/include/mpi.h $L/openmpi/include/mpi_portable_platform.h $L/openmpi/include/mpi-ext.h \
     "$mpi/lib/x86_64-linux-gnu/openmpi/include/"
  cp -r /usr/share/openmpi "$mpi/share/"
  cp -L $L/pmix2/lib/pmix/*.so "$mpi/pmix/lib/pmix/"
  cp -r $L/pmix2/share "$mpi/pmix/"
else
  echo "gpu_carry.sh: no Open MPI here (apt-get install openmpi-bin libopenmpi-dev): the NCCL path cannot be built there" >&2
fi
du -sh "$out"/*

# What the device tool sends: tracked files, untracked files git does not ignore, and this folder.
sent=$(cd "$repo" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
       du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
carried=$(du -sb "$out" | cut -f1)
total=$(( sent + carried ))
echo "sent with gpu-carry: $(( total >> 20 )) MiB of the device tool's 64 MiB (working tree $(( sent >> 20 )) MiB)"
(( total < 64 << 20 )) || { echo "gpu_carry.sh: over the device tool's 64 MiB" >&2; exit 1; }
