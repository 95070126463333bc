"""What the analysis reports: `Op` (a piece of work) and `Race` (a pair)."""

from __future__ import annotations

import dataclasses
import functools
import re

from entangle_jax._src import access_marker, access_policy, conflict_rule
from entangle_jax._src.access_policy import Footprint
from entangle_jax._src.targets.declaration import TargetDeclaration
from entangle_jax.testing import _hlo
from entangle_jax.testing._analysis import source_lines as _source_lines
from entangle_jax.testing._hlo.attributes import Stack
from entangle_jax.testing._order import access


@dataclasses.dataclass(frozen=True)
class Op:
  """One piece of work: an instruction, or an async ``start``..``done`` pair.

  ``name`` is the instruction that starts it (the custom call itself, or
  the ``*-start``); ``last`` is the one that ends it (the same, or the
  ``*-done``).
  """

  computation: str
  name: str
  last: str
  instruction: _hlo.Instruction = dataclasses.field(compare=False)
  accesses: tuple[access.Access, ...] = dataclasses.field(
    compare=False, default=access.UNKNOWN
  )
  """What the op reads and writes (`entangle_jax.testing._order.access`)."""
  footprint: Footprint | None = dataclasses.field(compare=False, default=None)
  """What the one access policy said the op touches, or None for an op
  that is no call, which nobody asked it about."""
  operand_elements: bool = dataclasses.field(compare=False, default=True)
  """Whether one of its operands holds an element, so that an ``entangle``
  on it can order the op: XLA replaces a value of no element by a
  constant, which depends on nothing. False for an op whose operands all
  hold none, or that takes none."""

  def __hash__(self) -> int:
    # Of the fields that equality compares, computed once: the analysis
    # hashes ops tens of thousands of times in a large module.
    return self._hash

  @functools.cached_property
  def _hash(self) -> int:
    return hash((self.computation, self.name, self.last))

  @property
  def target(self) -> str | None:
    """The custom call's target name, or None when the op is no custom call."""
    return self.instruction.target

  @property
  def scope(self) -> str:
    """The ``op_name`` metadata: jitted function, named scopes, primitive."""
    return self.instruction.op_name

  @property
  def user_scope(self) -> str:
    """`scope` without the components ``Resource`` adds to record accesses
    (a wrapped one keeps its wrappers, as ``transpose(jvp())``, so a
    backward-pass op still says so)."""
    return access_marker.without_markers(self.instruction.op_name)

  @property
  def declaration(self) -> TargetDeclaration | None:
    """The declaration of its target that the analysis applied, if any."""
    return None if self.footprint is None else self.footprint.declaration

  @property
  def devices(self) -> str | None:
    """Its target's declared ``devices`` (None: nothing declared)."""
    return None if self.footprint is None else self.footprint.devices

  @property
  def shared_across_devices(self) -> bool:
    """Whether its target's object may be one for every device, so its
    copies on the devices of an SPMD module may conflict with each other:
    unless declared ``devices = "per-device"`` (a call nothing declares
    may touch process-wide state, as it may write anything)."""
    return conflict_rule.shared_across_devices(self.devices)

  @property
  def backward(self) -> bool:
    """Whether the op is a backward-pass op (under ``transpose(...)``)
    that JAX gave the ``Resource`` record of a forward call: the record is
    not the op's own, so it does not decide what the op accesses."""
    return access_policy.is_backward_copy(self.instruction.op_name)

  @property
  def access_text(self) -> str:
    """What the op accesses, in words, such as ``reads 'solver'``."""
    return "; ".join(str(a) for a in self.accesses)

  @property
  def location(self) -> str | None:
    """``file:line`` of the user's Python code that made the op, if
    recorded: the innermost frame outside library code (this package's,
    JAX's, the test runner's, and what `mark_library` names) and outside
    the binding that wrapped the call
    (`entangle_jax.testing._analysis.source_lines`).
    So a call made through ``entangle_jax.testing.write_slot``, a
    third-party binding, or an ``entangle``, points at the line that
    called it; paths under the working directory are shown relative to it.
    """
    user, _ = _source_lines.lines(self.instruction.stack)
    return None if user is None else _source_lines.shown(user)

  @property
  def binding_location(self) -> str | None:
    """``file:line`` of the binding's line that made the call, when it is
    not `location` (a third-party wrapper of ``jax.ffi.ffi_call``)."""
    _, binding = _source_lines.lines(self.instruction.stack)
    return None if binding is None else _source_lines.shown(binding)

  def label(self) -> str:
    """One line naming the op as the user wrote it."""
    what = self.target or self.instruction.opcode
    parts = [what]
    if self.user_scope:
      parts.append(f"scope {self.user_scope!r}")
    if self.location:
      parts.append(f"at {self.location}")
      if self.binding_location:
        parts.append(f"(in the binding at {self.binding_location})")
    parts.append(f"(%{self.name})")
    if self.backward:
      parts.append("[backward pass]")
    return " ".join(parts)


