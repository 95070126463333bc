#!/usr/bin/env bash
# The Bazel half of CI (a lane of .ci/run, run in parallel with the pip/uv
# checks; it can also run alone), from the repository root, with .venv
# (Python 3.11) and .venv-newest (the newest Python CI tests) already set up
# from requirements.lock. Each phase prints how long it took.
#   tools/ci_bazel.sh                    everything
#   tools/ci_bazel.sh --part=main        all but the downstream examples
#   tools/ci_bazel.sh --part=examples    only the downstream examples
# (.ci/run runs the two parts in different lanes.)
set -euo pipefail
cd "$(dirname "$0")/.."
caller_timings=${CI_TIMINGS:-}
CI_LANE=${CI_LANE:-bazel}  # before ci_lib.sh, whose default is "main"
source tools/ci_lib.sh
part=all
case ${1:-} in
  "") ;;
  --part=main | --part=examples | --part=all) part=${1#--part=} ;;
  *)
    echo "usage: tools/ci_bazel.sh [--part=main|examples|all]" >&2
    exit 2
    ;;
esac
# The workspaces this part runs Bazel in (each gets its own ci.bazelrc).
workspaces=()
[[ $part == examples ]] || workspaces+=(.)
[[ $part == main ]] || workspaces+=(examples/bazel_downstream examples/bazel_larger_project examples/order_safe_binding)
cleanup() {
  local status=$?
  end_phase
  for workspace in "${workspaces[@]}"; do
    if [[ -f $workspace/ci.bazelrc ]]; then
      (cd "$workspace" && bazel shutdown 2>/dev/null) || true
      rm -f "$workspace/ci.bazelrc"
    fi
  done
  rm -rf "${scratch:-}"
  [[ -n $caller_timings ]] || print_timings "$SECONDS"
  exit "$status"
}
trap cleanup EXIT

