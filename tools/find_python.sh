#!/usr/bin/env bash
# Prints the real path of a Python VERSION (e.g. 3.13) interpreter, or fails
# saying where it looked. uv cannot download interpreters on CI machines, so
# CI takes them from where such a machine has them: a `pythonVERSION` on PATH
# that runs (a pyenv shim of a version that is not selected does not), else
# pyenv's versions folder (`pyenv root`, else $PYENV_ROOT, else ~/.pyenv),
# newest patch release first.
#   tools/find_python.sh 3.13
set -euo pipefail
version=${1:?usage: tools/find_python.sh VERSION (e.g. 3.13)}
if [[ ! $version =~ ^3\.[0-9]+$ ]]; then
  echo "tools/find_python.sh: VERSION is major.minor, e.g. 3.13; got '$version'" >&2
  exit 2
fi
probe="import os, sys; v = '%d.%d' % sys.version_info[:2]; print(os.path.realpath(sys.executable) if v == '$version' else '')"
if found=$("python$version" -c "$probe" 2>/dev/null) && [[ -n $found ]]; then
  echo "$found"
  exit 0
fi
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for candidate in $(ls -d "$root/versions/$version".*/bin/"python$version" 2>/dev/null | sort -rV); do
  if found=$("$candidate" -c "$probe" 2>/dev/null) && [[ -n $found ]]; then
    echo "$found"
    exit 0
  fi
done
echo "No Python $version: no working python$version on PATH, and none in" \
  "$root/versions/$version.*. Install one (e.g. \`pyenv install $version\`)" \
  "or put python$version on PATH." >&2
exit 1