_NUMBERED = re.compile(r"\.(\d+)(?=\.|$)")


def program_position(op: Op) -> int | None:
  """Where `op` stands in the order the program made its calls: the
  number XLA gave its instruction (``%ffi_call.12``: JAX lowers the
  traced program in order, and XLA numbers instructions as it creates
  them), or None for a name without one (hand-written text)."""
  found = _NUMBERED.search(op.name)
  return int(found.group(1)) if found else None


# Scopes of modules whose instructions XLA numbers anew, not in the order
# JAX lowered them: deserialized from jax.export, a shard_map's body (which
# XLA inlines after partitioning; pmap is one in newer jax), an old pmap.
_RENUMBERED = re.compile(r"(?:^|/)(?:call_exported|shard_map)(?:/|$)|^pmap\(")


def program_order_of(a: Op, b: Op) -> tuple[Op, Op, bool]:
  """`a` and `b`, the call the program made first first, and whether that
  order is known; as given when neither their stacks nor their names say
  (known, as the text's order, for a hand-written module without
  numbers), and as given but not known when they disagree or when only
  untrusted numbers would say.

  XLA's numbers (`program_position`) follow the order JAX lowered the
  program in, mostly: a loop body's or a branch's instructions are
  numbered before their caller's, and a body XLA inlined or a module
  deserialized from ``jax.export`` is numbered anew. The Python stacks
  (`stack_order`) say where the calls share outer frames and part at
  different lines of one file. Across computations the stacks decide;
  in one computation both must agree (a Python loop makes later calls
  at earlier lines, which the numbers get right)."""
  by_stack = stack_order(a.instruction.stack, b.instruction.stack)
  x, y = program_position(a), program_position(b)
  by_number = None if x is None or y is None or x == y else (-1 if x < y else 1)
  renumbered = any(_RENUMBERED.search(op.instruction.op_name) for op in (a, b))
  across = a.computation != b.computation
  # The numbers are the program's order only in one computation of a
  # module XLA did not renumber.
  untrusted = by_number is not None and (renumbered or across)
  if untrusted:
    by_number = None
  disagree = False
  if by_stack is None or by_number is None:
    order = by_number if by_number is not None else by_stack
  else:
    disagree = by_number != by_stack
    order = None if disagree else by_number
  if order is None:
    # Nothing says: the analysis's order (the text's, for a hand-written
    # module without numbers) stands, unless XLA's numbers and the lines
    # disagree or the numbers could not be trusted.
    return a, b, not (disagree or untrusted)
  return (a, b, True) if order < 0 else (b, a, True)


def stack_order(a: Stack, b: Stack) -> int | None:
  """-1 when stack `a` (innermost frame first) was made before `b`, 1 when
  after, None when they do not say: below their common outer frames, at
  the first frames that differ, the earlier line of one file came first
  (the later call made inside a ``while_loop`` or ``scan`` it called at
  a later line). Without a common outer frame (XLA before jax 0.8.2 kept
  the innermost frame only), at different files, or in library code
  (JAX's, a binding's: there the two frames may be two functions called
  from one line, whose lines say nothing of which ran first), they do not
  say."""
  outer_a, outer_b = a[::-1], b[::-1]
  common = 0
  for x, y in zip(outer_a, outer_b, strict=False):
    if x != y:
      break
    common += 1
  if common == 0 or common >= min(len(outer_a), len(outer_b)):
    return None
  (file_a, line_a), (file_b, line_b) = outer_a[common], outer_b[common]
  if file_a != file_b or line_a == line_b or _source_lines.is_library(file_a):
    return None
  return -1 if line_a < line_b else 1


