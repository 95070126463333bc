"""Wall-clock timing of JAX calls, shared by the benchmark and the GPU check."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax


def call_seconds(fn, args, repeats: int) -> list[float]:
  """Wall times of ``repeats`` calls ``fn(*args)``, after one warm-up call.

  The warm-up compiles; each timed call waits for its results.
  """
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return times


def median_seconds(fn, args, repeats: int) -> float:
  """Median wall time of ``fn(*args)`` after one warm-up call (compiles)."""
  return statistics.median(call_seconds(fn, args, repeats))


def chained_seconds(
  fn: Callable[[Any], Any], state: Any, repeats: int
) -> list[float]:
  """Wall times of ``state = fn(state)``, ``repeats`` times after a warm-up.

  For functions that donate their input: each call consumes the previous
  call's output, so no call pays for a fresh input buffer.
  """
  state = jax.block_until_ready(fn(state))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state = jax.block_until_ready(fn(state))
    times.append(time.perf_counter() - start)
  return times


def compile_seconds(fn, args) -> float:
  """Wall time to trace, lower and compile ``jax.jit(fn)`` for ``args``.

  ``fn`` must be a fresh function object, so that no cache of an earlier
  trace or compilation answers.
  """
  start = time.perf_counter()
  jax.jit(fn).lower(*args).compile()
  return time.perf_counter() - start
