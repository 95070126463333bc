"""Constants folded as XLA's simplifier folds them, where this module can
read them.

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

import operator
from collections.abc import Callable
from math import isfinite

from entangle_jax.testing._order.algebra import INTEGER_MAX, element_type_of

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

FOLDABLE = frozenset(
  {"compare", "convert", "not", "negate", "reduce", *_BINARY}
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
