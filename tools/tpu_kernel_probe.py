#!/usr/bin/env python3
"""What entangle's Pallas TPU kernel gives back, on a TPU machine.

Usage (the wheel installed, as tools/tpu_check.sh does):
``python3 tools/tpu_kernel_probe.py [DTYPE ...]`` runs every case (or
those of the dtypes named) in a child process
that it restarts after a crash (a compiler crash ends the process), and
prints one JSON line a case: ``ok``, ``WRONG n/10`` or the error.

Cases: a payload of 1, 2 or 1024 elements, made three ways (a parameter,
computed, returned by a host callback), through the kernel directly
(``tpu_kernel.call``: 1-element payloads go in padded; as vectors, or as
rows), and each dtype of a list through ``entangle`` for seven shapes
(scalar to 2-D), a parameter and a computed value, compared bit for bit
(the 64-bit types with ``jax_enable_x64``) (docs/platforms.md, "TPU",
has what a v5e gave). Standalone apart from entangle_jax.
"""

from __future__ import annotations

import json
import subprocess
import sys

DTYPES = [
  *("float32", "bfloat16", "float16", "bool", "int8", "uint8", "int16"),
  *("uint16", "int32", "uint32", "int4", "uint4", "float8_e4m3fn"),
  *("float8_e5m2", "float4_e2m1fn", "complex64"),
]
# 64-bit types exist only with jax_enable_x64 (a case of its own sets it).
X64_DTYPES = ("float64", "int64", "uint64", "complex128")
# Last: an int2 error left later cases of its process wrong on a v5e (every
# dtype came back right in a process that had run none).
TWO_BIT_DTYPES = ("int2", "uint2")
SHAPES = ((), (1,), (2,), (3,), (1024,), (2, 3, 5), (8, 128))
MADE = ("param", "computed", "callback")


def cases(only: list[str] | None = None) -> list[tuple]:
  """Every case, or (`only`: dtype names) those dtypes' cases."""
  if only:
    return [c for c in cases() if c[0] == "dtype" and c[1] in only]
  out: list[tuple] = []
  for rows in (False, True):
    for made in MADE:
      for payload_shape in ((), (1,), (2,), (1024,)):
        out.append(("kernel", rows, made, payload_shape))
  for dtype in DTYPES:
    for shape in SHAPES:
      out.append(("dtype", dtype, shape))
  for dtype in X64_DTYPES:
    for shape in ((), (3,), (8, 128)):
      out.append(("dtype", dtype, shape))
  for dtype in TWO_BIT_DTYPES:
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
    jax.config.update("jax_enable_x64", name in X64_DTYPES)
    dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
    x = ((np.arange(int(np.prod(shape))) + 1) % 3).reshape(shape).astype(dtype)
    if dtype.kind == "c":
      x = x + 1j * x[::-1] if shape else x + 2j
    w = jnp.ones((4,), jnp.float32)

    def both(tie):
      # A parameter, and a value computed in the same dtype (a bool times
      # 1 would be int32).
      return [
        np.asarray(jax.jit(lambda a, b: tie(a, b))(jnp.asarray(x), w)),
        np.asarray(
          jax.jit(lambda a, b: tie(jnp.flip(jnp.flip(a)), b))(jnp.asarray(x), w)
        ),
      ]

    def same(got):
      # Bit for bit: the same dtype, shape and bytes.
      return all(
        y.dtype == x.dtype and y.shape == x.shape and y.tobytes() == x.tobytes()
        for y in got
      )

    if same(both(entangle)):
      return "ok"
    # The control: the same programs with no entangle. Where they are wrong
    # too, the TPU does not keep this dtype's values at all.
    plain = same(both(lambda a, b: a))
    return "WRONG" if plain else "WRONG, and so is the plain program"
  _, rows, made, shape = case
  spec = jax.ShapeDtypeStruct(shape, jnp.float32)

  def payload(a):
    if made == "param":
      return a
    if made == "computed":
      return a * 2
    return io_callback(lambda t: np.asarray(t, np.float32), spec, a)

  fn = jax.jit(
    lambda a, w: tpu_kernel.call(payload(a), w, num_payload=1, two_d=rows)[0]
  )
  wrong = 0
  for v in range(10):
    a = jnp.full(shape, v + 0.5, jnp.float32)
    want = np.asarray(a * 2 if made == "computed" else a)
    wrong += not np.array_equal(np.asarray(fn(a, jnp.float32(v))), want)
  return "ok" if not wrong else f"WRONG {wrong}/10"


def child(start: int, only: list[str]) -> None:
  for i, case in enumerate(cases(only)[start:], start):
    print(json.dumps({"start": i}), flush=True)
    try:
      result = run_case(case)
    except Exception as e:  # A case's failure is a finding.
      result = f"{type(e).__name__}: {e}"[:200]
    print(json.dumps({"case": repr(case), "result": result}), flush=True)


def main() -> int:
  if len(sys.argv) > 2 and sys.argv[1] == "--child":
    child(int(sys.argv[2]), sys.argv[3:])
    return 0
  start, total = 0, len(cases(sys.argv[1:]))
  while start < total:
    proc = subprocess.run(
      [sys.executable, __file__, "--child", str(start), *sys.argv[1:]],
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
    crashed = repr(cases(sys.argv[1:])[last])
    print(
      json.dumps({"case": crashed, "result": f"crashed ({proc.returncode})"})
    )
    start = last + 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
