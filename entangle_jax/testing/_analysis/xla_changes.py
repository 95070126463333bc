"""The program's order against XLA's: the races that XLA's optimizer hid.

The optimized module is what runs, and the check reads its order. But XLA's
optimizer changes the calls it finds there: a call that nothing marks
side-effecting may be moved out of a loop (loop-invariant code motion),
merged with an identical call (CSE) or deleted. After that the optimized
module orders the call, against the program: a read hoisted out of its
loop runs once, before every write the loop makes; a second query merged
with the first runs before the update the program made between them. Both
go the same wrong way in every run, and the optimized module shows no pair.

The module before optimization is the program as JAX lowered it, with each
call at its own place. A pair of calls that it leaves unordered is a race
whatever XLA made of it. `hidden_races` takes the races of both modules and
keeps those of the program that the optimized module's races do not already
hold, each with what XLA did (`XlaChange`). Calls are matched across the two
modules by target and Python stack (XLA renames instructions), or by target
and scope where the module records no stack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence

from entangle_jax._src import access_marker
from entangle_jax.testing._analysis import source_lines
from entangle_jax.testing._analysis.ops import (
  Op,
  Race,
  XlaChange,
  program_order_of,
)
from entangle_jax.testing._hlo import Instruction, Module
from entangle_jax.testing._hlo.attributes import Stack
from entangle_jax.testing._order import call_graph, call_instances, may_order

Key = tuple[object, ...]

NOT_SEEN = (
  "Only the optimized module was at hand: a call that XLA moved out of a "
  "loop, merged with an identical call or deleted is compared as XLA left "
  "it, not as the program made it, so races that XLA's optimizer hid are "
  "not seen. Hand races() the jax.stages.Lowered "
  "(jax.jit(f).lower(*args)) or check a dump that holds the module before "
  "optimization beside the optimized one."
)
"""What the check cannot see from the optimized module alone, said once
wherever it answers from that module only."""


def call_key(op: Op | Instruction) -> Key:
  """What names one call of the program in both modules: its target (or
  opcode) and the Python stack that made it, or its scope where the module
  records no stack. Where the module records only the innermost frame
  (``source_file``/``source_line``, older jaxlib), that frame is a
  library's line that many calls share (a wrapper's ``ffi_call``), so
  the scope is part of the key too: without it, a read in a loop and the
  same read after the loop were one call, and the pair of one was taken
  for the other's."""
  i = op.instruction if isinstance(op, Op) else op
  what = i.target or i.opcode
  scope = access_marker.without_markers(i.op_name)
  if len(i.stack) > 1:
    return (what, i.stack)
  if i.stack:
    return (what, i.stack, scope)
  return (what, scope)


class Placement:
  """How often, and how deep in loops, each computation of one module runs
  per execution of the module: the number of chains of call sites from the
  entry, and the fewest loops around it along any of them."""

  def __init__(self, module: Module):
    self.module = module
    self.instances: dict[str, int] = {module.entry: 1}
    self.loops: dict[str, int] = {module.entry: 0}
    self.enclosing: dict[str, tuple[tuple[str, str], ...]] = {module.entry: ()}
    """The loops around each computation, outermost first, as (computation,
    while instruction), along its first caller's chain."""
    for name in call_graph.callers_first(module):
      count, depth = self.instances.get(name, 0), self.loops.get(name, 0)
      around = self.enclosing.get(name, ())
      for i in module.computations[name]:
        inner = depth + (i.opcode == "while")
        loops = (*around, (name, i.name)) if i.opcode == "while" else around
        for callee in dict.fromkeys(i.callees):
          self.instances[callee] = self.instances.get(callee, 0) + count
          self.loops[callee] = min(self.loops.get(callee, inner), inner)
          self.enclosing.setdefault(callee, loops)

  def of(self, ops: Iterable[Op | Instruction]) -> dict[Key, tuple[int, int]]:
    """For each call key among `ops` (ops or instructions of the module):
    its instances, and the fewest loops around any of them."""
    found: dict[Key, tuple[int, int]] = {}
    for op in ops:
      key = call_key(op)
      count, depth = found.get(key, (0, 1 << 30))
      found[key] = (
        count + self.instances.get(op.computation, 0),
        min(depth, self.loops.get(op.computation, 0)),
      )
    return found


