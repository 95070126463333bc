"""What each value of a program is computed from: the algebra that
`may_order.MayOrder` evaluates a module with.

A value is a `Leaf` per array: the calls its elements are computed from
through edges that no compiler may fold away, the loops over which it may
change, and what tells a constant, a loop counter or a value number. Each
function here is one rule of that algebra (how an opcode, a loop's state or
a conditional's branches combine leaves), so that the evaluator only walks
the program and picks the rule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Sequence

from entangle_jax.testing._hlo import Instruction
from entangle_jax.testing._hlo.instruction import picked_branch


@dataclasses.dataclass(frozen=True)
class Leaf:
  """What one array of a value is computed from."""

  deps: int = 0
  """Bits of the selected call instances whose results reach it through
  edges that no compiler may fold away."""
  var: int = 0
  """Bits of the loops (`MayOrder.loops`) over whose iterations it may
  change."""
  const: bool = False
  """Computed from constants alone: XLA may fold it to its value."""
  lit: object = None
  """Its value, where it is a constant this module can read (a scalar, or
  a broadcast of one); None otherwise."""
  origin: tuple | None = None
  """A loop state element it is unchanged (``("state", loop, path)``),
  that element plus a constant (``("step", loop, path, step)``), or a
  comparison of such an element with a constant (``("compare", ...)``):
  what tells a loop's trip count and the elements its body hands back."""
  key: tuple | None = None
  """A value number: two leaves of equal keys hold the same value (what
  lets ``select(p, x, x)`` or ``maximum(x, x)`` be ``x``, as XLA folds
  them); None where unknown."""
  parts: tuple | None = None
  """None where every element is computed from all that `deps` and `var`
  say. Otherwise the elements differ (a ``concatenate``, an update, an
  elementwise op on such a value): each element is one of these leaves'
  elements, so one element alone, which a slice may take (XLA folds a
  slice of a concatenate or of a broadcast to the part it takes), is
  surely computed only from what `each` gives."""
  layout: tuple | None = None
  """Which of `parts` each element belongs to, by its index in row-major
  order (which a reshape keeps), where the program says so:

  * ``("joined", inner, sizes, count)`` for a ``concatenate`` of the
    parts in order: ``inner`` elements per step of the joined dimension,
    the ``sizes`` the parts have along it;
  * ``("cells", cells, count)`` for an update of the elements ``cells``
    (a frozenset of indices): part 1 holds them, part 0 the others.

  ``count`` is the number of elements. None where no slice can tell the
  part it takes."""


_new = object.__new__


_set = object.__setattr__


def new_leaf(
  deps: int = 0,
  var: int = 0,
  const: bool = False,
  lit: object = None,
  origin: tuple | None = None,
  key: tuple | None = None,
  parts: tuple | None = None,
  layout: tuple | None = None,
) -> Leaf:
  """``Leaf(...)``, built without the frozen dataclass's ``__init__``,
  which sets each field through ``object.__setattr__``: the evaluation
  makes a leaf or more per instruction and pass, and that took a third
  of its time."""
  leaf = _new(Leaf)
  _set(
    leaf,
    "__dict__",
    {
      "deps": deps,
      "var": var,
      "const": const,
      "lit": lit,
      "origin": origin,
      "key": key,
      "parts": parts,
      "layout": layout,
    },
  )
  return leaf


def replace(leaf: Leaf, **changes: object) -> Leaf:
  """``dataclasses.replace(leaf, **changes)``, as fast as `new_leaf`."""
  fields = dict(leaf.__dict__)
  fields.update(changes)
  found = _new(Leaf)
  _set(found, "__dict__", fields)
  return found


Value = Leaf | tuple
"""A `Leaf`, or a tuple of values for a tuple-shaped result."""


NOTHING = Leaf()


IDEMPOTENT = frozenset({"maximum", "minimum", "and", "or"})
"""Opcodes ``f`` with ``f(x, x) == x``, which XLA folds so."""


SLICING = frozenset({"slice"})
"""Opcodes whose result is some elements of their operand, which
`sliced` tells (a dynamic slice and a gather are `DATA_OPERANDS`)."""


INTEGER_MAX = {
  "s2": 2**1 - 1,
  "s4": 2**3 - 1,
  "s8": 2**7 - 1,
  "s16": 2**15 - 1,
  "s32": 2**31 - 1,
  "s64": 2**63 - 1,
  "u2": 2**2 - 1,
  "u4": 2**4 - 1,
  "u8": 2**8 - 1,
  "u16": 2**16 - 1,
  "u32": 2**32 - 1,
  "u64": 2**64 - 1,
}
"""The largest value of each integer type: a counter stepped past it
wraps, and the trip count the constants give is then wrong."""


