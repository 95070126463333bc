#!/usr/bin/env bash
# Checks the release's configuration here, where GitHub's runners are not:
#   * actionlint on .github/workflows/*.yml (ci.yml runs .ci/run; release.yml
#     builds, checks and publishes a release on a version tag);
#   * `CIBW_PLATFORM=linux cibuildwheel --print-build-identifiers` lists
#     exactly the Linux wheels a release means to build ([tool.cibuildwheel]
#     in pyproject.toml), and the macOS list its arm64 wheels.
# The tools come from requirements-release.lock (tools/release_tools.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tools/release_tools.sh"
release_tools_venv
cd "$root"
echo "--- actionlint"
"$RELEASE_TOOLS/actionlint" -version | head -n 1
"$RELEASE_TOOLS/actionlint" -color=false .github/workflows/*.yml
echo "clean: $(ls .github/workflows/*.yml | tr '\n' ' ')"

# platform, then the identifiers cibuildwheel must print for it.
expect_builds() {
  local platform=$1 listed
  shift
  listed=$(CIBW_PLATFORM=$platform "$RELEASE_TOOLS/cibuildwheel" --print-build-identifiers)
  echo "--- cibuildwheel --print-build-identifiers, CIBW_PLATFORM=$platform"
  echo "$listed"
  if [[ $listed != "$(printf '%s\n' "$@")" ]]; then
    printf 'expected:\n' >&2
    printf '%s\n' "$@" >&2
    exit 1
  fi
}
expect_builds linux \
  cp311-manylinux_x86_64 cp312-manylinux_x86_64 cp313-manylinux_x86_64 \
  cp311-manylinux_aarch64 cp312-manylinux_aarch64 cp313-manylinux_aarch64
expect_builds macos cp311-macosx_arm64 cp312-macosx_arm64 cp313-macosx_arm64
