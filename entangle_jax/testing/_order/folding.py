"""What XLA's algebraic simplifier folds to a constant: constants this
module can read (`folded`), comparisons that always give one answer
(`tautology`: a value with itself, an unsigned value or one never negative
against 0), and ops an operand absorbs (`absorbs`: an integer dot with
zeros, a product over a 0), with the combiners of reductions and scatters
they read (`combiner`, `sets`).

A value XLA computes from constants alone is a constant in the optimized
module, and what it decides is decided before any call runs: a ``select``
on it is one of its operands, a ``conditional`` on it runs one branch.
Reading such constants here keeps the check from taking a decision that
XLA folds (``jnp.take``'s bounds test of a constant index) for one that
depends on what the program computes, where only what every outcome
shares would order.

Each value is a Python ``bool``, ``int`` or ``float`` that stands for
every element of an array (a scalar, a broadcast, or a literal whose
elements are all equal: `Leaf.lit`).
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Callable, Sequence
from math import isfinite
from typing import Protocol

from entangle_jax.testing._hlo import Instruction
from entangle_jax.testing._hlo.instruction import (
  scalar_literal,
  uniform_literal,
)
from entangle_jax.testing._order.algebra import (
  INTEGER_MAX,
  Leaf,
  Value,
  as_leaf,
  each,
  element_type_of,
  is_integral,
  plain_int,
)

_COMPARISONS: dict[str, Callable] = {
  "EQ": operator.eq,
  "NE": operator.ne,
  "LT": operator.lt,
  "LE": operator.le,
  "GT": operator.gt,
  "GE": operator.ge,
}

_BINARY: dict[str, Callable] = {
  "add": operator.add,
  "subtract": operator.sub,
  "multiply": operator.mul,
  "and": operator.and_,
  "or": operator.or_,
  "xor": operator.xor,
  "maximum": max,
  "minimum": min,
}

_IDEMPOTENT_REDUCTIONS = frozenset({"and", "or", "maximum", "minimum"})
"""Reductions whose result over equal elements is one of them combined
with the initial value, however many there are."""

_SHIFTS = frozenset(
  {"shift-left", "shift-right-logical", "shift-right-arithmetic"}
)

FOLDABLE = frozenset(
  {
    "clamp",
    "compare",
    "convert",
    "not",
    "negate",
    "reduce",
    *_BINARY,
    *_SHIFTS,
  }
)
"""The opcodes `folded` may fold."""


def folded(
  opcode: str,
  shape: str,
  values: list[object],
  direction: str | None = None,
  reduction: str | None = None,
  elements: int | None = None,
) -> object:
  """The value of `opcode` (of result `shape`) on constant `values`; None
  where it is not folded here.

  Args:
    direction: a ``compare``'s.
    reduction: a ``reduce``'s combiner's root opcode.
    elements: a ``reduce``'s operand's element count.
  """
  if any(v is None or isinstance(v, complex) for v in values):
    return None
  element = element_type_of(shape)
  if opcode == "convert" and len(values) == 1:
    return _converted(values[0], element)
  if any(isinstance(v, float) for v in values):
    return None  # Floats round as f32 or f16 do, which is not read here.
  if opcode == "compare" and len(values) == 2 and direction in _COMPARISONS:
    return bool(_COMPARISONS[direction](values[0], values[1]))
  if opcode in ("not", "negate") and len(values) == 1:
    v = values[0]
    if isinstance(v, bool):
      return (not v) if opcode == "not" else None
    if not isinstance(v, int):
      return None
    return _fits(~v if opcode == "not" else -v, element)
  if opcode in _BINARY and len(values) == 2:
    return _binary(opcode, values[0], values[1], element)
  if opcode == "clamp" and len(values) == 3:
    # ``clamp(low, x, high)``: jax 0.6.2 lowers ``lax.switch``'s index
    # so, and XLA folds it where all three are constants.
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != 3:
      return None
    low, x, high = ints
    return min(max(x, low), high)
  if opcode in _SHIFTS and len(values) == 2:
    return _shifted(opcode, values[0], values[1], element)
  if (
    opcode == "reduce"
    and len(values) == 2
    and reduction in _IDEMPOTENT_REDUCTIONS
    and elements
  ):
    # Each result combines one or more equal elements with the initial
    # value: once is as many times.
    return _binary(reduction, values[0], values[1], element)
  return None


def _binary(opcode: str, a: object, b: object, element: str) -> object:
  if isinstance(a, bool) != isinstance(b, bool):
    return None
  if isinstance(a, bool):
    if opcode not in ("and", "or", "xor", "maximum", "minimum"):
      return None
    return bool(_BINARY[opcode](a, b))
  return _fits(_BINARY[opcode](a, b), element)


def _shifted(opcode: str, value: object, amount: object, element: str):
  """An integer shift as XLA computes it: by an amount out of ``[0,
  bits)`` a left or logical shift gives 0 and an arithmetic one the sign
  (``65536 >> 16`` is 1)."""
  if element not in INTEGER_MAX:
    return None
  if not (isinstance(value, int) and isinstance(amount, int)):
    return None
  if isinstance(value, bool) or isinstance(amount, bool):
    return None
  bits = int(element[1:])
  if opcode == "shift-right-arithmetic":
    signed = value % 2**bits
    signed = signed - 2**bits if signed >= 2 ** (bits - 1) else signed
    if not 0 <= amount < bits:
      return _fits(-1 if signed < 0 else 0, element)
    return _fits(signed >> amount, element)
  if not 0 <= amount < bits:
    return 0
  unsigned = value % 2**bits
  if opcode == "shift-left":
    return _fits(unsigned << amount, element)
  return _fits(unsigned >> amount, element)


def _fits(value: object, element: str) -> object:
  """`value` as an integer of type `element` holds it: wrapped modulo its
  width, as XLA's integers wrap; None where the type is not an integer."""
  largest = INTEGER_MAX.get(element)
  if largest is None or not isinstance(value, int):
    return None
  if element.startswith("u"):
    return value % (largest + 1)
  span = 2 * (largest + 1)
  wrapped = value % span
  return wrapped - span if wrapped > largest else wrapped


