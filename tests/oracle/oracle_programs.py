"""Random programs of the example resource for the order oracle.

A program is built from a seed, so the test process and the child process
that compiles and runs it see the same one. It is meant to make XLA:CPU run
thunks concurrently and out of schedule order, since XLA:CPU runs an
executor of at most 8 thunks, or one whose buffers are all at most 512 bytes,
in schedule order, and splits its ready queue over threads only when more
than 8 thunks are ready at once:

* a dozen source calls (no inputs) are ready together when the program
  starts, and a 200-element write makes one buffer large;
* calls sleep (``delay_us``), so calls that nothing orders overlap in time;
* while loops (with native reads in their condition, and predicates that
  use values made before the loop or by its body, some of them a bare state
  element that the body computes), conditionals whose
  predicate may use a call's result, tuples of loop state and branch
  results, and
  ``io_callback(ordered=False)`` host callbacks, wired together by
  `entangle` on random earlier results.

Every call is selected by its own scope ``op<tag>``. A call's slot ids are
``(tag, iteration)``, so the call log says which call ran in which
iteration of its enclosing loops (`counters`); callbacks log the same pair
into `oracle_tracing.CALLBACK_EVENTS`, numbered from the call log's own counter.
"""

from __future__ import annotations

import dataclasses
import random

import jax.numpy as jnp

from entangle_jax import testing

MAX_TRIPS = 3
ITERATION_BASE = MAX_TRIPS + 1
"""Iteration counters are digits of this base (a condition runs once more
than the body, so it sees ``MAX_TRIPS`` too); slot ids stay below 64."""
DELAYS_US = (0, 100, 300, 600)
SOURCES = 12
BASE_BITS = 4
"""Each conditional's predicate uses one of these bits of ``base`` (and the
loop counters), so runs with ``base`` in ``range(2**BASE_BITS)`` take every
branch."""
BIG = 200
"""Elements of the one large write: 800 bytes, over XLA:CPU's 512."""


@dataclasses.dataclass
class Call:
  """A native read or write, or a host callback, after its witnesses."""

  tag: int
  kind: str  # "read", "write" or "callback"
  witnesses: list[int]  # indices into the values visible to the call
  delay_us: int


@dataclasses.dataclass
class Loop:
  """A while loop whose state carries every value its body makes."""

  trips: int
  body: list
  sees: int  # how many of the previous iteration's values the body sees
  condition_call: Call | None  # a read in the loop condition
  predicate_input: int | None  # an outer value the predicate also uses
  predicate_state: int | None  # a value of the body the predicate uses
  bare: bool  # the predicate is a state element the body computes, as is


@dataclasses.dataclass
class Branch:
  """A conditional; its results are both branches' values, side by side."""

  number: int  # picks the bit of ``base`` that its predicate uses
  predicate_input: int | None
  branches: tuple[list, list]


@dataclasses.dataclass(frozen=True)
class Site:
  """Where a call sits: its enclosing loops, outermost first, each as
  ``(loop number, "body" or "condition")``."""

  loops: tuple[tuple[int, str], ...]


@dataclasses.dataclass
class Program:
  """A generated program and, per call tag, where the call sits and what
  kind it is."""

  seed: int
  statements: list
  sites: dict[int, Site]  # by call tag
  kinds: dict[int, str]  # by call tag

  @property
  def tags(self) -> list[int]:
    return sorted(self.sites)

  def describe(self) -> str:
    """The program as nested text, for failure messages."""
    return "\n".join(_describe(self.statements, 0))

  def features(self) -> set[str]:
    """The kinds of nesting and dependence the program has."""
    found = set()
    _features(self.statements, (), found)
    return found


def generate(seed: int) -> Program:
  """The program of `seed`: the same in every process."""
  program = _Generator(seed).program()
  assert len(program.tags) < testing.NUM_SLOTS, "tags are slot ids"
  return program


def counters(iteration: int, depth: int) -> tuple[int, ...]:
  """The loop counters, outermost first, that a call's slot id encodes."""
  digits = []
  for _ in range(depth):
    iteration, digit = divmod(iteration, ITERATION_BASE)
    digits.append(digit)
  return tuple(reversed(digits))