section "Bazel: install"
if ! command -v bazel >/dev/null 2>&1 || [[ ! -d /usr/share/bazel/rules/java ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q bazel-bootstrap bazel-rules-java
fi
bazel --version 2>/dev/null || true
scratch=$(mktemp -d)

# Bazel's output roots on the scratch filesystem (tmpfs, where .ci/run found
# one): every test's runfiles tree and sandbox is thousands of links, which
# this machine's disk makes slow. Through the `try-import` line of each
# workspace's .bazelrc (ci.bazelrc, ignored by git, removed at the end), so
# that the commands below are the documented ones.
for workspace in "${workspaces[@]}"; do
  name=${workspace//\//-}
  printf 'startup --output_user_root=%s/bazel%s\n' "$scratch" "${name#.}" \
    >"$workspace/ci.bazelrc"
done

# Each example is a workspace of its own, with its own Bazel server.
run_examples() {
  section "Bazel: the downstream examples"
  (cd examples/bazel_downstream && bazel test //... && bazel shutdown)
  (cd examples/bazel_larger_project && bazel test //... && bazel shutdown)
  (cd examples/order_safe_binding && bazel test //... && bazel shutdown)
}

if [[ $part == examples ]]; then
  run_examples
  exit 0
fi

section "Bazel: buildifier --check (BUILD, .bzl, WORKSPACE, MODULE.bazel)"
tools/buildifier.sh --check

section "Bazel: bazel test //..."
bazel test //... 2>&1 | tee "$scratch/bazel_test.log"
# A passing run is a readable summary: no sandbox mount log, no size warning.
if grep -E 'linux-sandbox-pid1|specified size is too big' "$scratch/bazel_test.log"; then
  echo "bazel test printed sandbox debug output or a test size warning" >&2
  exit 1
fi

section "Bazel: bazel build //:wheel, the installed-package suite on it"
bazel build //:wheel
# Kept: the --config=cuda build below writes its own wheel to the same path.
mkdir -p "$scratch/wheels"
cp bazel-bin/entangle_jax-*.whl "$scratch/wheels/"
bazel_wheel=$(realpath "$scratch"/wheels/entangle_jax-*.whl)
uv venv --quiet --python 3.11 "$scratch/venv"
VIRTUAL_ENV=$scratch/venv uv pip sync --quiet --compile-bytecode --require-hashes requirements.lock
VIRTUAL_ENV=$scratch/venv uv pip install --quiet --no-deps "$bazel_wheel"
suite_against_installed "$scratch/venv/bin/python" . "$scratch/suite"
rm -rf "$scratch/venv" "$scratch/suite"

if [[ $part == all ]]; then
  run_examples
  rm -rf "$scratch"/bazel-examples-*  # their output roots, no longer needed
fi

section "Bazel: bazel build --config=cuda //..."
if [[ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]]; then
  bazel build --config=cuda //...
else
  echo "skipped: no nvcc under ${CUDA_PATH:-/usr/local/cuda}"
fi
bazel shutdown

# The newest Python's wheel, built from scratch with a fresh HOME: the
# interpreter is named through $ENTANGLE_JAX_PYTHON (as README "Bazel" says),
# every repository is fetched anew for it, and the build must leave HOME
# empty.
newest_python=$(.venv-newest/bin/python -c 'import os, sys; print(os.path.realpath(sys.executable))')
newest_tag=$(.venv-newest/bin/python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
section "Bazel: a build of //... for $(basename "$newest_python") with a fresh HOME writes nothing there"
tools/bazel/fresh_home_check.sh "$newest_python" "$scratch/newest-wheel"
newest_bazel_wheel=$(realpath "$scratch"/newest-wheel/entangle_jax-*.whl)

# Both Bazel wheels against meson wheels built without CUDA for the same
# interpreters: from .ci/run, the README Install wheels (uv build, which its
# locks lane builds with no nvcc on PATH and leaves in $CI_MESON_WHEELS);
# alone, built here.
section "Bazel: both wheels compared with meson's (cp311 and $newest_tag)"
if [[ -n ${CI_MESON_WHEELS:-} ]]; then
  for _ in $(seq 900); do
    compgen -G "$CI_MESON_WHEELS/entangle_jax-*-cp311-*.whl" >/dev/null &&
      compgen -G "$CI_MESON_WHEELS/entangle_jax-*-$newest_tag-*.whl" >/dev/null && break
    sleep 2
  done
  meson_wheel=$(realpath "$CI_MESON_WHEELS"/entangle_jax-*-cp311-*.whl)
  newest_meson_wheel=$(realpath "$CI_MESON_WHEELS"/entangle_jax-*-"$newest_tag"-*.whl)
else
  rm -rf dist/meson dist/meson-newest
  uv run python -m pip wheel --quiet --no-deps --no-build-isolation \
    -Csetup-args=-Dcuda=disabled -Cbuild-dir=build/meson-wheel -w dist/meson .
  # Through `uv run`, which puts the venv's meson and ninja on PATH.
  UV_PROJECT_ENVIRONMENT=.venv-newest uv run python -m pip wheel --quiet --no-deps \
    --no-build-isolation -Csetup-args=-Dcuda=disabled -Cbuild-dir=build/meson-wheel-newest \
    -w dist/meson-newest .
  meson_wheel=$(realpath dist/meson/entangle_jax-*.whl)
  newest_meson_wheel=$(realpath dist/meson-newest/entangle_jax-*.whl)
fi
# wheel_test is not in the Bazel suite: it needs the meson wheel too. It also
# checks that both are tagged for the interpreter running it.
ENTANGLE_JAX_BAZEL_WHEEL=$bazel_wheel ENTANGLE_JAX_MESON_WHEEL=$meson_wheel \
  uv run pytest --noconftest tests/repository/wheel_test.py
ENTANGLE_JAX_BAZEL_WHEEL=$newest_bazel_wheel ENTANGLE_JAX_MESON_WHEEL=$newest_meson_wheel \
  UV_PROJECT_ENVIRONMENT=.venv-newest uv run pytest --noconftest tests/repository/wheel_test.py
