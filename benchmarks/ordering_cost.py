"""What each ordering costs a call: the hazard as the step of a long scan.

A scan of `STEPS` steps, each one hazard (write, read, the ordering, write)
with no delay, the second write's token carried to the next step, and the
reads summed so that none is dropped. One step's time is the program's
time over its steps; each ordering's is compared with the no-ordering
program's, as a ratio taken in the same round.

Rounds alternate between the programs (each round times every program
once, as the median of a few calls), so that a shared machine's slow
spells fall on all of them alike, and the ratio is the median over rounds.
A second copy of the no-ordering program, timed as one more ordering, says
how far apart two identical programs came in the same run: the noise any
ratio has to clear (`benchmarks.stats.relative_noise`).

An ordering whose calls are Python callbacks runs `CALLBACK_SHARE` of the
steps: its step costs hundreds of times more, and the time per step is
what is compared, so its calls need not take minutes.
"""

from __future__ import annotations

import dataclasses
import statistics

import jax
import jax.numpy as jnp

from benchmarks import stats, timing
from benchmarks.orderings import Hazard, Ordering

STEPS = 10_000
QUICK_STEPS = 1000
CALLBACK_SHARE = 1 / 50
ROUNDS = 7
QUICK_ROUNDS = 5
REPEATS = 5
"""Calls per program and round; the round keeps their median."""


@dataclasses.dataclass(frozen=True)
class Cost:
  """One ordering's time per step, against the no-ordering program's."""

  ns_per_step: float
  """Median over rounds."""
  ratio: float
  """Median over rounds of the time over the no-ordering program's."""
  low: float
  high: float
  """The lowest and highest per-round ratio."""


@dataclasses.dataclass(frozen=True)
class Costs:
  by_key: dict[str, Cost]
  noise: float
  """Two copies of the no-ordering program came within this fraction of
  each other (the far end of the 95% bootstrap interval of the median
  per-round ratio, less 1)."""
  steps: int
  rounds: int


def hazard_scan(hazard: Hazard, steps: int):
  """``program(slot)``, not jitted: `steps` hazards in a scan, each
  step's second write's token the next step's slot, the reads summed."""

  def step(carry, _):
    token, total = carry
    x, token = hazard(token, 0)
    return (token, total + x), None

  def program(slot):
    carry = (slot, jnp.float32(0.0))
    return jax.lax.scan(step, carry, None, length=steps)[0]

  return program


def scan_program(ordering: Ordering, steps: int):
  """``(jitted program, args)``: `steps` hazards in a scan."""
  return jax.jit(hazard_scan(ordering.hazard, steps)), (jnp.int32(0),)


def steps_of(ordering: Ordering, steps: int) -> int:
  """How many steps `ordering`'s scan runs."""
  if ordering.python_calls:
    return max(1, round(steps * CALLBACK_SHARE))
  return steps


def measure(
  orderings: list[Ordering], baseline: Ordering, steps: int, rounds: int
) -> Costs:
  """Times every ordering's scan and `baseline`'s twice, in `rounds`.

  `rounds` must be 2 or more (the noise needs a spread).
  """
  programs = {o.key: scan_program(o, steps_of(o, steps)) for o in orderings}
  again = scan_program(baseline, steps)  # a second, separately jitted copy
  times: dict[str, list[float]] = {key: [] for key in programs}
  again_times: list[float] = []
  for _ in range(rounds):
    for key, (fn, args) in programs.items():
      times[key].append(timing.median_seconds(fn, args, REPEATS))
    again_times.append(timing.median_seconds(*again, REPEATS))
  base = times[baseline.key]
  by_key = {}
  for ordering in orderings:
    per_step = [t / steps_of(ordering, steps) for t in times[ordering.key]]
    ratios = stats.ratios(per_step, [t / steps for t in base])
    by_key[ordering.key] = Cost(
      ns_per_step=statistics.median(per_step) * 1e9,
      ratio=statistics.median(ratios),
      low=min(ratios),
      high=max(ratios),
    )
  noise = stats.relative_noise(again_times, base)
  return Costs(by_key, noise, steps, rounds)
