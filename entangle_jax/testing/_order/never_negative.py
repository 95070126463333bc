"""Which values XLA's algebraic simplifier may know never negative, so that
it folds ``x < 0`` (false) and ``x >= 0`` (true) of them: a comparison
that then orders nothing (`folding.tautology`).

XLA decides it on the instruction itself (an ``abs``, an ``exp``, an
``iota``, a ``power`` of a base never negative or to the power 2 (which
it makes a square), a square, a maximum with a value never negative), but
only after it has folded away what hides it: ``-(-x)``, ``x / 1``, ``x +
0`` where the 0 is computed, a slice or a one-element reduction, sort or
dot of a broadcast, a constant folded into another by reassociation, an
inlined call (a jitted helper, ``jnp.clip``), a one-trip loop. Which of
those XLA finds is its own, so a value computed from such an instruction
through an op of one operand, or of others that are constants, is taken
as possibly never negative too, and so is a parameter where what is
passed to it may be. An op of two values that vary (``arange(n) - w``)
stops it, as do an opaque custom call and a comparison. The margin costs
a report of a comparison with 0 on an order's path (``abs(w) - 1 < 0``);
missing one proves a program XLA breaks (issue 76, skeptic passes 76e and
76f).

The walks keep their own stack: a chain of thousands of ops (a loop
unrolled in Python) reaches no recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from entangle_jax.testing._hlo.instruction import Instruction, uniform_literal
from entangle_jax.testing._order import folding

SEEDS = frozenset({"abs", "exponential", "iota", "logistic"})
"""Opcodes whose result XLA takes as never negative (a complex ``abs``
apart)."""

_STOPS = frozenset(
  {
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

_WITH_CONSTANTS = frozenset(
  {
    "add",
    "subtract",
    "multiply",
    "divide",
    "remainder",
    "and",
    "or",
    "xor",
    "shift-left",
    "shift-right-logical",
    "shift-right-arithmetic",
    "atan2",
  }
)
"""Binary opcodes that XLA may fold to one operand where the other is a
constant (``x + 0``, ``x * 1``, or one reassociated to it): the result is
the first's only beside constants."""