CANCELLING = frozenset(
  {
    "add",
    "subtract",
    "multiply",
    "divide",
    "remainder",
    "power",
    "and",
    "or",
    "xor",
    "maximum",
    "minimum",
    "shift-left",
    "shift-right-logical",
    "shift-right-arithmetic",
    "atan2",
    "compare",
  }
)
"""Binary opcodes whose two operands may cancel on integers (``w - w``,
``w ^ w``, ``max(w, w) - w``, ``w == w``): what both are computed from
may not reach the result, and XLA's algebraic simplifier folds many such
forms to a constant."""


DATA_OPERANDS = {
  "dynamic-slice": lambda n: range(1),
  "gather": lambda n: range(1),
  "dynamic-update-slice": lambda n: range(2),
  # Inputs, the indices, then as many updates as inputs.
  "scatter": lambda n: [k for k in range(n) if k != (n - 1) // 2],
}
"""Which operands of an indexed op carry data to its result; the others
are indices, which order nothing: XLA drops an index that cannot change
the result (a slice as large as its operand, a slice of a broadcast), and
so may a later XLA wherever it proves that."""


FORWARDING = frozenset({"copy", "bitcast", "reshape", "opt-barrier"})
"""Opcodes whose result is their operand, unchanged."""


REARRANGING = frozenset({"reverse", "transpose"})
"""Opcodes whose result holds their operand's elements in another order:
XLA folds a slice of one into a slice of the operand."""


NEVER_SPECULATED = frozenset(
  {"send", "recv", "infeed", "outfeed", "rng", "rng-get-and-update-state"}
)
"""Opcodes besides side-effecting custom calls whose results change from
one iteration to the next whatever their operands."""


def as_leaf(value: Value) -> Leaf:
  """`value` as one leaf: itself, or every leaf of a tuple joined."""
  return value if isinstance(value, Leaf) else join([value])


def keyed(value: Value, key: tuple) -> Value:
  """`value` with each leaf numbered by `key` and its path."""
  if isinstance(value, Leaf):
    return replace(value, key=key)
  return tuple(keyed(v, (*key, k)) for k, v in enumerate(value))


def key_of(i: Instruction, operands: list[Value]) -> tuple | None:
  """The value number of a result computed by `i` from `operands`; None
  where an operand has none."""
  keys = []
  for operand in operands:
    if not isinstance(operand, Leaf) or operand.key is None:
      return None
    keys.append(operand.key)
  return (
    i.opcode,
    i.shape,
    i.direction,
    i.tuple_index,
    i.dimensions,
    i.slice_ranges,
    i.scatter_dims,
    *keys,
  )


def common(parts: tuple) -> Leaf:
  """What any one element of any of `parts` is surely computed from: a
  slice may take one element of one of them alone. It may be a constant
  where any part's elements may."""
  deps = var = -1
  const = False
  for part in parts:
    one = each(part)
    deps &= one.deps
    var &= one.var
    const = const or one.const
  return new_leaf(max(deps, 0), max(var, 0), const)


def each(leaf: Leaf) -> Leaf:
  """What any one element of `leaf` is surely computed from: `leaf`
  itself where its elements are alike (no `Leaf.parts`)."""
  return leaf if leaf.parts is None else common(leaf.parts)


def without(leaf: Leaf, deps: int, var: int) -> Leaf:
  """`leaf` less `deps` and `var`, as a whole and in each element."""
  if leaf.parts is None:
    return replace(leaf, deps=leaf.deps & ~deps, var=leaf.var & ~var)
  one = each(leaf)
  inner = new_leaf(one.deps & ~deps, one.var & ~var, one.const)
  return replace(
    leaf,
    deps=leaf.deps & ~deps,
    var=leaf.var & ~var,
    parts=(inner,),
    layout=None,
  )


def opaque(leaf: Leaf) -> Leaf:
  """The result of a call that XLA cannot see into: each element comes
  after the whole of every operand."""
  if leaf.parts is None:
    return leaf
  return replace(leaf, parts=None, layout=None)


def bits(indices: tuple[int, ...]) -> int:
  found = 0
  for index in indices:
    found |= 1 << index
  return found


def leaves_of(value: Value):
  if isinstance(value, Leaf):
    yield value
  else:
    for element in value:
      yield from leaves_of(element)


def deps_of(value: Value) -> int:
  found = 0
  for leaf in leaves_of(value):
    found |= leaf.deps
  return found


def join(values: Sequence[Value]) -> Leaf:
  """One leaf computed from every leaf of `values`: as a whole, from all
  of them; element by element, from what one element of each surely is
  (an elementwise op, a reduction or a product reads at least one element
  of each operand for each of its elements)."""
  deps = var = 0
  const = True
  differ = False
  for value in values:
    # A leaf itself, the usual operand, without `leaves_of`' generator.
    for leaf in (value,) if isinstance(value, Leaf) else leaves_of(value):
      deps |= leaf.deps
      var |= leaf.var
      const = const and leaf.const
      differ = differ or leaf.parts is not None
  if not differ:
    return new_leaf(deps, var, const)
  each_deps = each_var = 0
  each_const = True
  for value in values:
    for leaf in leaves_of(value):
      one = each(leaf)
      each_deps |= one.deps
      each_var |= one.var
      each_const = each_const and one.const
  inner = new_leaf(each_deps, each_var, each_const)
  return new_leaf(deps, var, const, parts=(inner,))


def shaped(shape: str, leaf: Leaf) -> Value:
  """`leaf` in the structure of an HLO shape (``(f32[], (s32[]))``)."""
  arity = tuple_arity(shape)
  if arity is None:
    return leaf
  return tuple(shaped(element, leaf) for element in arity)


@functools.lru_cache(maxsize=4096)
def tuple_arity(shape: str) -> tuple[str, ...] | None:
  """The element shapes of a tuple shape; None for an array."""
  shape = shape.strip()
  if not shape.startswith("("):
    return None
  elements, depth, start = [], 0, 1
  for n, char in enumerate(shape):
    if char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
      if depth == 0:
        if shape[start:n].strip():
          elements.append(shape[start:n])
        break
    elif char == "," and depth == 1:
      elements.append(shape[start:n])
      start = n + 1
  return tuple(elements)


def unchanged_constant(value: Value, i: Instruction) -> Value:
  """A broadcast or conversion of `value`: the same dependences; a
  broadcast of a constant keeps its value (``broadcast(constant(true))``;
  a conversion that `folding` reads comes before this), a state element
  no longer is itself."""
  leaf = as_leaf(value)
  key = None if leaf.key is None else (i.opcode, i.shape, leaf.key)
  lit = leaf.lit if i.opcode == "broadcast" else None
  return replace(leaf, origin=None, key=key, layout=None, lit=lit)


def select(
  predicate: Value, yes: Value, no: Value, taken: frozenset[int] = frozenset()
) -> Value:
  """``select(predicate, yes, no)``, element by element; `taken`: the
  values the predicate surely takes (1 for true; `index_values`), given
  only where no compiler may prove the branches equal (`MayOrder`'s
  `_differ`: one is computed from a call that nothing in the other may
  be merged with, or they are constants of two values).

  A constant predicate this module can read picks its branch. Any other
  predicate orders nothing by itself: XLA folds a select whose branches it
  proves equal to either branch (``where(p, s, -(-s))``, ``where(p, s, s
  // 1)``, ``where(p, s, broadcast(s)[1])``, two identical reads merged),
  and which equalities a compiler proves is its own; and one whose
  predicate its range analysis proves constant to that branch. So the
  result is surely computed only from what both branches share, and,
  where one is a loop's state element as the body had it, the body may
  hand it back unchanged.

  Where the branches surely differ, the select is folded only to a branch
  its predicate may be constant at: a predicate that surely takes true
  cannot be folded to false, and one that takes both values cannot be
  folded at all, so the result is then computed from it and both
  branches (``jnp.take``'s ``select(in_bounds, gathered, fill)``,
  ``where(w < 1000, w, s)``)."""
  choice = as_leaf(predicate)
  a, b = as_leaf(yes), as_leaf(no)
  if a.key is not None and a.key == b.key:
    return yes  # XLA folds select(p, x, x) to x.
  if choice.const and isinstance(choice.lit, bool):
    return yes if choice.lit else no
  origin = a.origin if a.origin == b.origin else _maybe(a, b)
  const = a.const and b.const
  if a.parts is None and b.parts is None:
    deps = a.deps & b.deps
    if taken:
      if taken == {0, 1}:
        deps = choice.deps | a.deps | b.deps
      else:
        deps = a.deps if 1 in taken else b.deps
    return Leaf(deps, a.var & b.var, const, origin=origin)
  # Element by element, the predicate may pick either: all of one, or
  # some elements of each, so the whole is surely computed only from
  # what both share and some element of either has.
  one, other = each(a), each(b)
  return new_leaf(
    a.deps & b.deps & (one.deps | other.deps),
    a.var & b.var & (one.var | other.var),
    const,
    origin=origin,
    parts=(common((one, other)),),
  )


def distinct_constants(a: Leaf, b: Leaf) -> bool:
  """Whether `a` and `b` are constants this module reads, of two values
  (which no compiler may prove equal)."""
  return (
    a.const
    and b.const
    and a.lit is not None
    and b.lit is not None
    and type(a.lit) is type(b.lit)
    and a.lit != b.lit
  )


ABSORBING = {
  # opcode: the operands that may absorb, and whether a value does
  "multiply": ((0, 1), lambda v: v == 0),
  "and": ((0, 1), lambda v: v is False or (plain_int(v) and v == 0)),
  "or": ((0, 1), lambda v: v is True or (plain_int(v) and v == -1)),
  "remainder": ((1,), lambda v: plain_int(v) and v in (1, -1)),
  "power": ((1,), lambda v: v == 0),
}
"""Binary opcodes with an operand value that makes the result a constant
whatever the other operand (``x * 0``, ``x & false``, ``x | -1``, ``x %
1``, ``x ** 0``), as XLA's algebraic simplifier folds them. A constant
this module cannot read may be that value."""


def plain_int(value: object) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


@functools.lru_cache(maxsize=4096)
def element_type_of(shape: str) -> str:
  """The element type of an array shape (``s32`` of ``s32[2]{0}``)."""
  return shape.split("[", 1)[0].strip()


def is_integral(shape: str) -> bool:
  element = element_type_of(shape)
  return element in INTEGER_MAX or element == "pred"


def cancelled(
  opcode: str, shape: str, operands: list[Value], result: Leaf
) -> Leaf:
  """`result` of a binary op less what both operands are computed from,
  where the two may cancel: on integers (``w - w`` is 0, ``w ^ w`` too),
  and in a comparison (``w == w`` is true). A float ``x - x`` is kept, as
  XLA keeps it (``inf - inf`` is ``nan``); so is ``w + w`` and ``w * w``
  of one value, which vary with it."""
  if opcode != "compare" and not is_integral(shape):
    return result
  a, b = (as_leaf(o) for o in operands)
  same = a.key is not None and a.key == b.key
  if opcode in ("add", "multiply") and same:
    return result
  if opcode in ("subtract", "xor") and same:
    # XLA folds ``A - A`` and ``A ^ A`` of integers to 0: a constant, whose
    # elements are alike (a scan over ``full(3, s) - s`` takes 0 in every
    # iteration; skeptic pass 76g).
    zero = False if element_type_of(shape) == "pred" else 0
    text = "false" if zero is False else "0"
    return new_leaf(const=True, lit=zero, key=("c", text, shape))
  common_deps, common_var = a.deps & b.deps, a.var & b.var
  if not common_deps and not common_var:
    return result
  return without(result, common_deps, common_var)


def may_be_equal_constants(low: Leaf, high: Leaf) -> bool:
  """Whether a clamp's bounds are constants that may be equal, so that
  the clamp is that constant."""
  if not (low.const and high.const):
    return False
  return low.lit is None or high.lit is None or low.lit == high.lit


def absorbed(
  opcode: str,
  operands: list[Value],
  shape: str,
  elements: Sequence[tuple | None] = (),
) -> Leaf | None:
  """The constant that `ABSORBING` makes a binary op (XLA's algebraic
  simplifier folds it); None otherwise. A floating-point product or
  remainder is never folded: XLA keeps ``x * 0`` for floats, whose ``nan *
  0`` is ``nan`` (it folds them only under fast math, off in JAX), so the
  documented ``token * 0`` stays an order. `elements`: each operand's
  elements where it is an array literal read here: one of which none
  absorbs does not (``x * [1, 2]`` stays; of ``x * [0, 1]``, a slice may
  take the 0)."""
  if opcode in ("multiply", "remainder") and not is_integral(shape):
    return None
  positions, absorbs = ABSORBING[opcode]
  for position in positions:
    leaf = as_leaf(operands[position])
    read = elements[position] if position < len(elements) else None
    if (
      leaf.const
      and leaf.lit is None
      and read is not None
      and not any(absorbs(v) for v in read)
    ):
      continue
    if leaf.const and (leaf.lit is None or absorbs(leaf.lit)):
      if leaf.lit is None:
        return Leaf(const=True)
      return Leaf(
        const=True, lit={"remainder": 0, "power": 1}.get(opcode, leaf.lit)
      )
  return None


def add(operands: list[Value], shape: str) -> Leaf:
  a, b = as_leaf(operands[0]), as_leaf(operands[1])
  joined = join([a, b])
  limit = INTEGER_MAX.get(element_type_of(shape))
  for x, y in ((a, b), (b, a)):
    if (
      x.origin is not None
      and x.origin[0] == "state"
      and y.const
      and isinstance(y.lit, int)
      and not isinstance(y.lit, bool)
    ):
      origin = ("step", *x.origin[1:], y.lit, limit)
      return replace(joined, origin=origin)
  return joined


def compare(direction: str | None, operands: list[Value]) -> Leaf:
  a, b = (as_leaf(o) for o in operands)
  joined = join([a, b])
  if direction in ("LT", "LE") and b.const and isinstance(b.lit, int):
    limit = b.lit + (direction == "LE")
    if a.origin is not None and a.origin[0] == "state":
      return replace(joined, origin=("below", *a.origin[1:], limit))
  return joined


def _maybe(a: Leaf, b: Leaf) -> tuple | None:
  """``("maybe", loop, path)`` where `a` or `b` is a loop's state element
  as its body had it; None otherwise."""
  for leaf in (a, b):
    origin = leaf.origin
    if origin is not None and origin[0] in ("state", "maybe"):
      return ("maybe", *origin[1:])
  return None


def branch_picked(decision: Leaf, branches: int) -> int | None:
  """The branch a constant predicate or index picks; None where it is not
  a constant this module can read."""
  if not decision.const:
    return None
  return picked_branch(decision.lit, branches)


def bitcast(leaf: Leaf, source: str, shape: str) -> Leaf:
  """A bitcast-convert of `leaf` (of shape `source`) to `shape`: the same
  dependences, and the value number of the value it came from where it
  converts back (XLA folds ``bitcast(bitcast(w))`` to ``w``)."""
  key = leaf.key
  if key is not None and key[:1] == ("bitcast-convert",) and key[1] == shape:
    return replace(leaf, key=key[2], origin=None, layout=None, lit=None)
  number = None if key is None else ("bitcast-convert", source, key)
  return replace(leaf, key=number, origin=None, layout=None, lit=None)


def met(results: list[Value], decision: Leaf, inside: int) -> Value:
  """A conditional's result from its branches' `results`, one of which
  runs: element by element, what every branch's is computed from, plus
  the `decision`'s dependences and those of the calls `inside` its
  branches that reach some branch's result."""
  first = results[0]
  if isinstance(first, tuple) and all(
    isinstance(r, tuple) and len(r) == len(first) for r in results
  ):
    return tuple(
      met([r[k] for r in results if isinstance(r, tuple)], decision, inside)
      for k in range(len(first))
    )
  leaves = [as_leaf(r) for r in results]
  whole = _met_leaves(leaves, decision, inside)
  if all(leaf.parts is None for leaf in leaves):
    return whole
  inner = _met_leaves([each(leaf) for leaf in leaves], decision, inside)
  return replace(whole, parts=(inner,))


def _met_leaves(leaves: list[Leaf], decision: Leaf, inside: int) -> Leaf:
  every = -1
  some, var, const = 0, decision.var, decision.const
  for leaf in leaves:
    every &= leaf.deps
    some |= leaf.deps
    var |= leaf.var
    const = const and leaf.const
  deps = max(every, 0) | decision.deps | some & inside
  return Leaf(deps, var, const)


def varying(leaf: Leaf, var: int) -> Leaf:
  """`leaf` changing, in each element too, over the loops of `var`."""
  if not var:
    return leaf
  if leaf.parts is None:
    return replace(leaf, var=leaf.var | var)
  one = each(leaf)
  inner = new_leaf(one.deps, one.var | var, one.const)
  return replace(leaf, var=leaf.var | var, parts=(inner,), layout=None)


_DEEP_VALUES = 20_000
"""The recursion limit while the evaluation runs: a value number nests as
deep as the chain of ops that computed it, and comparing two of a chain
of 600 ops (a checksum unrolled in Python) passed Python 3.11's default
of 1,000 (skeptic pass 76f)."""


@contextlib.contextmanager
def deep_values():
  """Raises the recursion limit to `_DEEP_VALUES` while it runs."""
  before = sys.getrecursionlimit()
  sys.setrecursionlimit(max(before, _DEEP_VALUES))
  try:
    yield
  finally:
    sys.setrecursionlimit(before)
