# Shared by the bench scripts (sourced). Expects $repo and $tmp to be set.

# Prints the train binary to use: $1 if given, else build/train (built if missing).
crumb_binary() {
  local crumb=${1:-}
  if [[ -z "$crumb" ]]; then
    crumb="$repo/build/train"
    if [[ ! -x "$crumb" ]]; then
      echo "== building Crumb (build/train missing)" >&2
      cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
      cmake --build "$repo/build" --target train >&2
    fi
  fi
  [[ -x "$crumb" ]] || { echo "crumb binary not executable: $crumb" >&2; return 1; }
  echo "$crumb"
}

# Runs one command, keeping only its last stdout line (the JSON summary) in $1; stderr progress
# passes through. Fails if the run fails or prints no JSON.
run_json() {
  local out=$1; shift
  echo "== $*" >&2
  if ! "$@" > "$tmp/stdout"; then
    echo "run failed: $*" >&2; return 1
  fi
  tail -n 1 "$tmp/stdout" > "$out"
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$out" 2>/dev/null \
    || { echo "no JSON summary as last stdout line of: $*" >&2; return 1; }
}