def _converted(value: object, element: str) -> object:
  if element == "pred":
    return bool(value)
  if element in INTEGER_MAX and isinstance(value, int):
    return _fits(int(value), element)
  if element in INTEGER_MAX and isinstance(value, float) and isfinite(value):
    # Toward zero where it fits; out of range XLA saturates (or not, by
    # platform): not read here.
    whole = int(value)
    largest = INTEGER_MAX[element]
    smallest = 0 if element.startswith("u") else -largest - 1
    return whole if smallest <= whole <= largest else None
  return None


def typed(value: object, shape: str) -> object:
  """A literal's `value` as its type `shape` holds it: a float type's is
  a float (its text ``200`` is 200.0, which a conversion saturates where
  an integer's wraps), a ``pred``'s a bool, an integer type's an int;
  None where they do not fit."""
  element = element_type_of(shape)
  if value is None or isinstance(value, complex):
    return None
  if element == "pred":
    return value if isinstance(value, bool) else None
  if element in INTEGER_MAX:
    return (
      value if isinstance(value, int) and not isinstance(value, bool) else None
    )
  if element.startswith(("f", "bf")) and isinstance(value, int | float):
    return None if isinstance(value, bool) else float(value)
  return None


def read_constant(
  leaf: Leaf | None, found: Instruction | None
) -> tuple[bool, object]:
  """Whether a value is a constant XLA may fold to, and its value where
  this module can read it (`Leaf.lit`): the evaluation's `leaf` where it
  says so, else the instruction `found` itself (a ``constant``'s literal;
  an ``iota``, a constant not read here), as in a computation that the
  evaluation did not reach this way."""
  if leaf is not None and leaf.const:
    return True, leaf.lit
  if found is not None and found.opcode == "constant":
    return True, typed(uniform_literal(found.literal), found.shape)
  if found is not None and found.opcode == "iota":
    return True, None
  return False, None


_MOST_ELEMENTS = 64
"""Array literals of more elements are not read element by element."""


def literal_values(found: Instruction | None) -> tuple | None:
  """Every element of ``constant`` `found` (``{1, 2}`` is ``(1, 2)``),
  typed; None where it is no constant, or one of more than
  `_MOST_ELEMENTS` elements or of an element not read here."""
  if found is None or found.opcode != "constant" or found.literal is None:
    return None
  words = [w for w in _SEPARATORS.split(found.literal) if w]
  if not words or len(words) > _MOST_ELEMENTS:
    return None
  values = tuple(typed(scalar_literal(w), found.shape) for w in words)
  return None if any(v is None for v in values) else values