def hidden_races(
  optimized: Placement,
  optimized_races: Sequence[Race],
  optimized_ops: Sequence[Op],
  program_ops: Sequence[Op],
  may: may_order.MayOrder,
  conflict: Callable[[Op, Op], bool],
  program_precedes: Callable[[Op, Op], bool],
) -> list[Race]:
  """The pairs of the program's calls (`program_ops`, ops of the module
  before optimization) that conflict (`conflict`, the program's rule) and
  that no compile has to keep in order (`may`, `may_order.MayOrder` of
  that module), less those the optimized module's races
  (`optimized_races`, among `optimized_ops`) already hold: each with the
  `XlaChange` that says what XLA may do, and what this compile did
  (the optimized module's `Placement`, against each program call's place
  from `may`, tells it). `program_precedes` is the
  program's order by its edges, barriers included: a pair it orders and
  `may` does not is ordered only through an edge XLA folds away.
  """
  known = {_pair_key(race) for race in optimized_races}
  op_of = {op.instruction.name: op for op in program_ops}
  instances = may.by_instruction()
  placed = [
    (op, instance)
    for op in program_ops
    for instance in instances.get(op.instruction.name, ())
  ]
  at_place = {
    instance.bit: _at_place(op, may.placed_stack(instance))
    for op, instance in placed
  }
  changes = _Changes(
    optimized.of(optimized_ops),
    _placed_counts(at_place, placed),
    program_ops,
    list(at_place.values()),
    may.used_names(),
  )

  def writes(instance: call_instances.CallInstance) -> bool:
    op = op_of[instance.instruction.name]
    return any(a.mode != "read" for a in op.accesses)

  # Plain lists of ints for the loop over pairs of places (a helper
  # called at many places makes thousands of them).
  index_of = {id(op): k for k, op in enumerate(program_ops)}
  op_index = [index_of[id(op)] for op, _ in placed]
  bits = [instance.bit for _, instance in placed]
  deps = [instance.deps for _, instance in placed]
  movable = [may.movable(instance) for _, instance in placed]
  conflicts: dict[tuple[int, int], bool] = {}
  found: dict[tuple[Op, Op], Race] = {}
  settled: set[tuple[int, int]] = set()
  for n, (op_a, a) in enumerate(placed):
    x, bit_a, deps_a, movable_a = op_index[n], bits[n], deps[n], movable[n]
    for m in range(n + 1, len(placed)):
      y = op_index[m]
      pair = (x, y) if x <= y else (y, x)
      if pair in settled:
        continue  # One race per pair of calls, whichever places.
      if (
        not movable_a
        and not movable[m]
        and (deps_a >> bits[m] & 1 or deps[m] >> bit_a & 1)
      ):
        continue  # Ordered by data, and neither may move.
      op_b, b = placed[m]
      if pair not in conflicts:
        conflicts[pair] = conflict(op_a, op_b)
      if not conflicts[pair]:
        settled.add(pair)
        continue
      why = may.unordered(a, b, writes)
      if why is None:
        continue
      settled.add(pair)
      first, _, order_known = program_order_of(op_a, op_b)
      ends = (a, b) if first is op_a else (b, a)
      if why.kind == "hoisted":
        # Across iterations the other call comes first: the iteration
        # before ran it, and the moved call of the next must follow.
        ends = (b, a) if why.moved is a else (a, b)
        order_known = True
      elif a.chain != b.chain:
        # Two places of the program (a helper's call sites): the order
        # the program reaches them, which an op's own lines cannot say.
        ends = (a, b) if a.bit < b.bit else (b, a)
        order_known = True
      # Each call as at its place: a helper's call named by the lines
      # that reach it there, as the optimized module names its inlined
      # copies (so a pair that module reports is not reported twice).
      race = Race(
        at_place[ends[0].bit], at_place[ends[1].bit], order_known=order_known
      )
      if _pair_key(race) in known:
        continue
      race.xla_change = _change_of(
        may,
        why,
        race,
        (op_of[ends[0].instruction.name], op_of[ends[1].instruction.name]),
        at_place,
        changes,
        program_precedes,
      )
      found[(race.first, race.second)] = race
  return list(found.values())


def _at_place(op: Op, stack: Stack) -> Op:
  """`op` named by the Python stack of one place it runs at (a jitted
  helper's call there; `may_order.MayOrder.placed_stack`): itself where
  that is its own."""
  if stack == op.instruction.stack:
    return op
  placed = dataclasses.replace(
    op.instruction, stack=stack, source=stack[0] if stack else None
  )
  return dataclasses.replace(op, instruction=placed)


def _placed_counts(
  at_place: dict[int, Op],
  placed: Sequence[tuple[Op, call_instances.CallInstance]],
) -> dict[Key, tuple[int, int]]:
  """How many calls of the program each key names, one per place, and
  the fewest loops around one (`Placement.of`'s answer, with each call
  keyed by its place's stack)."""
  counts: dict[Key, tuple[int, int]] = {}
  for _, instance in placed:
    key = call_key(at_place[instance.bit])
    count, depth = counts.get(key, (0, len(instance.loops)))
    counts[key] = (count + 1, min(depth, len(instance.loops)))
  return counts