class _Generator:
  def __init__(self, seed: int):
    self.seed = seed
    self.rng = random.Random(seed)
    self.tags = 0
    self.loops = 0
    self.branches = 0
    self.sites: dict[int, Site] = {}
    self.kinds: dict[int, str] = {}

  def program(self) -> Program:
    # Sources first: ready together, so the executor splits its queue.
    top = [self.call(0, (), kind) for kind in self.source_kinds()]
    # At least one loop and one conditional, in random places.
    shapes = ["loop", "branch"]
    shapes += self.rng.choices(["call", "loop", "branch"], [4, 1, 1], k=8)
    self.rng.shuffle(shapes)
    visible = len(top)
    for shape in shapes:
      statement = self.statement(shape, visible, (), 0)
      top.append(statement)
      visible += len(value_dtypes([statement]))
    return Program(self.seed, top, self.sites, self.kinds)

  def source_kinds(self) -> list[str]:
    kinds = self.rng.choices(["read", "write"], k=SOURCES)
    kinds[self.rng.randrange(SOURCES)] = "callback"
    return kinds

  def call(self, visible: int, loops, kind: str | None = None) -> Call:
    tag = self.tags
    self.tags += 1
    if kind is None:
      kind = self.rng.choices(["read", "write", "callback"], [4, 4, 1])[0]
    count = self.rng.choice([0, 1, 1, 2]) if visible else 0
    witnesses = sorted(self.rng.sample(range(visible), min(count, visible)))
    self.sites[tag] = Site(tuple(loops))
    self.kinds[tag] = kind
    return Call(tag, kind, witnesses, self.rng.choice(DELAYS_US))

  def statement(self, shape: str, visible: int, loops, depth: int):
    if shape == "loop" and depth < 2:
      return self.loop(visible, loops, depth)
    if shape == "branch" and depth < 2:
      return self.branch(visible, loops, depth)
    return self.call(visible, loops)

  def block(self, visible: int, loops, size: int, depth: int) -> list:
    statements = []
    for _ in range(size):
      shape = self.rng.choices(["call", "loop", "branch"], [6, 1, 1])[0]
      statement = self.statement(shape, visible, loops, depth)
      statements.append(statement)
      visible += len(value_dtypes([statement]))
    return statements

  def loop(self, visible: int, loops, depth: int) -> Loop:
    number = self.loops
    self.loops += 1
    bare = self.rng.random() < 0.3
    condition_call = None
    if not bare and self.rng.random() < 0.5:
      condition_call = self.call(
        visible, (*loops, (number, "condition")), "read"
      )
    predicate_input = None
    if visible and self.rng.random() < 0.5:
      predicate_input = self.rng.randrange(visible)
    sees = self.rng.randint(1, 3)
    body = self.block(
      visible + sees, (*loops, (number, "body")), sees, depth + 1
    )
    trips = self.rng.randint(2, MAX_TRIPS)
    made = len(value_dtypes(body))
    predicate_state = None
    if bare or self.rng.random() < 0.5:
      predicate_state = self.rng.randrange(made)
    return Loop(
      trips,
      body,
      sees,
      condition_call,
      predicate_input,
      predicate_state,
      bare,
    )

  def branch(self, visible: int, loops, depth: int) -> Branch:
    number = self.branches
    self.branches += 1
    predicate_input = None
    if visible and self.rng.random() < 0.5:
      predicate_input = self.rng.randrange(visible)
    first = self.block(visible, loops, self.rng.randint(1, 3), depth + 1)
    second = self.block(visible, loops, self.rng.randint(0, 2), depth + 1)
    return Branch(number, predicate_input, (first, second))


def value_dtypes(statements) -> list:
  """The dtype of each value `statements` make, in order."""
  dtypes = []
  for s in statements:
    if isinstance(s, Call):
      dtypes.append(jnp.int32 if s.kind == "write" else jnp.float32)
    elif isinstance(s, Loop):
      dtypes += value_dtypes(s.body)
    else:
      dtypes += value_dtypes(s.branches[0]) + value_dtypes(s.branches[1])
  return dtypes


def _describe(statements, indent: int) -> list[str]:
  pad = "  " * indent
  lines = []
  for s in statements:
    if isinstance(s, Call):
      lines.append(
        f"{pad}op{s.tag}: {s.kind}, witnesses: values {s.witnesses}, "
        f"{s.delay_us} us"
      )
    elif isinstance(s, Loop):
      condition = s.condition_call.tag if s.condition_call else None
      lines.append(
        f"{pad}while ({s.trips} trips, condition call op{condition}, "
        f"predicate inputs {s.predicate_input} and made[{s.predicate_state}]"
        f"{' (bare)' if s.bare else ''}, sees {s.sees}):"
      )
      lines += _describe(s.body, indent + 1)
    else:
      lines.append(
        f"{pad}cond {s.number} (predicate input {s.predicate_input}):"
      )
      lines += _describe(s.branches[0], indent + 1)
      lines.append(f"{pad}else:")
      lines += _describe(s.branches[1], indent + 1)
  return lines


def _features(statements, around: tuple[str, ...], found: set[str]) -> None:
  for s in statements:
    if isinstance(s, Call):
      if s.kind == "callback" and around:
        found.add("callback in control flow")
    elif isinstance(s, Loop):
      found.add("loop in loop" if "loop" in around else "loop")
      if "branch" in around:
        found.add("loop in branch")
      if s.condition_call is not None:
        found.add("read in loop condition")
      if s.predicate_input is not None:
        found.add("loop predicate uses an earlier value")
      if s.predicate_state is not None:
        found.add("loop predicate uses the body's value")
      if s.bare:
        found.add("loop predicate is a bare state element")
      _features(s.body, (*around, "loop"), found)
    else:
      found.add("branch in loop" if "loop" in around else "branch")
      if s.predicate_input is not None:
        found.add("branch predicate uses an earlier value")
      for block in s.branches:
        _features(block, (*around, "branch"), found)
