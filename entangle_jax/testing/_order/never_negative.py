"""Which values XLA's algebraic simplifier may know never negative, so that
it folds ``x < 0`` (false) and ``x >= 0`` (true) of them: a comparison
that then orders nothing (`folding.tautology`).

XLA decides it on the instruction itself (an ``abs``, an ``exp``, an
``iota``, a ``power`` of a base never negative or to the power 2 (which
it makes a square), a square, a maximum with a value never negative), but
only after it has folded away what hides it: ``-(-x)``, ``x / 1``, ``x +
0`` where the 0 is computed, ``(x - 1) + 1`` (it adds the constants
first), a slice or a one-element reduction, sort or dot of a broadcast,
an inlined call (a jitted helper, ``jnp.clip``), a one-trip loop. So each
value is read as what it may fold to: a set of ``a * s + b``, ``s`` a value
XLA knows never negative and ``a``, ``b`` the constants that negations,
sums and products with constants make on the way, and it may be known
never negative where one of them may be ``s`` itself (``a`` 1, ``b`` 0; a
constant not read here may be). Ops that keep values (a reshape, a
slice, a select, a call's result, a parameter passed one) pass the set
on; any other op, and an op of two values that vary (``arange(n) - w``),
stops it, as do an opaque custom call and a comparison. ``-abs(w) < 0``,
``abs(w) - 1 < 0`` and ``table[abs(w)]`` are then comparisons XLA keeps
(skeptic pass 76f); missing one that XLA folds proves a program XLA
breaks (issue 76, skeptic passes 76e and 76f).

The walks keep their own stack: a chain of thousands of ops (a loop
unrolled in Python) reaches no recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from entangle_jax.testing._hlo.instruction import Instruction
from entangle_jax.testing._order import folding
from entangle_jax.testing._order.algebra import INTEGER_MAX, element_type_of

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

_PASSING = frozenset(
  {
    *folding.KEEP_VALUES,
    "slice",
    "convert",
    "bitcast-convert",
    "real",
    "reduce-precision",
    "sort",
    "reduce",
    "reduce-window",
    "dot",
    "concatenate",
    "pad",
    "all-reduce",
    "all-gather",
    "collective-permute",
    "all-to-all",
    "reduce-scatter",
    "tuple",
    "opt-barrier",
    "domain",
    "add-dependency",
    "map",
    "sqrt",
    "rsqrt",
  }
)
"""Opcodes whose result XLA may fold to an operand (or a part of one):
a reshape or a slice keeps the values, a conversion there and back is
folded, a reduction, sort or dot of one element is that element (a
constant operand, such as a reduction's start, apart). A tuple passes
on any element's (where which one is taken is not followed), and a
square root its operand's: XLA takes one of a value it knows positive as
positive."""

_DATA_ONLY = {
  "dynamic-slice": 1,
  "gather": 1,
  "dynamic-update-slice": 2,
}
"""Indexed ops, with how many leading operands carry data: the indices
never become the result (``table[abs(w)]`` is the table's element)."""

_IDENTITY = {
  "and": (-1, True),
  "or": (0, False),
  "xor": (0, False),
  "shift-left": (0,),
  "shift-right-logical": (0,),
  "shift-right-arithmetic": (0,),
}
"""Binary opcodes that XLA folds to their other operand where a constant
operand is one of these values (``x & -1``, ``x | 0``, ``x << 0``); the
shifts only with the constant as the amount."""

Step = Callable[[tuple], tuple] | None
"""What an op makes of an operand's form (None: the form unchanged)."""

_ANY = ("any",)
"""A form that may be anything: through a constant not read here."""

_SEED = frozenset({(1, 0)})
"""The forms of a value XLA knows never negative: itself."""

_NONE: frozenset = frozenset()

_MOST_FORMS = 8
"""More forms than this are taken as any form (sound: may be the seed)."""


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
    self._known: dict[str, frozenset] = {}
    self._passed: dict[str, list[tuple[int | None, str]]] | None = None

  def may_be(self, name: str) -> bool:
    """Whether XLA may know instruction `name`'s value never negative."""
    return _holds(self._forms(name))

  def _forms(self, name: str) -> frozenset:
    """What XLA may fold instruction `name` to: forms ``(a, b)`` of ``a *
    s + b``, ``s`` a value it knows never negative (`_ANY`: any)."""
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
        self._known[top] = _SEED
        open_.discard(top)
        stack.pop()
        continue
      # A loop's state leads back to itself: what is being worked out on
      # the way is taken as not, for now.
      pending = [
        n for n, _ in inputs if n not in self._known and n not in open_
      ]
      if pending and top not in open_:
        open_.add(top)
        stack.extend(pending)
        continue
      self._known[top] = _combined(
        [(self._known.get(n, _NONE), step) for n, step in inputs]
      )
      open_.discard(top)
      stack.pop()
    return self._known[name]

  # What decides an instruction: whether it is never negative itself, and
  # else the instructions it may fold to, each with the step (a function
  # of a form; None: the form unchanged) that takes its forms to this one.

  def _rule(self, i: Instruction) -> tuple[bool, list[tuple[str, Step]]]:
    opcode = i.opcode
    if opcode in SEEDS:
      return not (opcode == "abs" and self._complex(i.operands[:1])), []
    if opcode in _STOPS or opcode == "constant":
      return False, []
    if opcode == "parameter":
      return False, _kept(self._passed_to(i))
    if opcode == "custom-call":
      passed = i.target in _SEEN_THROUGH_TARGETS
      return False, _kept(i.operands[:1] if passed else [])
    if opcode == "multiply" and i.operands[:1] * 2 == i.operands:
      return True, []  # A square.
    if opcode == "power" and len(i.operands) == 2:
      base, exponent = i.operands
      if self._at_least_zero(base) or self._even(exponent):
        return True, []
      # A power of a base XLA knows never negative is, and ``x ** 1`` is
      # ``x``.
      return False, _kept([base])
    if opcode == "maximum":
      if any(self._at_least_zero(o) for o in i.operands):
        return True, []
      return False, _kept(i.operands)
    if opcode == "clamp" and len(i.operands) == 3:
      # XLA folds a clamp between infinities to its operand; it does not
      # take one with a bound never negative as never negative (measured).
      return False, _kept(i.operands[1:2])
    if opcode in ("minimum", "select"):
      return False, _kept(i.operands[1:] if opcode == "select" else i.operands)
    if opcode == "negate" and i.operands:
      return False, [(i.operands[0], _negated)]
    if opcode == "not" and i.operands and not i.shape.startswith("pred"):
      return False, [(i.operands[0], _complemented(i.shape))]
    if len(i.operands) == 2 and (
      opcode in _AFFINE or opcode in _IDENTITY or opcode == "divide"
    ):
      return False, self._with_a_constant(i)
    if opcode == "get-tuple-element" and i.operands:
      whole = self._by_name.get(i.operands[0])
      if whole is not None and whole.opcode == "tuple":
        index = i.tuple_index
        inside = index is not None and index < len(whole.operands)
        return False, _kept([whole.operands[index]] if inside else [])  # type: ignore[index]
      return False, _kept(i.operands[:1])
    if opcode in _DATA_ONLY:
      return False, _kept(i.operands[: _DATA_ONLY[opcode]])
    if opcode == "scatter":
      inputs = (len(i.operands) - 1) // 2
      data = i.operands[:inputs] + i.operands[inputs + 1 :]
      return False, _kept(data)
    # A call is inlined, a loop may run once and be replaced by its body,
    # a conditional by a branch: their results as those computations'.
    if opcode in ("call", "while", "conditional", "fusion"):
      roots = [
        root
        for c in (i.body, *i.branches, *i.callees)
        if c is not None and c != i.condition
        for root in self._roots(c)
      ]
      return False, _kept(roots)
    if opcode in _PASSING:
      varying = [o for o in i.operands if not self._constant_of(o)[0]]
      return False, _kept(varying)
    return False, []

  def _with_a_constant(self, i: Instruction) -> list[tuple[str, Step]]:
    """A binary op of a value and a constant: the value's forms through
    the constant (``x - 1``: ``b - 1``); nothing where both vary or both
    are constants."""
    a, b = i.operands
    a_constant, a_value = self._constant_of(a)
    b_constant, b_value = self._constant_of(b)
    if a_constant == b_constant:
      return []
    if b_constant:
      varying, value, first = a, b_value, True
    else:
      varying, value, first = b, a_value, False
    passes, step = _step(i.opcode, i.shape, value, first)
    return [(varying, step)] if passes else []

  def _constant_of(self, name: str) -> tuple[bool, object]:
    """Whether `name` is a constant XLA may fold to (or a parameter that
    may be passed one), and its value where every source agrees on one
    that can be read."""
    values = []
    for source in self._sources(name):
      constant, value = self._constant(source)
      if constant:
        values.append(value)
    if not values:
      return False, None
    first = values[0]
    same = all(v is not None and v == first for v in values)
    return True, first if same else None

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
    while (
      found is not None
      and found.opcode in folding.KEEP_VALUES
      and found.operands
    ):
      found = self._by_name.get(found.operands[0])
    if found is not None and found.opcode == "iota":
      return True
    constant, value = self._constant(name)
    if not constant:
      # The instruction itself, where the evaluation did not reach it.
      constant, value = folding.read_constant(None, found)
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


_AFFINE = frozenset({"add", "subtract", "multiply"})
"""Binary opcodes that, with a constant, take a form ``a * s + b`` to
another such form."""


def _kept(names: Sequence[str]) -> list[tuple[str, Step]]:
  """Operands whose forms pass on unchanged."""
  return [(name, None) for name in names]


def _negated(form: tuple) -> tuple:
  if form == _ANY:
    return form
  a, b = form
  return (-a, -b)


def _complemented(shape: str) -> Callable[[tuple], tuple]:
  """``~x`` of an integer is ``-x - 1``."""
  wrap = _wrapper(shape)

  def step(form: tuple) -> tuple:
    if form == _ANY:
      return form
    a, b = form
    return (wrap(-a), wrap(-b - 1))

  return step


def _wrapper(shape: str) -> Callable[[object], object]:
  """Numbers as an integer type of `shape` holds them (modulo its
  width); floats as they are."""
  element = element_type_of(shape)
  largest = INTEGER_MAX.get(element)
  if largest is None:
    return lambda v: v
  modulus = largest + 1 if element.startswith("u") else 2 * (largest + 1)
  return lambda v: v % modulus if isinstance(v, int) else v


def _step(
  opcode: str, shape: str, value: object, first: bool
) -> tuple[bool, Step]:
  """Whether the other operand's forms pass a binary `opcode` with the
  constant `value` (the second operand where `first`), and the step they
  take (None: unchanged)."""
  if value is None:
    return True, _anything  # A constant not read here may be anything.
  if opcode in _IDENTITY:
    if opcode.startswith("shift") and not first:
      return False, None  # The value is the amount: never the result.
    # By type: ``x & 1`` is no ``x & true``.
    same = any(
      value == v and isinstance(value, bool) == isinstance(v, bool)
      for v in _IDENTITY[opcode]
    )
    return same, None
  if isinstance(value, bool):
    value = int(value)
  if not isinstance(value, int | float):
    return True, _anything
  wrap = _wrapper(shape)
  if opcode == "divide":
    if not first or value == 0:
      return False, None
    if isinstance(value, int) and value not in (1, -1):
      return False, None  # An integer quotient rounds: not undone.
    value = 1 / value if isinstance(value, float) else value
    opcode = "multiply"
  c = value

  def step(form: tuple) -> tuple:
    if form == _ANY:
      return form
    a, b = form
    if opcode == "add":
      return (a, wrap(b + c))
    if opcode == "subtract":
      return (a, wrap(b - c)) if first else (wrap(-a), wrap(c - b))
    return (wrap(a * c), wrap(b * c))

  return True, step


def _anything(form: tuple) -> tuple:
  return _ANY


def _combined(inputs: list[tuple[frozenset, Step]]) -> frozenset:
  """The forms of an op from its inputs' forms and the steps they take."""
  found: set = set()
  for forms, step in inputs:
    for form in forms:
      made = form if step is None else step(form)
      if made == _ANY:
        return frozenset({_ANY})
      found.add(made)
  if len(found) > _MOST_FORMS:
    return frozenset({_ANY})
  return frozenset(found)


def _holds(forms: frozenset) -> bool:
  """Whether one of `forms` may be the value known never negative itself:
  ``1 * s + 0`` (floats to a rounding: XLA folds ``x * 0.5 * 2``)."""
  for form in forms:
    if form == _ANY:
      return True
    a, b = form
    if abs(a - 1) <= 1e-6 and abs(b) <= 1e-6:
      return True
  return False