@dataclasses.dataclass(frozen=True)
class XlaChange:
  """What XLA's optimizer did, or may do, to a pair of calls whose order
  the program does not fix whatever XLA does, so that its optimized module
  orders them (or runs one of them elsewhere, or not at all) and hides the
  race there (`entangle_jax.testing._analysis.xla_changes`)."""

  kind: str
  """``"hoisted"`` (moved out of a loop), ``"merged"`` (with an identical
  call: XLA's CSE), ``"deleted"``, ``"folded"`` (the program orders the
  two only through an edge XLA folds away, or through the conditional or
  loop that runs one of them: an ``optimization_barrier``, a
  ``select`` on a constant, a product with zero), or ``"ordered"`` (both
  calls kept in place, and the optimized module happens to order them)."""
  call: Op | None = None
  """The call XLA moved, merged or deleted, as the program made it (an op
  of the module before optimization); None for ``"ordered"`` and
  ``"folded"``."""
  twin: Op | None = None
  """For ``"merged"``: the identical call it became, as the program made
  it."""
  seen: bool = True
  """Whether this compile did it (its optimized module shows it); False
  for what the program allows any XLA to do, which this one did not (or
  did where the optimized module cannot show it)."""
  loop_runs: str = ""
  """For ``"hoisted"``: how often the loop may run, in words."""
  place: str | None = None
  """``file:line`` of the call that made this instance of the moved call,
  where a helper called at several places made it (one place of several);
  None otherwise."""

  def sentence(self) -> str:
    """What XLA did or may do, in words, naming the call where the program
    made it."""
    if self.kind == "folded":
      return (
        "no value the earlier call computes reaches the later one: the "
        "program orders them only through an edge XLA may fold away (an "
        "optimization_barrier, a select's predicate, a product with zero, "
        "an element of a stack that the later call does not take) or "
        "through the conditional or loop that runs one of them as one op, "
        "which XLA may inline or split"
      )
    if self.call is None:
      return (
        "XLA's optimized module orders them, but the program does not: "
        "the order is XLA's choice, which another compile may change"
      )
    what = f"`{self.call.target or self.call.instruction.opcode}`"
    if self.call.location:
      what += f" at {self.call.location}"
    if self.place and self.place != self.call.location:
      what += f" (as called at {self.place})"
    if not self.seen:
      return self._may_sentence(what)
    if self.kind == "hoisted":
      return (
        f"XLA moved {what} out of its loop: it runs once, before the loop, "
        "not in every iteration"
      )
    if self.kind == "merged":
      twin = self.twin
      where = f" at {twin.location}" if twin and twin.location else ""
      return (
        f"XLA merged {what} with an identical call{where} (CSE): it runs "
        "once, where that one does"
      )
    return f"XLA deleted {what}: its result is unused, so it never runs"

  def _may_sentence(self, what: str) -> str:
    if self.kind == "hoisted":
      runs = f" ({self.loop_runs})" if self.loop_runs else ""
      return (
        f"XLA may move {what} out of its loop{runs}: it has no side effect "
        "and its operands do not change in the loop, so it may run once, "
        "before the loop, not in every iteration"
      )
    if self.kind == "deleted":
      return (
        f"XLA may delete {what}: it has no side effect and nothing that "
        "runs uses its results, so its write may never happen"
      )
    return f"XLA may move {what}: it has no side effect"


class Race(tuple[str, str]):
  """A pair of ops: two that may conflict and run in either order (from
  ``races``), or one that does not precede the other (from ``unordered``).

  Compares equal to the ``(first, second)`` tuple of their instruction
  names; ``first`` and ``second`` are the `Op` objects, which
  `format_races` renders.
  """

  first: Op
  second: Op
  across_devices: bool
  """Whether the two run on different devices of an SPMD module (on a
  target declared shared across devices); ``first`` may then be
  ``second``, the same call on two devices."""

  order_known: bool
  """Whether ``first`` is known to be the call the program made first
  (`program_order_of`); when not, the two are in no particular order."""

  xla_change: XlaChange | None
  """None for a pair the optimized module leaves unordered. For a pair
  that only the module before optimization, the program, leaves unordered,
  what XLA did that hid it; ``first`` and ``second`` are then ops of that
  module (instruction names as JAX lowered them)."""

  def __new__(
    cls,
    first: Op,
    second: Op,
    *,
    across_devices: bool = False,
    order_known: bool = True,
    xla_change: XlaChange | None = None,
  ) -> Race:
    race = super().__new__(cls, (first.name, second.name))
    race.first = first
    race.second = second
    race.across_devices = across_devices
    race.order_known = order_known
    race.xla_change = xla_change
    return race

  @property
  def verdicts(self) -> list[conflict_rule.Verdict]:
    """The one rule's verdict on each pair of the two ops' accesses (on
    two devices where the race is `across_devices`): what reports read
    for why the pair is reported."""
    return access.verdicts(
      self.first.accesses,
      self.second.accesses,
      across_devices=self.across_devices,
      devices=(self.first.devices, self.second.devices),
      undeclared=(
        self.first.declaration is None,
        self.second.declaration is None,
      ),
    )

  def __getnewargs_ex__(self) -> tuple[tuple[Op, Op], dict[str, object]]:
    # Pickled whole (a pytest-xdist worker hands its results over so).
    return (self.first, self.second), {
      "across_devices": self.across_devices,
      "order_known": self.order_known,
      "xla_change": self.xla_change,
    }
