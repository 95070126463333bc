#!/usr/bin/env bash
# Checks entangle-jax's host-callback ordering on a TPU machine that has JAX
# (with libtpu) and Python 3.11 but no package index, from a wheel built
# elsewhere (pip wheel . --no-deps -w DIR, on x86_64 Linux with Python 3.11).
# Usage: tools/tpu_check.sh WHEEL_DIR OUT_DIR
#
# WHEEL_DIR holds entangle_jax-*.whl and tpu_check.py (this folder's); what
# it measures: see tpu_check.py. Then, without the chip: the dump command on
# the modules it dumped; with the chip, one pytest at a time: the plugin on a
# racy test (must fail) and on fixed ones (must pass). Writes OUT_DIR/
# tpu_check.log, tpu_check.json, command.txt, command.json.gz, plugin.txt and
# dump.tar.gz (the dumped modules, TPU and CPU). Only one process may hold
# the chip at a time: everything here runs in turn.
set -uo pipefail
wheels=$(realpath "${1:?usage: tools/tpu_check.sh WHEEL_DIR OUT_DIR}")
out=$(realpath -m "${2:?usage: tools/tpu_check.sh WHEEL_DIR OUT_DIR}")
mkdir -p "$out"
export PYTHONUNBUFFERED=1
site=/tmp/entangle-site

run() {
  python3 -c 'import platform, sys; print("python", sys.version.split()[0], "libc", platform.libc_ver())'
  python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
  python3 -m pip show libtpu 2>/dev/null | head -n 2 || true
  rm -rf "$site"
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index \
    --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/entangle_jax-*.whl || return 1
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$site
  cd "$out" || return 1
  python3 -c 'import entangle_jax; print("entangle_jax", entangle_jax.__version__, "from", entangle_jax.__file__)'

  echo "== measure (holds the chip)"
  timeout 400 python3 "$wheels/tpu_check.py" measure "$out"
  echo "measure exit $?"

  echo "== the dump command (text only, no chip)"
  JAX_PLATFORMS=cpu python3 -m entangle_jax.testing "$out/dump" > "$out/command.txt" 2>&1
  echo "command exit $?"
  tail -n 3 "$out/command.txt"
  JAX_PLATFORMS=cpu python3 -m entangle_jax.testing --json "$out/dump" > "$out/command.json" 2>/dev/null
  echo "command --json exit $?"
  python3 - "$out/command.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
for m in run.get("modules", []):
  print(m.get("platform"), m.get("runtime"), m.get("pairs", len(m.get("races", []) or [])), m.get("path", "").rsplit("/", 1)[-1])
EOF

  echo "== the pytest plugin (one pytest at a time)"
  local project=$out/plugin_project
  rm -rf "$project"
  mkdir -p "$project"
  cat > "$project/hazards.py" <<'EOF'
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import io_callback
from entangle_jax import entangle

SLOT = [0.0]
I32 = jax.ShapeDtypeStruct((), jnp.int32)
F32 = jax.ShapeDtypeStruct((), jnp.float32)


def write(v):
  SLOT[0] = float(v)
  return np.int32(0)


def read(t):
  return np.float32(SLOT[0])


def hazard(fix):
  o = fix == "ordered"

  def f(x):
    t = io_callback(write, I32, x + 1.0, ordered=o)
    r = io_callback(read, F32, t, ordered=o)
    t2 = entangle(t, r) if fix == "entangle" else t
    io_callback(write, I32, (x + 2.0) + t2.astype(jnp.float32) * 0, ordered=o)
    return r

  return jax.jit(f)
EOF
  cat > "$project/test_racy.py" <<'EOF'
import jax.numpy as jnp
from hazards import hazard

def test_racy():
  hazard("none")(jnp.float32(0))
EOF
  cat > "$project/test_fixed.py" <<'EOF'
import jax.numpy as jnp
from hazards import hazard

def test_entangled():
  hazard("entangle")(jnp.float32(0))

def test_ordered():
  hazard("ordered")(jnp.float32(0))
EOF
  : > "$out/plugin.txt"
  for test in test_racy.py test_fixed.py; do
    (cd "$project" && timeout 150 python3 -m pytest -q -p no:cacheprovider \
      --entangle-races=fail "$test") >> "$out/plugin.txt" 2>&1
    echo "plugin $test exit $?" | tee -a "$out/plugin.txt"
  done
  grep -E "passed|failed|error|race" "$out/plugin.txt" | head -n 20

  gzip -f "$out/command.json"
  tar -czf "$out/dump.tar.gz" -C "$out" dump
  rm -rf "$out/dump" "$project"
}

run 2>&1 | tee "$out/tpu_check.log"
