"""A generated corpus of small programs on one native slot, each run against
its value in program order, and the race check's answer on each
(``python -m benchmarks.order_corpus [--size 300] [--seed 0]``; the test
``tests/analysis/order_corpus_test.py`` runs a small one).

Each program is a few steps on the example store's slot, drawn from a
seed: writes (side-effecting, or not and then perhaps with their result
unused), reads of the slot or of the latest token (directly or through a
``jax.jit`` helper called at one or two places), loops of 1 to 3 trips
and conds holding such steps, identical reads, and waits through an
``optimization_barrier`` or a ``jnp.where`` on a constant. Half the
programs are *threaded*: every call consumes the result of the call before
it (through ``entangle``), so every pair is ordered by data on every path;
the others are *loose*.

Each program's value in program order is its value under
``jax.disable_jit()``, which runs every call as the program makes it; the
jitted program runs `RUNS` times against it. The counts:

* ``proved_wrong``: the check reports no pair, and a run differs from the
  program-order value. Soundness asks for 0. Counted apart: programs
  whose write without side effect has its result unused, which JAX drops
  before lowering (no module holds it, so the check cannot see it;
  ``in_program_order`` warns of it).
* ``false_reports``: a threaded program that the check reports.
* ``reported_wrong``, ``reported_right``, ``proved_right``: the rest (a
  reported program may run right on this XLA: a race is what may happen).

And the time: the check's analysis (both modules parsed and compared, the
texts at hand) against XLA's compile of the same programs, as a ratio.
Figures to read, never assertions (the test asserts the counts only).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from entangle_jax import entangle
from entangle_jax.testing import (
  example_store,
  races,
  read_slot,
  reset_slots,
  write_slot,
)
from entangle_jax.testing._analysis.order_analysis import OrderAnalysis
from entangle_jax.testing._hlo.module_text import lowered_hlo_text

RUNS = 3
SLOT = 5


@jax.jit
def query(token):
  """A jitted read: one computation that every place calls."""
  return read_slot(token)


def pure_write(token, value):
  """The store's write without its side-effect flag."""
  return jax.ffi.ffi_call(
    example_store.WRITE_SLOT_TARGET,
    jax.ShapeDtypeStruct(jnp.shape(token), jnp.int32),
  )(token, jnp.asarray(value, jnp.float32))


@dataclasses.dataclass
class _State:
  slot: jax.Array
  token: jax.Array
  total: jax.Array
  outs: list


@dataclasses.dataclass(frozen=True)
class Program:
  """One generated program."""

  seed: int
  threaded: bool
  steps: tuple
  """The steps, as nested tuples (``("read", how, ...)``...)."""
  keep_token: bool = True
  """Whether the program returns its last token (which keeps a threaded
  program's writes that have no side effect)."""

  def __call__(self, slot):
    state = _State(slot, slot, jnp.float32(0), [])
    _run_steps(self.steps, state, self.threaded)
    # The last token too: what keeps a threaded program's writes that
    # have no side effect (a value nothing uses is XLA's to drop).
    kept = (state.token,) if self.keep_token else ()
    return (state.total, *kept, *state.outs)

  @property
  def drops_a_write(self) -> bool:
    """Whether a write without side effect has its result unused: JAX
    drops such a call before lowering, so no module the check reads holds
    it (`in_program_order` warns of it; the check cannot see it)."""
    return not self.threaded and _drops_a_write(self.steps)

  def describe(self) -> str:
    kind = "threaded" if self.threaded else "loose"
    return f"seed {self.seed} ({kind}): {self.steps}"


def _drops_a_write(steps: tuple) -> bool:
  for step in steps:
    if step[0] == "write" and not step[1] and not step[3]:
      return True
    if step[0] in ("loop", "cond") and _drops_a_write(step[2]):
      return True
  return False


def _run_steps(steps: tuple, state: _State, threaded: bool) -> None:
  for step in steps:
    _STEPS[step[0]](step, state, threaded)


def _write(step, state: _State, threaded: bool) -> None:
  _, side_effect, on_token, keep, value = step
  handle = state.token if (threaded or on_token) else state.slot
  write = write_slot if side_effect else pure_write
  result = write(handle, state.total + value)
  if threaded or keep:
    state.token = result


def _read(step, state: _State, threaded: bool) -> None:
  _, helper, on_token, used = step
  handle = state.token if (threaded or on_token) else state.slot
  value = (query if helper else read_slot)(handle)
  if threaded or used:
    state.total = state.total + value
    state.outs.append(value)
  if threaded:
    state.token = entangle(state.token, value)


def _wait(step, state: _State, threaded: bool) -> None:
  _, how = step
  if threaded:
    # A barrier over the token itself: the token stays the order.
    state.token, state.total = lax.optimization_barrier(
      (state.token, state.total)
    )
  elif how == "barrier":
    # The slot made to "wait" for the token: XLA folds the wait away.
    state.slot, _ = lax.optimization_barrier((state.slot, state.token))
  else:
    state.slot = jnp.where(jnp.ones((), bool), state.slot, state.token)


def _loop(step, state: _State, threaded: bool) -> None:
  _, trips, body_steps = step

  def body(i, carry):
    token, total = carry
    inner = _State(state.slot, token, total, [])
    _run_steps(body_steps, inner, threaded)
    return inner.token, inner.total

  state.token, state.total = lax.fori_loop(
    0, trips, body, (state.token, state.total)
  )


def _cond(step, state: _State, threaded: bool) -> None:
  _, constant, branch_steps = step
  # A predicate XLA folds (slot * 0 == 0), or one it cannot (slot >= 0).
  predicate = state.slot * 0 == 0 if constant else state.slot >= 0

  def taken(carry):
    token, total = carry
    inner = _State(state.slot, token, total, [])
    _run_steps(branch_steps, inner, threaded)
    return inner.token, inner.total

  state.token, state.total = lax.cond(
    predicate, taken, lambda carry: carry, (state.token, state.total)
  )


