#!/usr/bin/env bash
# The installed-package suite (INSTALLED_SUITE in tools/ci_lib.sh) against
# the entangle_jax installed for PYTHON (default: the python on PATH), from
# a copy of this checkout's tests/ in a temporary folder, so that no
# checkout's entangle_jax/ is imported:
#   tools/installed_suite.sh [PYTHON]
# PYTHON's environment needs the test tools (the dependency group `test`:
# absl-py, pytest, hypothesis, flatbuffers). cibuildwheel runs it on each
# wheel it builds ([tool.cibuildwheel] in pyproject.toml), and
# tools/check_release.sh on the release candidate's installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-python}
CI_TIMINGS=${CI_TIMINGS:-/dev/null} source "$root/tools/ci_lib.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
suite_against_installed "$python" "$root" "$scratch/suite"
