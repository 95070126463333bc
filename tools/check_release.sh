#!/usr/bin/env bash
# Checks a release's sdist and the wheel of it for this machine and Python
# where a user would install them, and tests each install:
#   tools/check_release.sh DIR
# DIR holds the sdist and wheels (tools/build_release.sh's, or those
# .github/workflows/release.yml built with cibuildwheel, which runs this on
# every wheel it uploads, before the upload); the wheel checked is the one
# for the running Python (python3, or $PYTHON) and this machine: Linux
# x86_64 or aarch64 (manylinux), or macOS arm64.
#   0. the wheel's platform: on Linux `auditwheel show` must accept its
#      manylinux tag as it is (no repair), and that tag must be
#      manylinux_2_28 or older (tools/manylinux_check.py); on macOS its
#      tag must ask for macOS 11 at most;
#   1. the wheel, with the README's `pip install entangle-jax` as written,
#      DIR offered to pip beside the package index (PIP_FIND_LINKS), into a
#      fresh venv whose CC, CXX and PATH give no compiler (checked): pip
#      can only install the wheel; then `python -P -m entangle_jax.demo`
#      and the installed-package suite (tools/installed_suite.sh) there;
#   2. the sdist, with `pip install DIR/entangle_jax-VERSION.tar.gz`, into
#      another fresh venv, where pip builds it (the machine's compiler; the
#      CUDA store left out, as the wheel leaves it); the demo and the suite.
# The test tools come from requirements.lock (hashed), auditwheel from
# requirements-release.lock (tools/release_tools.sh). Needs uv, and a C++17
# compiler for step 2.
set -euo pipefail
if [[ $# != 1 ]]; then
  echo "usage: tools/check_release.sh DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(cd "$1" && pwd)
python=${PYTHON:-python3}
version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$root/pyproject.toml")
sdist=$dir/entangle_jax-$version.tar.gz
tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
case $(uname -s)/$(uname -m) in
  Linux/x86_64 | Linux/aarch64) platform="manylinux_*_$(uname -m)" ;;
  Darwin/arm64) platform="macosx_*_arm64" ;;
  *)
    echo "tools/check_release.sh checks Linux x86_64 and aarch64 and macOS arm64 wheels, not $(uname -s)/$(uname -m)" >&2
    exit 2
    ;;
esac
# cibuildwheel's repaired names may carry two tags (manylinux_2_27_x86_64.
# manylinux_2_28_x86_64): the pattern matches the last.
shopt -s nullglob
wheels=("$dir"/entangle_jax-"$version"-"$tag"-"$tag"-*$platform.whl)
shopt -u nullglob
if [[ ! -f $sdist || ${#wheels[@]} != 1 ]]; then
  echo "$dir must hold entangle_jax-$version.tar.gz and one $tag wheel for $platform (found ${#wheels[@]})" >&2
  exit 2
fi
wheel=${wheels[0]}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Runs "$@" where no compiler can run: PATH holds venv $1's programs and
# a folder of the few others pip and the suite run, CC and CXX name no file.
# Checked first.
without_compiler() {
  local venv=$1
  shift
  (
    export PATH=$venv/bin:$scratch/bin
    export CC=$scratch/no-compiler/cc CXX=$scratch/no-compiler/c++
    python -c '
import os, shutil, sys
names = ("cc", "c++", "gcc", "g++", "clang", "clang++", "zig", "nvcc")
found = {n: shutil.which(n) for n in names if shutil.which(n)}
found.update({v: os.environ[v] for v in ("CC", "CXX") if os.path.exists(os.environ[v])})
sys.exit(f"a compiler is there: {found}" if found else None)'
    "$@"
  )
}
mkdir "$scratch/bin"
for program in sh bash env uname ls cat rm mkdir cp mktemp dirname; do
  ln -s "$(command -v "$program")" "$scratch/bin/$program"
done

# The installed package's version, then the test tools from the hashed lock
# (after the package, so that they change nothing of what it installed),
# then the installed-package suite, in venv $1; in $2 ("without_compiler"
# or "with_compiler").
version_and_suite() {
  local venv=$1 where=$2
  with_compiler() { shift; "$@"; }
  (cd "$scratch" && "$where" "$venv" "$venv/bin/python" -P -c 'import entangle_jax, sys; print("entangle_jax", entangle_jax.__version__, "from", entangle_jax.__file__); sys.exit(entangle_jax.__version__ != sys.argv[1])' "$version")
  "$python" "$root/tools/lock_subset.py" "$root/requirements.lock" >"$scratch/test-tools.lock"
  uv pip install --quiet --compile-bytecode --python "$venv/bin/python" --require-hashes -r "$scratch/test-tools.lock"
  "$where" "$venv" "$root/tools/installed_suite.sh" "$venv/bin/python"
}

echo "--- the wheel's platform: $(basename "$wheel")"
if [[ $(uname -s) == Linux ]]; then
  source "$root/tools/release_tools.sh"
  release_tools_venv
  "$RELEASE_TOOLS/auditwheel" show "$wheel" | tee "$scratch/auditwheel.txt"
  "$RELEASE_TOOLS/python" "$root/tools/manylinux_check.py" "$wheel" manylinux_2_28 <"$scratch/auditwheel.txt"
else
  # macosx_MAJOR_MINOR_arm64: the oldest macOS it runs on; jaxlib needs 11.
  if [[ ! $(basename "$wheel") =~ -macosx_([0-9]+)_[0-9]+_arm64\.whl$ ]] || ((BASH_REMATCH[1] > 11)); then
    echo "$(basename "$wheel"): not tagged for macOS 11 or older on arm64" >&2
    exit 1
  fi
fi

echo "--- the wheel, with the README's command, where no compiler can run"
"$python" -m venv "$scratch/venv-wheel"
"$python" "$root/tools/readme_commands.py" Install --block 1 >"$scratch/readme-install.sh"
# README Install's second block, as written: pip install entangle-jax, and
# the demo; pip finds the candidate in DIR, beside the index.
(
  cd "$scratch"
  export PIP_FIND_LINKS="$dir ${PIP_FIND_LINKS:-}"
  without_compiler "$scratch/venv-wheel" bash -euxo pipefail "$scratch/readme-install.sh"
)
version_and_suite "$scratch/venv-wheel" without_compiler
rm -rf "$scratch/venv-wheel"

echo "--- the sdist, built by pip in a fresh venv"
"$python" -m venv "$scratch/venv-sdist"
"$scratch/venv-sdist/bin/python" -m pip install --quiet \
  --config-settings=setup-args=-Dcuda=disabled "$sdist"
(cd "$scratch" && "$scratch/venv-sdist/bin/python" -P -m entangle_jax.demo)
version_and_suite "$scratch/venv-sdist" with_compiler
rm -rf "$scratch/venv-sdist"
echo "--- the release candidate in $dir installs and passes, from the wheel and from the sdist"
