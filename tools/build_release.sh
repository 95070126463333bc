#!/usr/bin/env bash
# Builds a release candidate into DIR (empty or absent):
#   tools/build_release.sh DIR
# leaves there the sdist and a manylinux_2_28 x86_64 wheel for the running
# Python (python3, or $PYTHON), built from that sdist, and checks them:
#   * the sdist is meson's (`uv build --sdist`): the committed files, with
#     tools/xla_ffi_pin.json, never the XLA FFI headers themselves;
#   * the wheel is compiled by zig's clang (PyPI's ziglang) for glibc 2.28,
#     with LLVM's libc++ linked in statically and hidden (the extensions
#     need only libc, libm, libpthread, libdl and the loader), stripped,
#     without the CUDA store; retagged manylinux_2_28_x86_64 (meson-python
#     names the host's platform, linux_x86_64), and `auditwheel show` must
#     accept that tag as it is, without repair (tools/manylinux_check.py);
#   * `twine check --strict` on both, `check-wheel-contents` on the wheel.
# Runs on Linux x86-64 with uv and git; no C++ compiler of the machine's is
# used. The tools come from requirements-release.lock (tools/release_tools.sh).
# tools/check_release.sh DIR then installs both where a user would.
# docs/development.md, "Release", says why zig.
set -euo pipefail
if [[ $# != 1 ]]; then
  echo "usage: tools/build_release.sh DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
glibc=2.28
platform=manylinux_${glibc/./_}_x86_64
if [[ $(uname -s)/$(uname -m) != Linux/x86_64 ]]; then
  echo "tools/build_release.sh builds the Linux x86-64 wheel, on Linux x86-64 only" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
if [[ -n $(ls -A "$out") ]]; then
  echo "$out is not empty: give an empty or new folder" >&2
  exit 2
fi

source "$root/tools/release_tools.sh"
echo "--- release tools (requirements-release.lock)"
release_tools_venv
"$RELEASE_TOOLS/python" -m ziglang version | sed 's/^/zig /'

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

echo "--- sdist"
(cd "$root" && uv build --quiet --no-config --sdist --out-dir "$scratch/sdist")
sdist=$(echo "$scratch"/sdist/entangle_jax-*.tar.gz)
echo "built $(basename "$sdist")"

# zig cc and zig c++ for glibc 2.28, as the compilers meson finds in CC and
# CXX. `-s` at link time strips the symbols and debug information of the
# static libc++ (it would make each extension ten times larger).
echo "--- wheel from the sdist: zig c++ -target x86_64-linux-gnu.$glibc"
mkdir "$scratch/zig"
for tool in cc c++; do
  printf '#!/bin/sh\nexec "%s" -m ziglang %s -target x86_64-linux-gnu.%s "$@"\n' \
    "$RELEASE_TOOLS/python" "$tool" "$glibc" >"$scratch/zig/$tool"
  chmod +x "$scratch/zig/$tool"
done
CC=$scratch/zig/cc CXX=$scratch/zig/c++ LDFLAGS=-s \
  uv build --quiet --no-config --wheel --python "$python" --out-dir "$scratch/wheel" \
  -Csetup-args=-Dcuda=disabled "$sdist"
built=$(echo "$scratch"/wheel/entangle_jax-*.whl)
"$RELEASE_TOOLS/wheel" tags --remove --platform-tag "$platform" "$built" >/dev/null
wheel=$(echo "$scratch"/wheel/entangle_jax-*-"$platform".whl)
echo "built $(basename "$wheel")"

echo "--- auditwheel show"
"$RELEASE_TOOLS/auditwheel" show "$wheel" | tee "$scratch/auditwheel.txt"
"$RELEASE_TOOLS/python" "$root/tools/manylinux_check.py" "$wheel" <"$scratch/auditwheel.txt"

echo "--- twine check, check-wheel-contents"
"$RELEASE_TOOLS/twine" check --strict "$sdist" "$wheel"
"$RELEASE_TOOLS/check-wheel-contents" "$wheel"

cp "$sdist" "$wheel" "$out/"
echo "--- release candidate in $out:"
ls -l "$out"
