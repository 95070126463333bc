#!/usr/bin/env bash
# Builds //... from scratch with an empty HOME and Bazel's output root outside
# it, then fails if anything appeared under HOME (for example
# ~/.cache/entangle-jax, where the header tool caches outside Bazel). The
# interpreter is named by its real path, since a PATH shim (pyenv) may need
# HOME to work.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'HOME=$work/home bazel --output_user_root="$work/bazel" shutdown 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/home"
python=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
HOME=$work/home ENTANGLE_JAX_PYTHON=$python \
  bazel --output_user_root="$work/bazel" build //...
left=$(find "$work/home" -mindepth 1)
if [[ -n "$left" ]]; then
  echo "the build wrote under HOME:" >&2
  echo "$left" >&2
  exit 1
fi
echo "fresh HOME: nothing written there (no ~/.cache/entangle-jax)"
