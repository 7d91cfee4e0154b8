#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: JSON parser, IDX/gzip reader, checkpoint loader, .npy reader,
# network descriptions, the options and convolution choices a checkpoint records) with clang,
# ASan and UBSan into build-fuzz/ and runs each for SECONDS (default 30) from its seed corpus
# (tests/fuzz/corpus/<target>; new inputs go to a scratch folder, the seeds stay as committed).
# A crash, a sanitizer report or a leak fails the script and leaves the input in build-fuzz/.
#
# usage: tools/fuzz.sh [SECONDS] [TARGET...]      TARGET: json idx checkpoint npy network options conv_choices (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(json idx checkpoint npy network options conv_choices)

if ! command -v clang++ >/dev/null; then
  sudo=$([[ $(id -u) -eq 0 ]] && echo "" || echo sudo)
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCRUMB_FUZZ=ON \
  >/dev/null
cmake --build build-fuzz --target "${targets[@]/#/fuzz_}"

for t in "${targets[@]}"; do
  scratch=build-fuzz/corpus-$t
  mkdir -p "$scratch"
  echo "fuzz: $t for ${seconds} s" >&2
  (cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "./fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "corpus-$t" "../tests/fuzz/corpus/$t" 2>&1 | tail -n 12)
done
