"""The native calls an evaluation of `in_program_order` has recorded
(`CallLog`): those a later call may conflict with, indexed by the constant
handles they name, and the bits that stand for calls. The evaluator
(`interpreter.Context`) asks it which earlier calls a new one must come
after (`CallLog.witnesses_for`) and records each call it makes (`add`);
what it warns of (a call nothing can wait for, a write XLA may drop) is
said here too, from the log."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from entangle_jax._src.program_order import natives
from entangle_jax._src.program_order.touches import (
  OrderedCall,
  comes_after,
  conflicts,
  constants_of,
  covers,
  may_conflict,
  only_reads,
)

if TYPE_CHECKING:
  from entangle_jax._src.program_order.rule_inputs import Summary
  from entangle_jax._src.targets.declaration import Declarations


class CallLog:
  """The calls of one evaluation: those still to be looked at by a later
  call (`accesses`), those made in it (`own`), and every call recorded in
  it and its children, in the order they were made (`every_call`)."""

  def __init__(
    self,
    decls: Declarations,
    accesses: Sequence[OrderedCall] = (),
    parent: CallLog | None = None,
  ):
    self.decls = decls
    self.accesses: list[OrderedCall] = list(accesses)
    # Those of `accesses` that write: all a call that only reads can
    # conflict with (`candidates`), so that reads of what one write wrote
    # are not each compared with all the reads before them.
    self.writing: list[OrderedCall] = [
      a for a in self.accesses if not a.only_reads
    ]
    # `accesses` by the constant handles they name, for `candidates`: every
    # access ever added (`log`), the positions in it of those whose parts
    # all name constants, by constant, and of the others; and the bits of
    # those still in `accesses`.
    self.log: list[OrderedCall] = []
    self.by_const: dict[int, list[int]] = {}
    self.loose: list[int] = []
    self.live: set[int] = set()  # The ids of those of `log` still recorded.
    # The bits that stand for calls, counted from 0 for each evaluation
    # and shared by its children: a set of calls is an int as wide as the
    # calls made in this one evaluation, not in every one in the process.
    self.bit_counter = (
      itertools.count() if parent is None else parent.bit_counter
    )
    for a in self.accesses:
      self.index(a)
    self.own: list[OrderedCall] = []  # Made in this evaluation.
    # Every call recorded in this evaluation and its children (branches,
    # loop bodies, helpers), in the order they were made.
    self.every_call: list[OrderedCall] = (
      [] if parent is None else parent.every_call
    )

  def new_bit(self) -> int:
    """The bit of a new call (or summary, or order value) of this
    evaluation."""
    return 1 << next(self.bit_counter)

  def after_effects(self, tokens) -> int:
    """The calls a call with the ordered effects `tokens` comes after: JAX
    threads an ordered effect's token through every call that has it, in
    program order, so the earlier ones with one of its effects, and what
    they come after."""
    bits = 0
    for a in self.accesses:
      if a.tokens & tokens:
        bits |= a.deps
    return bits

  def witnesses_for(
    self, parts, bits: int, later: str = "a later native call"
  ) -> tuple[list, int]:
    """The values a call of `parts`, whose operands depend on the calls in
    `bits`, must be entangled with; and the calls they stand for. `later`
    names that call for the warning when an earlier call it must follow
    returns no array."""
    reads, consts = only_reads(parts), constants_of(parts)
    needed = [
      a
      for a in self.candidates(consts, reads)
      if not comes_after(bits, a)
      and may_conflict(a, parts, reads, consts)
      and conflicts(a.parts, parts, self.decls)
    ]
    kept = not_covered(needed)
    values, stood, unwaited = [], 0, []
    for a in kept:
      if not a.witnesses:
        unwaited.append(a)
        continue
      values += a.witnesses
      stood |= a.deps
    if unwaited:
      _warn_unwaited(later, unwaited, kept)
    return values, stood

  def index(self, access: OrderedCall) -> None:
    position = len(self.log)
    self.log.append(access)
    self.live.add(id(access))
    if access.constants is None:
      self.loose.append(position)
    else:
      for c in access.constants:
        self.by_const.setdefault(c, []).append(position)

  def candidates(
    self, consts: frozenset | None, reads: bool = False
  ) -> list[OrderedCall]:
    """The recorded calls that may conflict with a call whose parts all
    name the constant handles `consts` (None: any), and that only reads
    where `reads`, in program order: those naming one of them, and those
    naming anything else; for a call that only reads, those that write.
    Any other call names only other constants, which are different
    objects, or only reads too."""
    pool = self.writing if reads else self.accesses
    if consts is None or len(pool) < 32:
      return pool
    positions = set(self._live(self.loose))
    for c in consts:
      found = self.by_const.get(c)
      if found:
        positions.update(self._live(found))
    calls = (self.log[p] for p in sorted(positions))
    if reads:
      return [a for a in calls if not a.only_reads]
    return list(calls)

  def _live(self, positions: list[int]) -> list[int]:
    """`positions` (in `log`) less those of calls no longer in `accesses`,
    dropped from the list too: each is looked at once more, not at every
    later call."""
    live = self.live
    if any(id(self.log[p]) not in live for p in positions):
      positions[:] = [p for p in positions if id(self.log[p]) in live]
    return positions

  def add(self, access: OrderedCall) -> None:
    """Records `access`, made in this evaluation."""
    if not self.decls.safe_pairs and not access.only_reads and access.witnesses:
      # An earlier call that this one comes after, on an object this one
      # writes, need not be looked at again: whatever conflicts with it
      # conflicts with this one, which comes after it. (A call that only
      # reads covers none; nor does one that returns no array: nothing can
      # be ordered after it, so a later call must still be ordered after
      # the earlier ones itself.)
      dropped = {
        id(a)
        for a in self._coverable(access)
        if comes_after(access.deps, a)
        and covers(access.parts, a.parts, self.decls)
      }
      if dropped:
        self.accesses[:] = [a for a in self.accesses if id(a) not in dropped]
        self.writing[:] = [a for a in self.writing if id(a) not in dropped]
        self.live -= dropped
    self.accesses.append(access)
    if not access.only_reads:
      self.writing.append(access)
    self.index(access)
    self.own.append(access)
    self.every_call.append(access)

  def _coverable(self, access: OrderedCall) -> list[OrderedCall]:
    """The recorded calls `access` may cover (`covers`): all of them, or,
    when its parts all name constants, those indexed under one of its
    constants. A part that names constants covers only a part that names
    the same object (`_same_object`), which names the same constants."""
    consts = access.constants
    if consts is None or len(self.accesses) < 32:
      return self.accesses
    positions: set[int] = set()
    for c in consts:
      found = self.by_const.get(c)
      if found:
        positions.update(self._live(found))
    return [self.log[p] for p in positions]

  def record(self, summary: Summary) -> OrderedCall:
    """Records a sub-program's calls as one call here (a rule's
    `rule_inputs.Summary`), which it returns: its witnesses come after it
    and after the calls of its `deps`."""
    bit = self.new_bit()
    access = OrderedCall(
      bit,
      tuple(summary.parts),
      list(summary.witnesses),
      bit | summary.deps,
      summary.label,
    )
    self.add(access)
    return access

  def exported(self) -> list:
    """The witnesses of the calls made in this evaluation that no other
    of them covers: values that come after every one of its calls."""
    values = []
    for a in not_covered(self.own):
      values += a.witnesses
    return values

  def warn_dropped(self, program_used: set[int]) -> None:
    """Warns of each native call that may write, has no side effect, and
    that nothing keeps: XLA drops a call whose results nothing that runs
    uses (`program_used`, by id). A call is kept when it is
    side-effecting, when the program uses its results, or when a kept call
    comes after it (the transform's entangle makes that one consume its
    results): so a write whose only later call is a read nobody uses is
    lost with it, in a branch, a loop body or a helper as at the top."""
    needed = 0
    lost: list[OrderedCall] = []
    for a in reversed(self.every_call):
      kept = (
        a.side_effect
        or any(id(r) in program_used for r in a.results)
        or comes_after(needed, a)
      )
      if kept:
        needed |= a.deps
      elif any(p.mode == "write" for p in a.parts):
        lost.append(a)
    warned: set[str] = set()
    for a in reversed(lost):
      if a.label in warned:
        continue
      warned.add(a.label)
      warnings.warn(
        f"in_program_order: the native call `{a.label}` may write, but "
        "nothing uses its results and it is not side-effecting, so XLA "
        "may drop it. Use its result, or declare it has_side_effect=True.",
        stacklevel=natives.user_stacklevel(),
      )


def not_covered(calls: Sequence[OrderedCall]) -> list[OrderedCall]:
  """`calls` less those another of them is ordered after, which a value
  that comes after that other one comes after too. Only a call that
  returns an array (has witnesses) carries the calls it comes after: one
  that returns nothing (a ``jax.debug.callback``) cannot be waited for,
  so the calls it comes after stay, each to be waited for itself."""
  covered = 0
  for a in calls:
    if a.witnesses:
      covered |= a.deps & ~a.bit
  return [a for a in calls if not (a.bit & covered)]


def _warn_unwaited(
  later: str, unwaited: Sequence[OrderedCall], kept: Sequence[OrderedCall]
) -> None:
  """Warns that `later` cannot be ordered after the `unwaited` calls,
  which return no array, saying which orders it keeps (after the other
  calls of `kept`, and what those come after)."""
  names = ", ".join(f"`{a.label}`" for a in unwaited)
  waited = [a for a in kept if a.witnesses]
  if waited:
    keeps = (
      "Its order after the other earlier calls it conflicts with ("
      + ", ".join(f"`{a.label}`" for a in waited)
      + ") is kept."
    )
  else:
    keeps = "It loses no order after any other earlier call."
  many = len(unwaited) > 1
  warnings.warn(
    f"in_program_order: {later} cannot be ordered after the earlier native "
    f"call{'s' if many else ''} {names}, which return{'' if many else 's'} "
    f"no array: nothing can wait for {'them' if many else 'it'}, so they "
    f"may run in either order. {keeps} To order them, give the earlier "
    "call a result: make a jax.debug.callback an io_callback (which "
    "in_program_order gives a result when it has none), give an ffi_call "
    "a result, or have a binding's own primitive return one, an array or "
    "a JAX token (its lowering's custom call returning a "
    "!stablehlo.token), which later calls are then entangled after.",
    stacklevel=natives.user_stacklevel(),
  )
