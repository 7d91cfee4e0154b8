#!/usr/bin/env bash
# Installs a build into a temporary prefix and uses it as a program outside this tree would: every
# installed header compiles with the installed include folder alone, tools/examples/train_lenet5 builds
# with find_package(Crumb) from a fresh build folder, links the installed library and learns (test
# accuracy above chance by far), and the installed train binary runs.
#   tools/examples/check_install.sh [build folder, default build]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
fail() { echo "check_install: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
include="$prefix/include/crumb"
[ -f "$include/engine/run/executor.h" ] || fail "no engine/run/executor.h under $include"

# One translation unit that includes every installed header, outside the source tree, so a header that
# includes one that was not installed fails here.
(cd "$include" && find . -name '*.h' | sort | sed 's|^\./\(.*\)|#include "\1"|') > "$tmp/all_headers.cc"
(cd "$tmp" && c++ -std=c++17 -fsyntax-only -I"$include" all_headers.cc) ||
  fail "the installed headers do not compile on their own"

# The example, configured from a fresh folder against the installed tree only.
cmake -S "$repo/tools/examples/train_lenet5" -B "$tmp/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
crumb_dir="$(sed -n 's/^Crumb_DIR:PATH=//p' "$tmp/example/CMakeCache.txt")"
[ "$crumb_dir" = "$prefix/lib/cmake/Crumb" ] || fail "find_package(Crumb) found $crumb_dir, not the installed tree"
cmake --build "$tmp/example" >/dev/null
if grep -oE -- "-(I|isystem ?)[^ \"]+" "$tmp/example/compile_commands.json" | grep -vF -- "$prefix/"; then
  fail "the example compiled with an include folder outside the installed tree (above)"
fi
lib="$(ldd "$tmp/example/train_lenet5" | sed -n 's/.*libcrumb\.so => \([^ ]*\).*/\1/p')"
[ "$lib" = "$prefix/lib/libcrumb.so" ] || fail "the example loads libcrumb from '$lib', not $prefix/lib"

out="$("$tmp/example/train_lenet5" 200)"
echo "$out"
accuracy="$(echo "$out" | sed -n 's/^test: .*accuracy \([0-9.]*\)$/\1/p')"
[ -n "$accuracy" ] || fail "the example printed no test accuracy"
awk -v a="$accuracy" 'BEGIN { exit !(a > 0.5) }' || fail "the example's test accuracy $accuracy is not above 0.5"

# The installed train binary finds libcrumb through its RPATH.
"$prefix/bin/train" --model lenet5 --epochs 1 --limit-train 256 --limit-test 256 >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log" >&2; fail "the installed train binary does not run"; }
echo "check_install: ok"
