"""Runs each ordering's hazards and asks the compiled module about them.

Two programs per ordering, because XLA:CPU runs a small module in
schedule order and only a large one concurrently (docs/proving_order.md,
"The example resource"): a computation of at most 8 thunks, or one whose
buffers are all at most 512 bytes, runs its thunks one after another as
scheduled.

* The wide program holds `HAZARDS` independent hazards, each on its own
  slot, and one array of `BIG` float32 (4000 bytes): more than 8 calls are
  ready at once, so XLA:CPU hands some to another thread, and a second
  write that nothing orders after its read may run while the slow read
  waits. Its wrong reads show what each ordering does at run time.
* The small program holds one hazard and nothing large: it runs in
  schedule order, so its wrong reads show only what the schedule happened
  to be. Zero there proves nothing.

Every run waits for its results before the next starts, so that wrong
reads come from the order inside one run, never from two runs overlapping.
For each program, `happens_before` says whether the compiled module orders
each hazard's read before its second write, and `races` how many pairs of
conflicting calls nothing orders.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.orderings import EXPECTED, Ordering
from entangle_jax import testing

HAZARDS = 12
"""Hazards in the wide program: more than XLA:CPU's 8 ready at once."""
BIG = 1000
"""Elements of the wide program's large array: 4000 bytes, over 512."""
DELAY_US = 2000
"""How long each read waits before it reads (the store's ``delay_us``)."""


@dataclasses.dataclass(frozen=True)
class Runs:
  """What one program did and what its compiled module says."""

  wrong: int
  """Reads that did not see 1.0, over all runs and hazards."""
  reads: int
  ordered: bool
  """Whether every hazard's read happens before its second write."""
  races: int
  """How many races ``entangle_jax.testing.races`` reports."""
  seconds: float
  """The median time of one run: with slow reads, it shows how many of
  them an ordering lets overlap."""


def wide_program(ordering: Ordering, delay_us: int):
  """`HAZARDS` hazards on slots ``0 .. HAZARDS - 1``, and a large array."""

  def program(big):
    reads = []
    for slot in range(HAZARDS):
      with jax.named_scope(f"hazard{slot}"):
        reads.append(ordering.hazard(slot, delay_us)[0])
    return jnp.stack(reads), jnp.sum(jnp.sin(big))

  return program, (jnp.ones(BIG, jnp.float32),)


def small_program(ordering: Ordering, delay_us: int):
  """One hazard on slot 0, nothing large."""

  def program():
    with jax.named_scope("hazard0"):
      return ordering.hazard(0, delay_us)[0][None], None

  return program, ()


def measure(program, args, hazards: int, runs: int) -> Runs:
  """Compiles ``program``, runs it `runs` times and asks its module."""
  compiled = jax.jit(program).lower(*args).compile()
  wrong = 0
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    reads = np.asarray(jax.block_until_ready(compiled(*args))[0])
    times.append(time.perf_counter() - start)
    wrong += int(np.sum(reads != EXPECTED))
  ordered = all(
    testing.happens_before(
      compiled, f"hazard{slot}/read", f"hazard{slot}/second_write"
    )
    for slot in range(hazards)
  )
  races = len(testing.races(compiled))
  return Runs(wrong, runs * hazards, ordered, races, statistics.median(times))


def wide(ordering: Ordering, runs: int, delay_us: int = DELAY_US) -> Runs:
  return measure(*wide_program(ordering, delay_us), HAZARDS, runs)


def small(ordering: Ordering, runs: int, delay_us: int = DELAY_US) -> Runs:
  return measure(*small_program(ordering, delay_us), 1, runs)
