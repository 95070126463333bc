"""The "analysis" part: entangle_jax.testing's order analysis of a compiled
module, against the time XLA took to compile that module.

The program is ``n`` ``Resource`` writes, each followed by a read of the
example resource (``2n`` native calls, about 2.5 instructions a call). For
each size: XLA's compile time (``Lowered.compile()``, the lowering not
counted), then, on the compiled module, the time to parse it
(``OrderAnalysis(compiled)``), ``races()`` and ``order_graph(compiled)``
(DOT), each as a user calls them.
"""

from __future__ import annotations

import argparse
import re
import time

import jax
import jax.numpy as jnp

from benchmarks.cases import ANALYSIS_PAIRS, QUICK_ANALYSIS_PAIRS
from entangle_jax import Resource
from entangle_jax.testing import (
  OrderAnalysis,
  order_graph,
  read_slot,
  write_slot,
)

_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%\S+ = ", re.MULTILINE)


def writes_then_reads(pairs: int):
  """``pairs`` Resource writes, each followed by a read."""

  def program(slot):
    res = Resource(slot)
    reads = []
    for i in range(pairs):
      res.write(write_slot, float(i))
      reads.append(res.read(read_slot))
    return res.token, jnp.stack(reads)

  return program


def _seconds(fn):
  start = time.perf_counter()
  result = fn()
  return result, time.perf_counter() - start


def measure(args: argparse.Namespace) -> dict:
  """Per number of native calls: instructions and seconds of each step."""
  result = {}
  for pairs in QUICK_ANALYSIS_PAIRS if args.quick else ANALYSIS_PAIRS:
    lowered = jax.jit(writes_then_reads(pairs)).lower(jnp.int32(0))
    compiled, compile_s = _seconds(lowered.compile)
    analysis, parse_s = _seconds(lambda c=compiled: OrderAnalysis(c))
    races, races_s = _seconds(analysis.races)
    _, graph_s = _seconds(lambda c=compiled: order_graph(c))
    if races:
      raise AssertionError(f"the benchmark program has races: {races[:3]}")
    result[str(2 * pairs)] = {
      "instructions": len(_INSTRUCTION.findall(compiled.as_text())),
      "compile": compile_s,
      "parse": parse_s,
      "races": races_s,
      "graph": graph_s,
    }
  return {"analysis_s": result}
