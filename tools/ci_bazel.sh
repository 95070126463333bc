#!/usr/bin/env bash
# The Bazel half of CI (called by .ci/run after the pip/uv checks, from the
# repository root, with .venv (Python 3.11) and .venv-newest (the newest
# Python CI tests) already set up from requirements.lock). Each phase prints
# how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

phase_start=$SECONDS
phase_name=""
section() {
  if [[ -n "$phase_name" ]]; then
    printf '=== %s: %ds ===\n' "$phase_name" $((SECONDS - phase_start))
  fi
  phase_name=$*
  phase_start=$SECONDS
  printf '\n=== %s ===\n' "$*"
}

section "Bazel: install"
if ! command -v bazel >/dev/null 2>&1 || [[ ! -d /usr/share/bazel/rules/java ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q bazel-bootstrap bazel-rules-java
fi
bazel --version 2>/dev/null || true

section "Bazel: buildifier --check (BUILD, .bzl, WORKSPACE, MODULE.bazel)"
tools/buildifier.sh --check

section "Bazel: bazel test //..."
bazel test //... 2>&1 | tee "${TMPDIR:-/tmp}/entangle_jax_bazel_test.log"
# A passing run is a readable summary: no sandbox mount log, no size warning.
if grep -E 'linux-sandbox-pid1|specified size is too big' \
  "${TMPDIR:-/tmp}/entangle_jax_bazel_test.log"; then
  echo "bazel test printed sandbox debug output or a test size warning" >&2
  exit 1
fi

section "Bazel: bazel build //:wheel, compared with the meson wheel"
bazel build //:wheel
bazel_wheel=$(realpath bazel-bin/entangle_jax-*.whl)
rm -rf dist/meson
uv run python -m pip wheel --quiet --no-deps --no-build-isolation \
  -Csetup-args=-Dcuda=disabled -Cbuild-dir=build/meson-wheel -w dist/meson .
meson_wheel=$(realpath dist/meson/entangle_jax-*.whl)
# wheel_test is not in the Bazel suite: it needs the meson wheel too.
ENTANGLE_JAX_BAZEL_WHEEL=$bazel_wheel ENTANGLE_JAX_MESON_WHEEL=$meson_wheel \
  uv run pytest tests/wheel_test.py

section "Bazel: the wheel in a fresh venv, with the test suite"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
uv venv --quiet --python 3.11 "$scratch/venv"
VIRTUAL_ENV=$scratch/venv uv pip sync --quiet --require-hashes requirements.lock
VIRTUAL_ENV=$scratch/venv uv pip install --quiet --no-deps "$bazel_wheel"
# Run from a copy of the tests, so that the installed package is imported
# rather than the checkout's entangle_jax/. project_metadata_test reads the
# repository's files, which a wheel does not hold.
cp -r tests "$scratch/tests"
(
  cd "$scratch"
  venv/bin/python -c 'import entangle_jax, sys; f = entangle_jax.__file__; print("imported", f); sys.exit("site-packages" not in f)'
  venv/bin/python -m pytest -q -p no:cacheprovider tests \
    --ignore=tests/project_metadata_test.py
)

# The wheel for the newest Python: the interpreter is named through
# $ENTANGLE_JAX_PYTHON (as README "Bazel" says), in an output base of its own
# so that the Python 3.11 repositories above are not refetched.
section "Bazel: bazel build //:wheel for the newest Python, compared with its meson wheel"
newest_python=$(.venv-newest/bin/python -c 'import os, sys; print(os.path.realpath(sys.executable))')
newest_base=$scratch/bazel-newest
newest_bazel() {
  ENTANGLE_JAX_PYTHON=$newest_python bazel --output_base="$newest_base" "$@"
}
trap 'newest_bazel shutdown; rm -rf "$scratch"' EXIT
newest_bazel build --symlink_prefix=/ //:wheel
newest_bazel_wheel=$(realpath "$(newest_bazel info --symlink_prefix=/ bazel-bin)"/entangle_jax-*.whl)
newest_bazel shutdown
rm -rf dist/meson-newest
# Through `uv run`, which puts the venv's meson and ninja on PATH.
UV_PROJECT_ENVIRONMENT=.venv-newest uv run python -m pip wheel --quiet --no-deps \
  --no-build-isolation -Csetup-args=-Dcuda=disabled -Cbuild-dir=build/meson-wheel-newest \
  -w dist/meson-newest .
newest_meson_wheel=$(realpath dist/meson-newest/entangle_jax-*.whl)
# wheel_test also checks that both are tagged for the interpreter running it.
ENTANGLE_JAX_BAZEL_WHEEL=$newest_bazel_wheel ENTANGLE_JAX_MESON_WHEEL=$newest_meson_wheel \
  UV_PROJECT_ENVIRONMENT=.venv-newest uv run pytest tests/wheel_test.py

section "Bazel: the downstream examples"
bazel shutdown
(cd examples/bazel_downstream && bazel test //... && bazel shutdown)
(cd examples/bazel_larger_project && bazel test //... && bazel shutdown)

section "Bazel: a build with a fresh HOME writes nothing there"
# Repository rules may write only under their own directory: with a fresh
# HOME (and Bazel's output root elsewhere) the build must leave HOME empty,
# ~/.cache/entangle-jax included.
tools/bazel/fresh_home_check.sh

section "Bazel: bazel build --config=cuda //..."
if [[ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]]; then
  bazel build --config=cuda //...
else
  echo "skipped: no nvcc under ${CUDA_PATH:-/usr/local/cuda}"
fi
bazel shutdown
section "done"