class NeverNegative:
  """Answers `may_be` for the instructions of one module.

  Args:
    by_name: every instruction of the module, by its (module-wide unique)
      name.
    computations: each computation's instructions, by its name.
    constant: whether instruction `name` is a constant XLA may fold to, and
      its value where it is one that can be read (None otherwise): the
      evaluation's answer (`algebra.Leaf`), asked of the instructions
      on the way.
  """

  def __init__(
    self,
    by_name: Mapping[str, Instruction],
    computations: Mapping[str, Sequence[Instruction]],
    constant: Callable[[str], tuple[bool, object]],
  ):
    self._by_name = by_name
    self._computations = computations
    self._constant = constant
    self._known: dict[str, bool] = {}
    self._passed: dict[str, list[tuple[int | None, str]]] | None = None

  def may_be(self, name: str) -> bool:
    """Whether XLA may know instruction `name`'s value never negative."""
    stack = [name]
    open_: set[str] = set()
    while stack:
      top = stack[-1]
      if top in self._known:
        stack.pop()
        continue
      found = self._by_name.get(top)
      seed, inputs = self._rule(found) if found is not None else (False, [])
      if seed:
        self._known[top] = True
        open_.discard(top)
        stack.pop()
        continue
      # A loop's state leads back to itself: what is being worked out on
      # the way is taken as not, for now.
      pending = [n for n in inputs if n not in self._known and n not in open_]
      if pending and top not in open_:
        open_.add(top)
        stack.extend(pending)
        continue
      self._known[top] = any(self._known.get(n, False) for n in inputs)
      open_.discard(top)
      stack.pop()
    return self._known[name]

  # What decides an instruction: whether it is never negative itself, and
  # else the instructions whose being so it passes on.

  def _rule(self, i: Instruction) -> tuple[bool, list[str]]:
    opcode = i.opcode
    if opcode in SEEDS:
      return not (opcode == "abs" and self._complex(i.operands[:1])), []
    if opcode in _STOPS or opcode == "constant":
      return False, []
    if opcode == "parameter":
      return False, self._passed_to(i)
    if opcode == "custom-call":
      passed = i.target in _SEEN_THROUGH_TARGETS
      return False, list(i.operands[:1]) if passed else []
    if opcode == "multiply" and i.operands[:1] * 2 == i.operands:
      return True, []  # A square.
    if opcode == "power" and len(i.operands) == 2:
      base, exponent = i.operands
      if self._at_least_zero(base) or self._even(exponent):
        return True, []
      return False, [base]
    if opcode == "maximum":
      if any(self._at_least_zero(o) for o in i.operands):
        return True, []
      return False, list(i.operands)
    if opcode in _WITH_CONSTANTS and len(i.operands) == 2:
      # Passed on from a value only beside a constant.
      a, b = i.operands
      return False, [x for x, y in ((a, b), (b, a)) if self._is_constant(y)]
    if opcode == "select" and len(i.operands) == 3:
      return False, list(i.operands[1:])
    if opcode == "get-tuple-element" and i.operands:
      whole = self._by_name.get(i.operands[0])
      if whole is not None and whole.opcode == "tuple":
        index = i.tuple_index
        inside = index is not None and index < len(whole.operands)
        return False, [whole.operands[index]] if inside else []  # type: ignore[index]
      return False, list(i.operands[:1])
    # A call is inlined, a loop may run once and be replaced by its body,
    # a conditional by a branch: their results as those computations'.
    roots = [
      root
      for c in (i.body, *i.branches, *i.callees)
      if c is not None and c != i.condition
      for root in self._roots(c)
    ]
    if opcode in ("call", "while", "conditional", "fusion"):
      return False, roots
    return False, [o for o in i.operands if not self._is_constant(o)]

  def _passed_to(self, parameter: Instruction) -> list[str]:
    """What may be passed to `parameter`: the operand each caller of its
    computation passes in its place (a loop's body also gets what the
    body hands back)."""
    if self._passed is None:
      self._passed = {}
      for body in self._computations.values():
        for i in body:
          self._note_callees(i)
    number = parameter.parameter_number
    return [
      name
      for place, name in self._passed.get(parameter.computation, [])
      if place is None or place == number
    ]

  def _note_callees(self, i: Instruction) -> None:
    assert self._passed is not None
    if i.opcode == "while" and i.body is not None:
      for computation in (i.body, i.condition):
        if computation is not None:
          entries = self._passed.setdefault(computation, [])
          entries += [(0, o) for o in i.operands[:1]]
          entries += [(0, root) for root in self._roots(i.body)]
      return
    if i.opcode == "conditional":
      for k, branch in enumerate(i.branches):
        operand = i.operands[k + 1 : k + 2]
        self._passed.setdefault(branch, []).extend((0, o) for o in operand)
      return
    for computation in i.callees:
      entries = self._passed.setdefault(computation, [])
      if i.opcode in ("call", "fusion"):
        entries += [(k, o) for k, o in enumerate(i.operands)]
      else:  # A reduction's or sort's combiner: of any operand's elements.
        entries += [(None, o) for o in i.operands]

  def _roots(self, computation: str) -> list[str]:
    return [i.name for i in self._computations.get(computation, ()) if i.root]

  def _is_constant(self, name: str) -> bool:
    return any(self._constant(source)[0] for source in self._sources(name))

  def _sources(self, name: str) -> list[str]:
    """`name` and, where it is a parameter (or an element of one), what
    may be passed to it, through parameters on the way (a helper's
    argument that is the loop's state that is a constant)."""
    found, todo, seen = [], [name], {name}
    while todo:
      top = todo.pop()
      found.append(top)
      for passed in self._parameter_values(top):
        if passed not in seen:
          seen.add(passed)
          todo.append(passed)
    return found

  def _parameter_values(self, name: str) -> list[str]:
    """Where `name` is a parameter (or an element of one), what callers
    may pass to it; else nothing."""
    found = self._by_name.get(name)
    index = None
    if found is not None and found.opcode == "get-tuple-element":
      index = found.tuple_index
      found = self._by_name.get(found.operands[0]) if found.operands else None
    if found is None or found.opcode != "parameter":
      return []
    passed = self._passed_to(found)
    if index is None:
      return passed
    # An element of a tuple passed whole: that element where the tuple is
    # built here, the whole otherwise.
    elements = []
    for whole in passed:
      built = self._by_name.get(whole)
      if built is not None and built.opcode == "tuple":
        elements += built.operands[index : index + 1]
      else:
        elements.append(whole)
    return elements

  def _at_least_zero(self, name: str) -> bool:
    """Whether `name` is a constant that may be 0 or more (one not read
    here may), or an iota, or a parameter that may be passed one."""
    return any(self._at_least_zero_here(p) for p in self._sources(name))

  def _at_least_zero_here(self, name: str) -> bool:
    found = self._by_name.get(name)
    while found is not None and found.opcode in _SAME_VALUES and found.operands:
      found = self._by_name.get(found.operands[0])
    if found is not None and found.opcode == "iota":
      return True
    constant, value = self._constant(name)
    if not constant and found is not None and found.opcode == "constant":
      constant = True
      value = folding.typed(uniform_literal(found.literal), found.shape)
    if not constant or isinstance(value, bool):
      return False
    return value is None or (isinstance(value, int | float) and value >= 0)

  def _even(self, name: str) -> bool:
    """Whether `name` is a constant that may be even (``pow(x, 2)`` is
    ``x * x`` for XLA), or a parameter that may be passed one."""
    return any(self._even_here(n) for n in self._sources(name))

  def _even_here(self, name: str) -> bool:
    constant, value = self._constant(name)
    if not constant:
      return False
    if value is None:
      return True
    return isinstance(value, int | float) and float(value) % 2 == 0

  def _complex(self, names: Sequence[str]) -> bool:
    shapes = (self._by_name[n].shape for n in names if n in self._by_name)
    return any(shape.lstrip("(").startswith("c") for shape in shapes)
