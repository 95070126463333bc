"""The "compile" part: trace + lower + compile time against leaf counts."""

from __future__ import annotations

import argparse

import jax.numpy as jnp

from benchmarks import programs
from benchmarks.cases import COMPILE_SIZES, QUICK_COMPILE_SIZES
from benchmarks.timing import compile_seconds


def _leaves(n: int) -> list:
  return [jnp.zeros((), jnp.float32) for _ in range(n)]


def measure(args: argparse.Namespace) -> dict:
  """Seconds to trace, lower and compile one entangle of n leaves."""
  entangle = programs.entangle_fn(args.impl)
  compile_seconds(lambda p, w: entangle(p, w), (_leaves(1), _leaves(1)))
  sizes = QUICK_COMPILE_SIZES if args.quick else COMPILE_SIZES
  result: dict[str, dict[str, float]] = {"payload": {}, "witness": {}}
  for n in sizes:
    for axis, (payload, witnesses) in {
      "payload": (_leaves(n), _leaves(1)),
      "witness": (_leaves(1), _leaves(n)),
    }.items():
      # A fresh function object each time: no trace or compile cache hits.
      fn = lambda p, w: entangle(p, *w)  # noqa: E731
      result[axis][str(n)] = compile_seconds(fn, (payload, witnesses))
  return {"compile_s": result}
