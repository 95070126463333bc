"""Which values XLA's algebraic simplifier may know never negative, so that
it folds ``x < 0`` (false) and ``x >= 0`` (true) of them: a comparison
that then orders nothing (`folding.tautology`).

XLA decides it on the instruction itself (an ``abs``, an ``exp``, an
``iota``, a ``power`` of a base never negative, a square, a maximum with
a constant never negative), but only after it has folded away what hides
it: ``-(-x)``, ``x / 1``, ``x + 0`` where the 0 is computed, a slice or a
one-element reduction, sort or dot of a broadcast, a one-trip loop or an
inlined call. Which of those identities XLA finds is its own, so a value
computed from such an instruction through any op XLA can see into is
taken as possibly never negative too. A constant never seeds it through
arithmetic (``x + 1`` is not), an opaque custom call stops it, and so do
a parameter and a communicating call. The margin costs a report of a
comparison with 0 on an order's path, seldom met; missing one proves a
program XLA breaks (issue 76, skeptic pass 76e).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from entangle_jax.testing._hlo.instruction import Instruction, uniform_literal
from entangle_jax.testing._order import folding

SEEDS = frozenset({"abs", "exponential", "iota", "logistic"})
"""Opcodes whose result XLA takes as never negative (a complex ``abs``
apart)."""

_STOPS = frozenset(
  {
    "parameter",
    "compare",
    "rng",
    "rng-bit-generator",
    "infeed",
    "recv",
    "recv-done",
    "after-all",
    "partition-id",
    "replica-id",
  }
)
"""Opcodes whose result hides its operands from XLA's test, or has none."""

_SEEN_THROUGH_TARGETS = frozenset(
  {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}
)
"""Custom calls that XLA removes before it simplifies (its own sharding
annotations): their result is their operand."""


_SAME_VALUES = frozenset(
  {"broadcast", "reshape", "copy", "transpose", "bitcast"}
)
"""Opcodes that pass on their operand's values (a constant's among
them)."""

_RUN_AS_THEIR_CALLEES = frozenset({"call", "while", "conditional", "fusion"})


class NeverNegative:
  """Answers `may_be` for the instructions of one module.

  Args:
    by_name: every instruction of the module, by its (module-wide unique)
      name.
    computations: each computation's instructions, by its name.
  """

  def __init__(
    self,
    by_name: Mapping[str, Instruction],
    computations: Mapping[str, Sequence[Instruction]],
  ):
    self._by_name = by_name
    self._computations = computations
    self._known: dict[str, bool] = {}

  def may_be(self, name: str) -> bool:
    """Whether XLA may know instruction `name`'s value never negative."""
    known = self._known.get(name)
    if known is None:
      # Taken as not while it is worked out: a cycle (none in HLO) ends.
      self._known[name] = False
      found = self._by_name.get(name)
      known = found is not None and self._decide(found)
      self._known[name] = known
    return known

  def _root(self, computation: str) -> str | None:
    for i in self._computations.get(computation, ()):
      if i.root:
        return i.name
    return None

  def _roots_may_be(self, computations: Sequence[str]) -> bool:
    roots = (self._root(c) for c in computations)
    return any(root is not None and self.may_be(root) for root in roots)

  def _constant_at_least_zero(self, i: Instruction) -> bool:
    while i.opcode in _SAME_VALUES and i.operands:
      inner = self._by_name.get(i.operands[0])
      if inner is None:
        return False
      i = inner
    if i.opcode == "iota":
      return True
    if i.opcode != "constant":
      return False
    value = folding.typed(uniform_literal(i.literal), i.shape)
    # A literal not read here (an array: ``[0, 1, 2]``, which XLA makes an
    # iota) may be never negative.
    if isinstance(value, bool):
      return False
    return value is None or (isinstance(value, int | float) and value >= 0)

  def _decide(self, i: Instruction) -> bool:
    opcode = i.opcode
    if opcode in SEEDS:
      return not (opcode == "abs" and self._complex(i.operands[:1]))
    if opcode in _STOPS or opcode == "constant":
      return False
    operands = [self._by_name.get(o) for o in i.operands]
    if opcode == "multiply" and i.operands[:1] * 2 == i.operands:
      return True  # A square.
    if opcode == "power" and operands and operands[0] is not None:
      base = operands[0]
      if self._constant_at_least_zero(base) or self.may_be(base.name):
        return True
    if opcode == "maximum" and any(
      o is not None and self._constant_at_least_zero(o) for o in operands
    ):
      return True
    if opcode == "custom-call" and i.target not in _SEEN_THROUGH_TARGETS:
      return False
    if opcode == "get-tuple-element" and operands and operands[0] is not None:
      whole = operands[0]
      if whole.opcode == "tuple" and i.tuple_index is not None:
        if i.tuple_index < len(whole.operands):
          return self.may_be(whole.operands[i.tuple_index])
        return False
      return self.may_be(whole.name)
    # A call is inlined, a loop may run once and be replaced by its body,
    # a conditional by a branch: their results as those computations'.
    callees = [c for c in (i.body, *i.branches, *i.callees) if c is not None]
    if opcode in _RUN_AS_THEIR_CALLEES and self._roots_may_be(callees):
      return True
    return any(
      o is not None and not self._is_constant(o) and self.may_be(o.name)
      for o in operands
    )

  def _is_constant(self, i: Instruction) -> bool:
    return i.opcode == "constant"

  def _complex(self, names: Sequence[str]) -> bool:
    shapes = (self._by_name[n].shape for n in names if n in self._by_name)
    return any(shape.lstrip("(").startswith("c") for shape in shapes)
