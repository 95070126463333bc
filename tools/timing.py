"""Timing helper shared by the benchmark and the GPU check."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, args, repeats: int) -> float:
  """Median wall time of ``fn(*args)`` after one warm-up call (compiles)."""
  import jax

  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)
