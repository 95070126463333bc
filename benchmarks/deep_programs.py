"""How long the race check takes on programs that nest deeply or carry a
lot: the shapes of tests/analysis/deep_programs_test.py, each racy and
ordered (``python -m benchmarks.deep_programs [--rounds 3]``; not part of
``python -m benchmarks``).

* ``switch``: a loop whose body takes one of 200 branches
  (``lax.switch``), a native call in every branch;
* ``carry``: a loop whose state is 2,000 leaves, 20 of them slot tokens
  that a read and a write of each step use;
* ``nested``: 42 loops nested in each other (``fori_loop``, ``scan`` and
  ``cond`` in turn), a write at every level.

Each program is lowered and compiled once; a round times ``races`` as a
``Lowered`` gets it: the compiled module and the module before
optimization, the program, compared (the analysis alone: parsing both
texts, finding each call's object, ordering the calls), and the median
and the slowest of the rounds are printed per shape and variant, with
the races found. The
goal is each under 1 s of analysis. Timings are figures to read, never
assertions.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from entangle_jax import testing
from entangle_jax.testing._analysis import order_analysis
from entangle_jax.testing._hlo import attributes

BRANCHES = 200
LEAVES = 2000
TOKENS = 20  # Of the carry's leaves, the slot tokens (slots 0 to 19).
LEVELS = 42


def switch_program(racy: bool, branches: int = BRANCHES) -> tuple:
  """A loop of 3 steps over a `branches`-way ``lax.switch``: branch k
  writes the slot (the even ones after reading it) with a value that
  depends on what the step before read, and the step then reads the
  write's token. Racy: the step also reads the slot's token as the step
  began, which nothing orders before the branch's write."""

  def branch(k: int) -> Callable:
    def write(token, seen):
      if k % 2:
        return testing.write_slot(token, seen + k)
      return testing.write_slot(token, testing.read_slot(token) + seen + k)

    return write

  def f(index, slot):
    def step(_, carry):
      token, seen = carry
      written = lax.switch(
        index, [branch(k) for k in range(branches)], token, seen
      )
      seen = seen + testing.read_slot(written)
      if racy:
        seen = seen + testing.read_slot(token)
      return written, seen

    return lax.fori_loop(0, 3, step, (slot, jnp.float32(0)))

  return f, (jnp.int32(0), jnp.int32(3))


def carry_program(
  racy: bool, leaves: int = LEAVES, tokens: int = TOKENS
) -> tuple:
  """A loop of 3 steps whose state is `leaves` leaves: `tokens` of them
  (spread evenly, the last leaf among them) the tokens of slots 0, 1...,
  the others floats. Each step reads each slot, then writes it with a
  value that depends on the read; every float leaf adds a read. Racy: the
  write's value does not depend on the read, so nothing orders them."""
  every = leaves // tokens
  token_at = {every * (t + 1) - 1: t for t in range(tokens)}

  def f(start):
    def step(j, state):
      state = list(state)
      seen = []
      for at in token_at:
        read = testing.read_slot(state[at])
        value = j + 0.5 if racy else read + 1.0
        state[at] = testing.write_slot(state[at], value)
        seen.append(read)
      for k in range(leaves):
        if k not in token_at:
          state[k] = state[k] + seen[k % tokens]
      return tuple(state)

    state = tuple(
      jnp.int32(token_at[k]) if k in token_at else start + k
      for k in range(leaves)
    )
    return lax.fori_loop(0, 3, step, state)

  return f, (jnp.float32(1.0),)


def nested_program(racy: bool, levels: int = LEVELS) -> tuple:
  """`levels` control-flow constructs nested in each other, a
  ``fori_loop``, a ``scan`` and a ``cond`` in turn, each writing the
  slot's token it was given before it enters the next; after them all,
  a read of the last token. Racy: the read is of the slot as the program
  got it, which nothing orders after the writes."""

  def level(depth: int, token):
    def inner(token, j):
      token = testing.write_slot(token, j + depth)
      if depth + 1 < levels:
        token = level(depth + 1, token)
      return token

    kind = depth % 3
    if kind == 0:
      return lax.fori_loop(0, 2, lambda j, t: inner(t, j), token)
    if kind == 1:
      return lax.scan(lambda t, j: (inner(t, j), None), token, jnp.arange(2.0))[
        0
      ]
    taken = testing.read_slot(token) > 0
    return lax.cond(taken, lambda t: inner(t, 1.0), lambda t: t, token)

  def f(slot):
    token = level(0, slot)
    return testing.read_slot(slot if racy else token)

  return f, (jnp.int32(3),)


SHAPES: dict[str, Callable[[bool], tuple]] = {
  "switch": switch_program,
  "carry": carry_program,
  "nested": nested_program,
}


def compiled(shape: str, racy: bool) -> tuple[str, str]:
  """The optimized module of `shape`, racy or ordered, and its module
  before optimization, as texts."""
  f, args = SHAPES[shape](racy)
  lowered = jax.jit(f).lower(*args)
  before = lowered.as_text(dialect="hlo", debug_info=True)
  return testing.module_text(lowered.compile()), before


def measure(rounds: int, log: Callable[[str], None]) -> list[dict]:
  """For each shape and variant: seconds to compile, the median seconds
  of `rounds` runs of ``testing.races``, and the races it found."""
  rows = []
  for shape in SHAPES:
    for racy in (False, True):
      variant = "racy" if racy else "ordered"
      log(f"{shape} {variant}: compiling")
      start = time.perf_counter()
      program, before = compiled(shape, racy)
      compile_s = time.perf_counter() - start
      times = []
      found = []
      for _ in range(rounds):
        # Every round parses the text anew: races() keeps the last two
        # modules parsed, and the fields of each attribute text read,
        # which would time a round but the first without its parse.
        order_analysis._parsed.cache_clear()
        attributes._text_fields.cache_clear()
        start = time.perf_counter()
        analysis = testing.OrderAnalysis(program, before_optimization=before)
        found = analysis.races()
        times.append(time.perf_counter() - start)
      rows.append(
        {
          "shape": shape,
          "variant": variant,
          "compile_s": compile_s,
          "analysis_s": statistics.median(times),
          "analysis_max_s": max(times),
          "races": len(found),
        }
      )
  return rows


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog="python -m benchmarks.deep_programs",
    description=__doc__.splitlines()[0],
  )
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args(argv)
  begun = time.monotonic()

  def log(message: str) -> None:
    elapsed = time.monotonic() - begun
    print(f"[{elapsed:6.0f} s] {message}", file=sys.stderr, flush=True)

  rows = measure(args.rounds, log)
  print(
    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
    f"{platform.machine()}, {os.cpu_count()} cores; jax {jax.__version__}, "
    f"Python {platform.python_version()}; {args.rounds} rounds; load "
    f"average {'/'.join(f'{x:.1f}' for x in os.getloadavg())}."
  )
  print()
  print(
    "| shape | variant | races | analysis, s (median) | analysis, s (max) "
    "| compile, s |"
  )
  print("|---|---|---|---|---|---|")
  for row in rows:
    print(
      f"| {row['shape']} | {row['variant']} | {row['races']} | "
      f"{row['analysis_s']:.3f} | {row['analysis_max_s']:.3f} | "
      f"{row['compile_s']:.1f} |"
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