_SEPARATORS = re.compile(r"[{},\s]+")


UNSIGNED_MAX = {k: v for k, v in INTEGER_MAX.items() if k.startswith("u")}


def tautology(
  direction: str | None,
  element: str,
  operands: list,
  never_negative: tuple[bool, bool] = (False, False),
) -> bool:
  """Whether a comparison is a constant that XLA's simplifier may fold:
  one value with itself (on integers, ``w == w`` is true, ``w < w``
  false), an unsigned value against 0 or its type's largest value
  (``u >= 0``, ``u < 0``, ``u <= MAX``), or a value XLA may know
  `never_negative` (each operand's, `never_negative.NeverNegative`)
  against 0 (``abs(x) < 0``), a constant that cannot be read here taken
  as possibly one of those."""
  a, b = (as_leaf(o) for o in operands)
  integral = element in INTEGER_MAX or element == "pred"
  if integral and a.key is not None and a.key == b.key:
    return True
  if direction is not None and _never_negative_against_zero(
    direction, (a, b), never_negative
  ):
    return True
  largest = UNSIGNED_MAX.get(element)
  if largest is None or direction is None:
    return False
  # The comparison as "u DIRECTION bound", the bound on the right.
  mirror = {"GE": "LE", "LE": "GE", "GT": "LT", "LT": "GT"}
  if b.const and not a.const:
    bound, way = b, direction
  elif a.const and not b.const:
    bound, way = a, mirror.get(direction, direction)
  else:
    return False
  lit = bound.lit
  at_zero = lit is None or (plain_int(lit) and lit == 0)
  at_max = lit is None or (plain_int(lit) and lit == largest)
  return (way in ("GE", "LT") and at_zero) or (way in ("LE", "GT") and at_max)


def may_be_zero(leaf: Leaf) -> bool:
  """Whether `leaf` is a constant that may be 0 (one not read here may)."""
  return leaf.const and (leaf.lit is None or leaf.lit == 0)


def _never_negative_against_zero(
  direction: str, leaves: tuple[Leaf, Leaf], never_negative: tuple[bool, bool]
) -> bool:
  """Whether a comparison is one of a value XLA may know never negative
  with 0 (``abs(x) < 0``, ``x * x >= 0``, either way round), a constant
  that cannot be read here taken as possibly 0: XLA folds it to a
  constant (it may even where the value is NaN)."""
  mirror = {"GE": "LE", "LE": "GE", "GT": "LT", "LT": "GT"}
  (a, b), (a_never, b_never) = leaves, never_negative
  for never, bound, way in (
    (a_never, b, direction),
    (b_never, a, mirror.get(direction)),
  ):
    if never and may_be_zero(bound) and way in ("LT", "GE"):
      return True
  return False


def absorbs(
  opcode: str, shape: str, operands: list[Value], combiner: str | None
) -> bool:
  """Whether XLA may fold an op (`opcode`, result `shape`) to a constant
  whatever its other operands: an integer ``dot`` or ``convolution`` of an
  operand that may be all zeros, or a reduction whose `combiner` absorbs
  (a product, an ``and``, an ``or``) over an initial value or an element
  that may absorb."""
  if (
    opcode in ("dot", "convolution")
    and len(operands) == 2
    and is_integral(shape)
  ):
    # An integer 1x1 convolution is a dot for XLA (skeptic pass 76f).
    return any(_may_be(as_leaf(o), (0,)) for o in operands)
  if opcode != "reduce" or len(operands) != 2:
    return False
  absorbing = _ABSORBED_BY.get(combiner or "")
  if absorbing is None:
    return False
  if combiner == "multiply" and not is_integral(shape):
    return False  # A float product keeps NaN: XLA keeps it.
  data, start = (as_leaf(o) for o in operands)
  elements = data.parts if data.parts is not None else (data,)
  return any(_may_be(each(x), absorbing) for x in (*elements, start))


_ABSORBED_BY = {"multiply": (0,), "and": (False, 0), "or": (True, -1)}
"""A combiner's absorbing values: a reduction over one of them is it."""


