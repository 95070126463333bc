#!/usr/bin/env bash
# The Bazel half of CI (a lane of .ci/run, run in parallel with the pip/uv
# checks; it can also run alone), from the repository root, with .venv
# (Python 3.11) and .venv-newest (the newest Python CI tests) already set up
# from requirements.lock. Each phase prints how long it took.
#   tools/ci_bazel.sh                    everything
#   tools/ci_bazel.sh --part=main        all but the downstream examples
#   tools/ci_bazel.sh --part=examples    only the downstream examples
# (.ci/run runs the two parts in different lanes.)
# Bazel builds and tests with $ENTANGLE_JAX_PYTHON where it is set (as
# docs/bazel.md says), else python3; the fresh-HOME build is for the other
# of Python 3.11 and the newest Python, so that each gets a Bazel wheel.
# .ci/run names the newest: its locks lane runs, with pytest on that
# interpreter, only the test files Bazel leaves out (tools/bazel_left_out.py).
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

# Each example is a workspace of its own, with its own Bazel server. Two
# CI-only settings (in their ci.bazelrc) spare work the three would each
# repeat, about 30 CPU-seconds of a run: one disk cache for their actions
# (the FFI headers and entangle_jax's own native sources compile alike in
# each), and order_safe_binding takes bazel_downstream's fetched Python
# environment, which the same `entangle_jax_repositories(python_interpreter
# = "python3")` makes from the same lock (a pip install of it each), with
# --override_repository. The commands stay the documented ones.
run_examples() {
  section "Bazel: the downstream examples"
  local workspace
  for workspace in examples/bazel_downstream examples/bazel_larger_project examples/order_safe_binding; do
    printf 'build --disk_cache=%s/bazel-disk-cache\n' "$scratch" >>"$workspace/ci.bazelrc"
  done
  (
    cd examples/bazel_downstream && bazel test //... && bazel_server_cpu
    echo "build --override_repository=entangle_jax_python=$(bazel info output_base)/external/entangle_jax_python" \
      >>../order_safe_binding/ci.bazelrc
    bazel shutdown
  )
  (cd examples/bazel_larger_project && bazel test //... && bazel_server_cpu && bazel shutdown)
  (cd examples/order_safe_binding && bazel test //... && bazel_server_cpu && bazel shutdown)
}

if [[ $part == examples ]]; then
  run_examples
  exit 0
fi

section "Bazel: buildifier --check (BUILD, .bzl, WORKSPACE, MODULE.bazel)"
tools/buildifier.sh --check

# The interpreter this part's Bazel runs, and the other one (the fresh-HOME
# build's), told apart by their tags: Python 3.11 (.venv's) and the newest
# (.venv-newest's), each with its environment from requirements.lock.
# (Each is asked for its real path: python3 may be a PATH shim, pyenv's.)
real_python() { "$1" -c 'import os, sys; print(os.path.realpath(sys.executable))'; }
tag_of() { "$1" -c 'import sys; print("cp%d%d" % sys.version_info[:2])'; }
python_311=$(real_python .venv/bin/python)
python_newest=$(real_python .venv-newest/bin/python)
newest_tag=$(tag_of "$python_newest")
bazel_python=$(real_python "${ENTANGLE_JAX_PYTHON:-python3}")
bazel_tag=$(tag_of "$bazel_python")
case $bazel_tag in
  "$newest_tag") other_python=$python_311 ;;
  cp311) other_python=$python_newest ;;
  *)
    echo "Bazel's interpreter $bazel_python ($bazel_tag) is neither 3.11 nor $newest_tag" >&2
    exit 1
    ;;
esac
other_tag=$(tag_of "$other_python")
venv_of() { if [[ $(tag_of "$1") == "$newest_tag" ]]; then echo .venv-newest; else echo .venv; fi; }
echo "Bazel runs $bazel_python ($bazel_tag); the fresh-HOME build $other_python ($other_tag)"
# Every Bazel command on this checkout runs with an empty HOME: its output
# root is new (ci.bazelrc), so every repository is fetched anew, and the
# build and the tests must leave HOME empty (checked after the last one).
bazel_home=$scratch/home
mkdir "$bazel_home"
main_bazel() { HOME=$bazel_home bazel "$@"; }
section "Bazel: bazel test //... ($bazel_tag), with an empty HOME"
main_bazel test //... 2>&1 | tee "$scratch/bazel_test.log"
HOME=$bazel_home bazel_server_cpu
# A passing run is a readable summary: no sandbox mount log, no size warning.
if grep -E 'linux-sandbox-pid1|specified size is too big' "$scratch/bazel_test.log"; then
  echo "bazel test printed sandbox debug output or a test size warning" >&2
  exit 1
