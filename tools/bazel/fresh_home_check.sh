#!/usr/bin/env bash
# Builds TARGET from scratch, from a copy of the checkout, with an empty HOME
# and Bazel's output root outside it, then fails if anything appeared under
# HOME (for example ~/.cache/entangle-jax, where the header tool caches when
# meson runs it). The copy keeps the checkout's bazel-* links, which point
# into another output root, out of `//...`. The interpreter is named by its
# real path, since a PATH shim (pyenv) may itself need HOME.
#   tools/bazel/fresh_home_check.sh [PYTHON [WHEEL_DIR [TARGET]]]
# PYTHON: the interpreter to build for (default: python3's real path);
# WHEEL_DIR: where to copy the //:wheel it built, for a comparison;
# TARGET: what to build (default //...; with WHEEL_DIR it must build
# //:wheel).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
cleanup() {
  set +e
  (cd "$work/src" && HOME=$work/home bazel --output_user_root="$work/bazel" \
    shutdown 2>/dev/null)
  chmod -R u+w "$work" 2>/dev/null
  # The server may still be writing as it stops: try again once.
  rm -rf "$work" 2>/dev/null || { sleep 5; rm -rf "$work"; }
}
trap cleanup EXIT
mkdir "$work/home" "$work/src"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 cp --parents -t "$work/src"
python=${1:-$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')}
wheel_dir=${2:-}
target=${3:-//...}
(
  cd "$work/src"
  HOME=$work/home ENTANGLE_JAX_PYTHON=$python \
    bazel --output_user_root="$work/bazel" build "$target"
  if [[ -n $wheel_dir ]]; then
    mkdir -p "$wheel_dir"
    bin=$(HOME=$work/home ENTANGLE_JAX_PYTHON=$python \
      bazel --output_user_root="$work/bazel" info bazel-bin)
    cp "$bin"/entangle_jax-*.whl "$wheel_dir/"
  fi
)
left=$(find "$work/home" -mindepth 1)
if [[ -n "$left" ]]; then
  echo "the build wrote under HOME:" >&2
  echo "$left" >&2
  exit 1
fi
echo "fresh HOME: nothing written there (no ~/.cache/entangle-jax)"