def _change_of(
  may: may_order.MayOrder,
  why: call_instances.Unordered,
  race: Race,
  program_pair: tuple[Op, Op],
  at_place: dict[int, Op],
  changes: _Changes,
  program_precedes: Callable[[Op, Op], bool],
) -> XlaChange:
  """What XLA did to `race`'s calls (`changes`), or else what it may do
  (`why`); `program_pair` is the race's two calls as ops of the module
  (`program_precedes` takes those)."""
  if why.moved is not None:
    moved = at_place[why.moved.bit]
    seen = changes.of_call(moved)
    if seen is not None and seen.kind == why.kind:
      return seen
    runs = ""
    if why.loop is not None:
      trips = why.loop.trips
      runs = (
        "its trip count is not known here"
        if trips is None
        else f"the loop runs {trips} times"
      )
    site = may.call_site(why.moved)
    place = None
    if site is not None:
      user, _ = source_lines.lines(site.stack)
      place = None if user is None else source_lines.shown(user)
    return XlaChange(why.kind, moved, seen=False, loop_runs=runs, place=place)
  seen = changes.of(race)
  if seen.call is not None:
    return seen
  first, second = program_pair
  if program_precedes(first, second) or program_precedes(second, first):
    return XlaChange("folded")
  return seen


def _pair_key(race: Race) -> tuple[object, ...]:
  ends = sorted((call_key(race.first), call_key(race.second)), key=repr)
  return (*ends, race.across_devices)


class _Changes:
  """What XLA did to the calls of the program (`XlaChange`), worked out
  once per call."""

  def __init__(
    self,
    after: dict[Key, tuple[int, int]],
    before: dict[Key, tuple[int, int]],
    program_ops: Sequence[Op],
    places: Sequence[Op] = (),
    used: Collection[str] = (),
  ):
    self._after = after
    self._used = used
    """The program's instructions whose results something uses."""
    self._before = before
    self._program_ops = program_ops
    self._places: dict[str, list[Op]] = {}
    """The ops of each instruction, one per place (a helper's call)."""
    for placed in places:
      self._places.setdefault(placed.name, []).append(placed)
    self._made: dict[tuple[Op, Stack], XlaChange | None] = {}

  def of(self, race: Race) -> XlaChange:
    for op in (race.first, race.second):
      change = self.of_call(op)
      if change is not None:
        return change
    return XlaChange("ordered")

  def of_call(self, op: Op) -> XlaChange | None:
    """What XLA did to call `op` of the program; None: kept in place."""
    # By its stack too: a helper's call at two places is one op.
    key = (op, op.instruction.stack)
    if key not in self._made:
      self._made[key] = self._work_out(op)
    return self._made[key]

  def _work_out(self, op: Op) -> XlaChange | None:
    key = call_key(op)
    count, depth = self._before.get(key, (0, 0))
    kept, kept_depth = self._after.get(key, (0, 0))
    if kept < count:
      twin = self._twin(op)
      if twin is not None:
        return XlaChange("merged", op, twin)
      if kept == 0 and op.instruction.name not in self._used:
        return XlaChange("deleted", op)
      # Its result is used: XLA merged it with a call that its folded
      # operands made identical.
      return XlaChange("merged", op)
    # Moved out of a loop, as one call still; a loop XLA unrolled makes
    # more calls, each made in turn, which hides nothing.
    if kept == count and kept_depth < depth:
      return XlaChange("hoisted", op)
    return None

  def _twin(self, op: Op) -> Op | None:
    """An earlier call of the program identical to `op` (same target,
    operands and result in one computation), which CSE keeps in its place;
    or the same call of a helper at another place that XLA kept (it
    inlined both, and merged them); None when there is none."""
    places = self._places.get(op.name, ())
    for other in places:
      stack = other.instruction.stack
      if stack != op.instruction.stack and self._after.get(call_key(other)):
        return other
    # Places whose stacks are one (a helper called twice from one line, or
    # an older JAX whose locations name only the innermost frame): the
    # kept call is another place, at the same lines.
    same = [o for o in places if o.instruction.stack == op.instruction.stack]
    if len(same) > 1 and self._after.get(call_key(op)):
      return op
    mine = op.instruction
    for other in self._program_ops:
      i = other.instruction
      if (
        other.computation == op.computation
        and i.line < mine.line
        and _identical(i, mine)
      ):
        return other
    return None


def _identical(a: Instruction, b: Instruction) -> bool:
  return (
    a.opcode == b.opcode
    and a.target == b.target
    and a.operands == b.operands
    and a.shape == b.shape
  )
