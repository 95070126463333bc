#!/usr/bin/env bash
# Regenerates the hashed requirement locks from pyproject.toml.
#   requirements.lock         newest versions pyproject admits (uv export)
#   requirements-oldest.lock  the same, with jax/jaxlib at the oldest supported
#   requirements-release.lock the release group alone (tools/build_release.sh)
#   requirements-mpi.lock     mpi4jax and its build needs
#                             (tools/requirements-mpi.in), for .ci/run's
#                             release lane, at requirements.lock's versions
# The first two hold every dependency group but release, and every extra
# ([export]), so CI and Bazel's environment (which installs
# requirements.lock) get all of them; the release tools (400 MB of zig) go
# only into the venv tools/build_release.sh makes.
# uv.lock, which uv sync writes, records registry addresses and stays out of
# git; these exported locks are what CI and Bazel install from.
set -euo pipefail
cd "$(dirname "$0")/.."
oldest_jax=$(python3 -c 'import json; print(json.load(open("tools/xla_ffi_pin.json"))["jaxlib"])')
uv lock --quiet
uv export --quiet --format requirements-txt --all-groups --no-group release --all-extras \
  --no-emit-project --output-file requirements.lock
uv export --quiet --format requirements-txt --only-group release --no-emit-project \
  --output-file requirements-release.lock
# A fixed (ignored) path, so that the lock's "-c" annotations do not change
# from one run to the next.
constraints=build/oldest-jax-constraints.txt
mkdir -p build
printf 'jax==%s\njaxlib==%s\n' "$oldest_jax" "$oldest_jax" >"$constraints"
uv pip compile --quiet pyproject.toml --all-extras --group dev --group bench --group docs --generate-hashes \
  --python-version 3.11 --constraint "$constraints" --no-header \
  --output-file requirements-oldest.lock
# Constrained by requirements.lock, so that installing it into that lock's
# environment (Python 3.11) changes nothing there: jax, numpy and the rest
# stay at its versions. Its header says the command.
uv pip compile --quiet tools/requirements-mpi.in --python-version 3.11 --generate-hashes \
  --constraint requirements.lock --output-file requirements-mpi.lock
echo "locked: requirements.lock, requirements-oldest.lock (jax $oldest_jax), requirements-release.lock, requirements-mpi.lock"
