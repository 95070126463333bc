"""The "timing" part: per-call cost in a scan and in ``jit(vmap)`` programs."""

from __future__ import annotations

import argparse
import statistics

from benchmarks import programs
from benchmarks.timing import call_seconds, chained_seconds


def _record(result: dict, name: str, times: list[float]) -> None:
  # The fastest call is the one least disturbed by other load on a shared
  # machine; the median is kept too, for readers who prefer it.
  result[f"{name}_s"] = min(times)
  result[f"{name}_median_s"] = statistics.median(times)


def measure(args: argparse.Namespace) -> dict:
  """Fastest and median of repeated calls of each program, in seconds."""
  entangle = programs.entangle_fn(args.impl)
  resource = programs.example_resource(args.native)
  quick = args.quick
  result = {}
  for name, (leaves, witnesses) in {"1x1": (1, 1), "3x4": (3, 4)}.items():
    fn, fn_args = programs.scan_program(entangle, leaves, witnesses)
    _record(
      result, f"scan_{name}", call_seconds(fn, fn_args, 5 if quick else 9)
    )
  for batch, repeats in ((1_000, 21 if quick else 51), (100_000, 21)):
    fn, fn_args = programs.resource_program(entangle, resource, batch)
    _record(result, f"resource_{batch:.0e}", call_seconds(fn, fn_args, repeats))
  fn, payload, witness = programs.donated_program(entangle, 100_000)
  times = chained_seconds(
    lambda p: fn(p, witness), payload, 11 if quick else 21
  )
  _record(result, "donated_1e+05", times)
  return result
