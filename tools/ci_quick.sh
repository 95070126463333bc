#!/usr/bin/env bash
# The fast local loop: what most changes can break, in a few minutes, in the
# checkout as it is (uncommitted changes included), with the dev environment
# `uv sync` made. The full run (.ci/run, about 20 minutes) is then needed
# once per change, not once per edit.
#   tools/ci_quick.sh            lint, format, types, then the whole suite
#   tools/ci_quick.sh -k NAME    extra arguments go to pytest
# The suite includes the code blocks of README.md and docs/ (docs_test).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
step() { printf '\n=== %s (%ds) ===\n' "$*" $((SECONDS - start)); }
step "uv sync"
uv sync --quiet
step "ruff check"
uv run ruff check .
step "ruff format --check"
uv run ruff format --check .
step "ty check"
uv run ty check
if command -v npx >/dev/null 2>&1; then  # buildifier comes from npm
  step "buildifier --check"
  tools/buildifier.sh --check
fi
step "pytest"
uv run pytest -q "$@"
step "done"
