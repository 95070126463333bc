#!/usr/bin/env bash
# Builds entangle-jax with its CUDA store on a GPU machine that has JAX (with
# CUDA), pybind11, meson, ninja and nvcc but no package index, then runs
# tools/gpu_check.py. Usage: tools/gpu_check.sh OUT_DIR
#
# The XLA FFI headers cannot be downloaded there: prepare them here first
#   python3 tools/xla_ffi_headers.py fetch .gpu/xla_ffi
# and carry .gpu along; the build verifies them against the pin as usual.
# Finishes in a few minutes; safe to re-run (it rebuilds into build/gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: tools/gpu_check.sh OUT_DIR}")
mkdir -p "$out"
export ENTANGLE_JAX_FFI_HEADERS=${ENTANGLE_JAX_FFI_HEADERS:-$PWD/.gpu/xla_ffi}
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  python3 -c 'import jax; print("jax", jax.__version__, jax.devices())'
  python3 -m pip install --quiet --no-index --no-deps --no-build-isolation \
    --force-reinstall -Cbuild-dir=build/gpu -Csetup-args=-Dcuda=enabled .
  # Run from outside the checkout so the installed package is imported.
  (cd "$out" && timeout 420 python3 "$OLDPWD/tools/gpu_check.py" "$out")
  (cd "$out" && timeout 120 python3 -m pytest -q -p no:cacheprovider \
    "$OLDPWD/tests/gpu_test.py" "$OLDPWD/tests/hazard_test.py")
} 2>&1 | tee "$out/gpu_check.log"
