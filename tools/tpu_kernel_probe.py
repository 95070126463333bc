#!/usr/bin/env python3
"""What entangle's Pallas TPU kernel gives back, on a TPU machine.

Usage (the wheel installed, as tools/tpu_check.sh does):
``python3 tools/tpu_kernel_probe.py`` runs every case in a child process
that it restarts after a crash (a compiler crash ends the process), and
prints one JSON line a case: ``ok``, ``WRONG n/10`` or the error.

Cases: a scalar or vector payload, made three ways (a parameter, computed,
returned by a host callback), through ``tpu_kernel`` directly (as
``(1,)``, or as rows), and each dtype of a list through ``entangle`` for
four shapes, a parameter and a computed value (docs/platforms.md, "TPU",
has what a v5e gave). Standalone apart from entangle_jax.
"""

from __future__ import annotations

import json
import subprocess
import sys

DTYPES = [
  *("float32", "bfloat16", "float16", "bool", "int8", "uint8", "int16"),
  *("uint16", "int32", "uint32", "int4", "uint4", "int2", "float8_e4m3fn"),
  *("float8_e5m2", "float4_e2m1fn"),
]
SHAPES = ((3,), (1024,), (2, 3, 5), (8, 128))
MADE = ("param", "computed", "callback")


def cases() -> list[tuple]:
  out: list[tuple] = []
  for rows in (False, True):
    for made in MADE:
      for payload_shape in ((), (1024,)):
        out.append(("kernel", rows, made, payload_shape))
  for dtype in DTYPES:
    for shape in SHAPES:
      out.append(("dtype", dtype, shape))
  return out


def run_case(case: tuple) -> str:
  import jax
  import jax.numpy as jnp
  import ml_dtypes
  import numpy as np
  from jax.experimental import io_callback

  from entangle_jax import entangle
  from entangle_jax._src import tpu_kernel

  if case[0] == "dtype":
    _, name, shape = case
    dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
    x = ((np.arange(int(np.prod(shape))) + 1) % 3).reshape(shape).astype(dtype)
    w = jnp.ones((4,), jnp.float32)
    got = [
      np.asarray(jax.jit(lambda a, b: entangle(a, b))(jnp.asarray(x), w)),
      # Computed, in the same dtype (a bool times 1 would be int32).
      np.asarray(
        jax.jit(lambda a, b: entangle(jnp.flip(jnp.flip(a)), b))(
          jnp.asarray(x), w
        )
      ),
    ]
    same = all(
      y.dtype == x.dtype
      and np.array_equal(y.astype(np.float32), x.astype(np.float32))
      for y in got
    )
    return "ok" if same else "WRONG"
  _, rows, made, shape = case
  spec = jax.ShapeDtypeStruct(shape, jnp.float32)

  def payload(a):
    if made == "param":
      return a
    if made == "computed":
      return a * 2
    return io_callback(lambda t: np.asarray(t, np.float32), spec, a)

  fn = jax.jit(
    lambda a, w: tpu_kernel.call(payload(a), w, num_payload=1, two_d=rows)[
      0
    ]
  )
  wrong = 0
  for v in range(10):
    a = jnp.full(shape, v + 0.5, jnp.float32)
    want = np.asarray(a * 2 if made == "computed" else a)
    wrong += not np.array_equal(np.asarray(fn(a, jnp.float32(v))), want)
  return "ok" if not wrong else f"WRONG {wrong}/10"


def child(start: int) -> None:
  for i, case in enumerate(cases()[start:], start):
    print(json.dumps({"start": i}), flush=True)
    try:
      result = run_case(case)
    except Exception as e:  # A case's failure is a finding.
      result = f"{type(e).__name__}: {e}"[:200]
    print(json.dumps({"case": repr(case), "result": result}), flush=True)


def main() -> int:
  if len(sys.argv) > 2 and sys.argv[1] == "--child":
    child(int(sys.argv[2]))
    return 0
  start, total = 0, len(cases())
  while start < total:
    proc = subprocess.run(
      [sys.executable, __file__, "--child", str(start)],
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
    )
    last = start
    for line in proc.stdout.splitlines():
      record = json.loads(line)
      if "start" in record:
        last = record["start"]
      else:
        print(line, flush=True)
    if proc.returncode == 0:
      break
    crashed = repr(cases()[last])
    print(
      json.dumps({"case": crashed, "result": f"crashed ({proc.returncode})"})
    )
    start = last + 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