fi

section "Bazel: bazel build //:wheel ($bazel_tag), the installed-package suite on it"
main_bazel build //:wheel
# Kept: the --config=cuda build below writes its own wheel to the same path.
mkdir -p "$scratch/wheels"
cp bazel-bin/entangle_jax-*.whl "$scratch/wheels/"
bazel_wheel=$(realpath "$scratch"/wheels/entangle_jax-*.whl)
uv venv --quiet --python "$bazel_python" "$scratch/venv"
# The lock's test tools only (tools/lock_subset.py), as .ci/run's routes.
python3 tools/lock_subset.py requirements.lock >"$scratch/test-tools.lock"
VIRTUAL_ENV=$scratch/venv uv pip sync --quiet --compile-bytecode --require-hashes "$scratch/test-tools.lock"
VIRTUAL_ENV=$scratch/venv uv pip install --quiet --no-deps "$bazel_wheel"
suite_against_installed "$scratch/venv/bin/python" . "$scratch/suite"
rm -rf "$scratch/venv" "$scratch/suite"

if [[ $part == all ]]; then
  run_examples
  rm -rf "$scratch"/bazelexamples-* "$scratch/bazel-disk-cache"  # their output roots and cache, no longer needed
fi

section "Bazel: bazel build --config=cuda //..."
if [[ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]]; then
  main_bazel build --config=cuda //...
else
  echo "skipped: no nvcc under ${CUDA_PATH:-/usr/local/cuda}"
fi
main_bazel shutdown
left=$(find "$bazel_home" -mindepth 1)
if [[ -n $left ]]; then
  printf 'bazel test //... wrote under HOME:\n%s\n' "$left" >&2
  exit 1
fi
echo "empty HOME: bazel test //..., //:wheel and --config=cuda wrote nothing there"

# The other interpreter's wheel, built from scratch with a fresh HOME: the
# interpreter is named through $ENTANGLE_JAX_PYTHON (as README "Bazel" says),
# every repository //:wheel needs is fetched anew for it, and the build must
# leave HOME empty. (//... is built and tested with an empty HOME above; for
# this interpreter the wheel alone: 51 CPU-seconds instead of 97.)
section "Bazel: //:wheel for $(basename "$other_python") from scratch with a fresh HOME writes nothing there"
tools/bazel/fresh_home_check.sh "$other_python" "$scratch/other-wheel" //:wheel
other_bazel_wheel=$(realpath "$scratch"/other-wheel/entangle_jax-*.whl)

# Both Bazel wheels against meson wheels built without CUDA for the same
# interpreters: from .ci/run, the README Install wheels (uv build, which its
# locks lane builds with no nvcc on PATH and leaves in $CI_MESON_WHEELS);
# alone, built here.
section "Bazel: both wheels compared with meson's ($bazel_tag and $other_tag)"
meson_wheel_of() {
  local python=$1 tag=$2
  if [[ -n ${CI_MESON_WHEELS:-} ]]; then
    for _ in $(seq 900); do
      compgen -G "$CI_MESON_WHEELS/entangle_jax-*-$tag-*.whl" >/dev/null && break
      sleep 2
    done
    realpath "$CI_MESON_WHEELS"/entangle_jax-*-"$tag"-*.whl
  else
    rm -rf "dist/meson-$tag"
    # Through `uv run`, which puts the venv's meson and ninja on PATH.
    UV_PROJECT_ENVIRONMENT=$(venv_of "$python") uv run python -m pip wheel --quiet \
      --no-deps --no-build-isolation -Csetup-args=-Dcuda=disabled \
      -Cbuild-dir="build/meson-wheel-$tag" -w "dist/meson-$tag" . >&2
    realpath "dist/meson-$tag"/entangle_jax-*.whl
  fi
}
# wheel_test is not in the Bazel suite: it needs the meson wheel too. It also
# checks that both are tagged for the interpreter running it.
compare_wheels() {
  local python=$1 tag=$2 bazel_built=$3 meson_built
  meson_built=$(meson_wheel_of "$python" "$tag")
  ENTANGLE_JAX_BAZEL_WHEEL=$bazel_built ENTANGLE_JAX_MESON_WHEEL=$meson_built \
    UV_PROJECT_ENVIRONMENT=$(venv_of "$python") \
    uv run pytest --noconftest tests/repository/wheel_test.py
}
compare_wheels "$bazel_python" "$bazel_tag" "$bazel_wheel"
compare_wheels "$other_python" "$other_tag" "$other_bazel_wheel"
