# The release tools' environment (sourced by tools/build_release.sh,
# tools/check_release.sh and tools/check_workflows.sh; not run).
#
# release_tools_venv: makes (or brings up to date) a venv at
# $RELEASE_TOOLS_VENV, default build/release-tools in the checkout, holding
# exactly requirements-release.lock (hashed pins: zig's toolchain from
# ziglang, auditwheel, wheel, twine, check-wheel-contents, cibuildwheel,
# actionlint), and sets RELEASE_TOOLS to its bin/ folder. Needs uv and
# Python 3.11 or newer (python3, or $RELEASE_TOOLS_PYTHON).

release_tools_venv() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  local venv=${RELEASE_TOOLS_VENV:-$root/build/release-tools}
  uv venv --quiet --allow-existing --python "${RELEASE_TOOLS_PYTHON:-python3}" "$venv"
  VIRTUAL_ENV=$venv uv pip sync --quiet --require-hashes "$root/requirements-release.lock"
  RELEASE_TOOLS=$venv/bin
}