def _may_be(leaf: Leaf, values: tuple) -> bool:
  """Whether `leaf` is a constant that may be one of `values` (one this
  module cannot read may be)."""
  if not leaf.const:
    return False
  return leaf.lit is None or any(
    leaf.lit == v and isinstance(leaf.lit, bool) == isinstance(v, bool)
    for v in values
  )


def sets(body: Sequence[Instruction]) -> bool:
  """Whether a scatter's combiner, the computation `body`, returns the
  update (a set, not an add or a maximum)."""
  roots = [c for c in body if c.root]
  return (
    len(roots) == 1
    and roots[0].opcode == "parameter"
    and roots[0].parameter_number == 1
  )


def combiner(body: Sequence[Instruction]) -> str | None:
  """The opcode of a reduction's combiner, the computation `body`, where
  it is that one op on its two parameters (``add(x, y)``); None for any
  other (``max(min(x, y), min(x, y))`` is no maximum)."""
  roots = [c for c in body if c.root]
  parameters = {c.name for c in body if c.opcode == "parameter"}
  if len(roots) != 1 or len(parameters) != 2 or len(body) != 3:
    return None
  root = roots[0]
  if set(root.operands) != parameters or len(root.operands) != 2:
    return None
  return root.opcode


KEEP_VALUES = frozenset(
  {"reshape", "broadcast", "transpose", "reverse", "copy", "bitcast"}
)
"""Opcodes whose result's values are their operand's, rearranged."""


def product_wraps_to_zero(
  i: Instruction,
  leaf_of: Callable[[str], Leaf],
  index: ModuleLookups,
) -> bool:
  """Whether integer product `i` is a product of products, such as ``(A *
  C1) * C2``, whose constant factors multiply to 0 in its type's wrapping
  arithmetic (``65536 * 65536`` in ``s32``): XLA's simplifier reassociates
  the constants together, ``A * (C1 * C2)``, folds them to 0 and the
  product with it. An integer sum of a broadcast is a product too (``x *
  N`` for N copies: 256 copies of an ``s8`` sum to 0), and `i` may be
  one. A constant not read here may make it so. `leaf_of` gives an
  operand's value, `index` the module's instructions."""
  element = element_type_of(i.shape)
  if element not in INTEGER_MAX:
    return False
  factors: list[object] = []
  pending: list[Instruction] = []

  def constant(name: str) -> tuple[bool, object]:
    # The instruction where the evaluation has not reached it (in a
    # helper's computation, say).
    is_constant, value = read_constant(leaf_of(name), index.named(name))
    if is_constant and value is None:
      # An array literal: its elements (a product by ``[1, 2]`` and 3 is
      # by 3 and 6, none 0).
      return True, constant_elements(name, index) or None
    return is_constant, value

  def visit(name: str) -> None:
    inner = index.named(name)
    # Through ops that keep each value (XLA moves a reshape or a broadcast
    # out of the way of the reassociation), and into a call (XLA inlines
    # a jitted helper first).
    while inner is not None and not constant(name)[0]:
      if inner.opcode in KEEP_VALUES and inner.operands:
        name = inner.operands[0]
      elif inner.opcode == "call" and inner.callees:
        roots = index.roots(inner.callees[0])
        if not roots:
          break
        name = roots[0]
      elif (passed := _passed_once(inner, index)) is not None:
        # A helper's parameter, where one place calls it: what it is
        # passed (``h(w * 65536, 65536)`` with ``h(x, c) = x * c``).
        name = passed
      else:
        break
      inner = index.named(name)
    is_constant, value = constant(name)
    if is_constant:
      factors.append(value)
    elif inner is not None and inner.opcode == "multiply":
      pending.append(inner)
    elif inner is not None and (copies := _copies_summed(inner, index)):
      factors.append(copies[0])
      visit(copies[1])

  if i.opcode == "reduce":
    copies = _copies_summed(i, index)
    if copies is None:
      return False
    factors.append(copies[0])
    visit(copies[1])
  elif i.opcode == "dot":
    # A dot of two vectors is a sum of products for XLA: of copies of one
    # value, a product with their count.
    for copied, other in (i.operands, tuple(reversed(i.operands))):
      found = index.named(copied)
      whole = index.dims_of(copied)
      if (
        found is not None
        and found.opcode == "broadcast"
        and whole is not None
        and len(whole) == 1
        and index.dims_of(found.operands[0]) == ()
        and constant(other)[0]
      ):
        factors += [whole[0], constant(other)[1]]
        visit(found.operands[0])
        break
    else:
      return False
  else:
    pending.append(i)
  while pending:
    for name in pending.pop().operands:
      visit(name)
  if not factors:
    return False
  return _may_multiply_to_zero(factors, 2 ** int(element[1:]))