_STEPS: dict[str, Callable] = {
  "write": _write,
  "read": _read,
  "wait": _wait,
  "loop": _loop,
  "cond": _cond,
}


def generate(seed: int) -> Program:
  """The program of `seed`: threaded for even seeds, loose for odd."""
  draw = random.Random(seed)
  threaded = seed % 2 == 0
  return Program(seed, threaded, _draw_steps(draw, depth=0, count=4))


def _draw_steps(draw: random.Random, depth: int, count: int) -> tuple:
  steps = []
  for _ in range(draw.randint(2, count)):
    kinds = ["write", "read", "read", "wait"]
    if depth < 2:
      kinds += ["loop", "cond"]
    kind = draw.choice(kinds)
    if kind == "write":
      steps.append(
        (
          "write",
          draw.random() < 0.6,
          draw.random() < 0.5,
          draw.random() < 0.7,
          float(draw.randint(1, 9)),
        )
      )
    elif kind == "read":
      steps.append(
        (
          "read",
          draw.random() < 0.4,
          draw.random() < 0.5,
          draw.random() < 0.85,
        )
      )
    elif kind == "wait":
      steps.append(("wait", draw.choice(["barrier", "where"])))
    elif kind == "loop":
      inner = _draw_steps(draw, depth + 1, 3)
      steps.append(("loop", draw.randint(1, 3), inner))
    else:
      inner = _draw_steps(draw, depth + 1, 3)
      steps.append(("cond", draw.random() < 0.3, inner))
  return tuple(steps)


def _values(tree) -> tuple:
  return tuple(float(v) for v in jax.tree.leaves(tree))


def program_order_value(program: Program) -> tuple:
  """`program`'s value with every call run as the program makes it."""
  reset_slots()
  with jax.disable_jit():
    return _values(program(jnp.int32(SLOT)))


@dataclasses.dataclass
class Outcome:
  program: Program
  pairs: int
  wrong: bool
  check_seconds: float
  compile_seconds: float


def run_one(program: Program) -> Outcome:
  """Runs `program` `RUNS` times jitted against its program-order value,
  and the check on its lowering."""
  right = program_order_value(program)
  jitted = jax.jit(program)
  lowered = jitted.lower(jnp.int32(SLOT))
  start = time.perf_counter()
  compiled = lowered.compile()
  compile_seconds = time.perf_counter() - start
  wrong = False
  for _ in range(RUNS):
    reset_slots()
    wrong = wrong or _values(compiled(jnp.int32(SLOT))) != right
  before = lowered_hlo_text(lowered)
  assert before is not None, "a Lowered has its module before optimization"
  after = compiled.as_text()
  assert after is not None, "a Compiled has its optimized module"
  start = time.perf_counter()
  found = OrderAnalysis(after, before_optimization=before).races()
  check_seconds = time.perf_counter() - start
  # The same answer as races(lowered), the public way in.
  assert len(found) == len(races(lowered)), program.describe()
  return Outcome(program, len(found), wrong, check_seconds, compile_seconds)


@dataclasses.dataclass
class Counts:
  programs: int = 0
  proved_wrong: int = 0
  dropped_by_jax: int = 0
  """Proved and wrong, where JAX dropped a write before lowering (its
  result unused, no side effect): outside what any module shows."""
  false_reports: int = 0
  reported_wrong: int = 0
  reported_right: int = 0
  proved_right: int = 0
  check_seconds: float = 0.0
  compile_seconds: float = 0.0
  unsound: list = dataclasses.field(default_factory=list)
  false: list = dataclasses.field(default_factory=list)

  def add(self, outcome: Outcome) -> None:
    self.programs += 1
    self.check_seconds += outcome.check_seconds
    self.compile_seconds += outcome.compile_seconds
    reported = outcome.pairs > 0
    if not reported and outcome.wrong and outcome.program.drops_a_write:
      self.dropped_by_jax += 1
    elif not reported and outcome.wrong:
      self.proved_wrong += 1
      self.unsound.append(outcome.program)
    elif not reported:
      self.proved_right += 1
    elif outcome.wrong:
      self.reported_wrong += 1
    else:
      self.reported_right += 1
    if reported and outcome.program.threaded:
      self.false_reports += 1
      self.false.append(outcome.program)

  def table(self) -> str:
    ratio = self.check_seconds / max(self.compile_seconds, 1e-9)
    return "\n".join(
      [
        f"programs            {self.programs}",
        f"proved but wrong    {self.proved_wrong}",
        f"  and JAX dropped a write before lowering: {self.dropped_by_jax}",
        f"false reports       {self.false_reports} (threaded, reported)",
        f"reported, wrong     {self.reported_wrong}",
        f"reported, right     {self.reported_right}",
        f"proved, right       {self.proved_right}",
        f"check / compile     {ratio:.3f} "
        f"({self.check_seconds:.2f} s / {self.compile_seconds:.2f} s)",
      ]
    )


def run_corpus(size: int, seed: int = 0) -> Counts:
  counts = Counts()
  for n in range(seed, seed + size):
    counts.add(run_one(generate(n)))
  return counts


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.order_corpus")
  parser.add_argument("--size", type=int, default=150)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  counts = run_corpus(args.size, args.seed)
  print(
    f"jax {jax.__version__}, seeds {args.seed}..{args.seed + args.size - 1}"
  )
  print(counts.table())
  for program in counts.unsound:
    print("proved but wrong:", program.describe())
  for program in counts.false:
    print("false report:", program.describe())
  return 0


if __name__ == "__main__":
  sys.exit(main())
