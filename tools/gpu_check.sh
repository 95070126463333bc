#!/usr/bin/env bash
# Builds entangle-jax with its CUDA store on a GPU machine that has JAX (with
# CUDA), pybind11, meson, ninja and nvcc but neither meson-python nor a package
# index, then runs tools/gpu_check.py (python3 -m tools.gpu_check) and the
# GPU tests.
# Usage: tools/gpu_check.sh OUT_DIR   (re-runnable; finishes in a few minutes)
#
# The XLA FFI headers cannot be downloaded there: prepare them beforehand,
#   python3 tools/xla_ffi_headers.py fetch .gpu/xla_ffi
# and bring .gpu along. The build still checks them against the pin.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$(realpath -m "${1:?usage: tools/gpu_check.sh OUT_DIR}")
mkdir -p "$out"
export ENTANGLE_JAX_FFI_HEADERS=${ENTANGLE_JAX_FFI_HEADERS:-$repo/.gpu/xla_ffi}
export PYTHONUNBUFFERED=1

run() {
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  python3 -c 'import jax; print("jax", jax.__version__, jax.devices())'

  # Plain meson (no meson-python there): build, then install into a staging
  # prefix that goes on PYTHONPATH.
  local build=$repo/build/gpu stage=$out/stage
  rm -rf "$stage"
  if [[ -d "$build" ]]; then
    meson setup --reconfigure "$build" -Dcuda=enabled
  else
    meson setup "$build" -Dcuda=enabled -Dbuildtype=release \
      -Dpython.install_env=prefix --prefix="$stage"
  fi
  meson configure "$build" --prefix="$stage"
  ninja -C "$build"
  meson install -C "$build" --quiet
  local site
  site=$(dirname "$(dirname "$(find "$stage" -path '*/entangle_jax/__init__.py' | head -n 1)")")
  export PYTHONPATH=$site
  # Import from outside the checkout, so the staged package is the one found.
  cd "$out"
  python3 -c 'import entangle_jax; print("entangle_jax from", entangle_jax.__file__)'
  # The checkout's root comes after the staged package on the path: tools
  # and benchmarks are found there, entangle_jax in the stage.
  PYTHONPATH=$site:$repo timeout 420 python3 -m tools.gpu_check "$out"
  rm -rf "$out/tests"
  cp -r "$repo/tests" "$out/tests"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rs \
    tests/primitive/gpu_test.py tests/primitive/hazard_test.py
}

run 2>&1 | tee "$out/gpu_check.log"