def _passed_once(parameter: Instruction, index: ModuleLookups) -> str | None:
  """What the one ``call`` of `parameter`'s computation passes to it;
  None where it is no parameter, or its computation is called at no
  place or at several (a loop body's, a helper's of several places)."""
  if parameter.opcode != "parameter" or parameter.computation is None:
    return None
  callers = index.callers_of(parameter.computation)
  number = parameter.parameter_number
  if len(callers) != 1 or number is None:
    return None
  operands = callers[0].operands
  return operands[number] if number < len(operands) else None


def _may_multiply_to_zero(factors: list[object], modulus: int) -> bool:
  """Whether constant `factors` (a value, or a tuple of an array's
  elements; None where not read) may multiply to all zeros modulo
  `modulus`: unless every choice of one element from each gives a product
  that is not 0 (each element of the product is one such choice)."""
  choices: list[tuple[int, ...]] = []
  for factor in factors:
    values = factor if isinstance(factor, tuple) else (factor,)
    read = {v % modulus for v in values if isinstance(v, int)}
    if not all(plain_int(v) for v in values):
      return True  # Not read here: it may be 0.
    choices.append(tuple(read))
  if math.prod(len(c) for c in choices) > 4096:
    return True
  return any(
    math.prod(picked) % modulus == 0 for picked in itertools.product(*choices)
  )


def constant_elements(name: str, index: ModuleLookups) -> tuple | None:
  """The elements of the constant that `name` is, through ops that keep
  values (a broadcast, a reshape); None where not read."""
  found = index.named(name)
  while found is not None and found.opcode in KEEP_VALUES and found.operands:
    found = index.named(found.operands[0])
  return literal_values(found)


class ModuleLookups(Protocol):
  """What `product_wraps_to_zero` looks up in the module
  (`module_index.ModuleIndex`)."""

  def named(self, name: str) -> Instruction | None: ...
  def callers_of(self, computation: str) -> list[Instruction]: ...
  def roots(self, computation: str) -> list[str]: ...
  def dims_of(self, name: str) -> tuple[int, ...] | None: ...
  def computation(self, name: str) -> Sequence[Instruction]: ...


def _copies_summed(
  i: Instruction, index: ModuleLookups
) -> tuple[int, str] | None:
  """Where integer reduction `i` sums copies of one value (a ``reduce``
  with ``add`` from 0 over a ``broadcast``, reshaped or not): how many
  copies each result sums, and the value copied; None otherwise."""
  if i.opcode != "reduce" or len(i.operands) != 2 or not i.callees:
    return None
  if combiner(list(index.computation(i.callees[0]))) != "add":
    return None
  start = index.named(i.operands[1])
  zero = start is not None and start.opcode == "constant"
  if not zero or typed(uniform_literal(start.literal), start.shape) != 0:  # type: ignore[union-attr]
    return None
  reduced, whole = i.dimensions, index.dims_of(i.operands[0])
  if reduced is None or whole is None:
    return None
  name = i.operands[0]
  found = index.named(name)
  reshaped = False
  while found is not None and found.opcode in KEEP_VALUES - {"broadcast"}:
    reshaped = reshaped or found.opcode != "copy"
    name = found.operands[0]
    found = index.named(name)
  if found is None or found.opcode != "broadcast" or not found.operands:
    return None
  copied = index.dims_of(found.operands[0])
  if copied is None:
    return None
  if sorted(reduced) == list(range(len(whole))):
    # Every element: each copy of the value's elements, summed.
    return math.prod(whole) // max(math.prod(copied), 1), found.operands[0]
  if reshaped or found.dimensions is None:
    return None
  added = [d for d in reduced if d not in found.dimensions]
  if len(added) != len(reduced):
    return None  # It also sums the value's own elements.
  return math.prod(whole[d] for d in added), found.operands[0]
