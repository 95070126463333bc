"""The order no compiler may break: decided from the program, for every XLA.

The module before optimization is the program. XLA's optimizer may change
each call that nothing marks side-effecting, and the next jaxlib may do
more of it than this one did:

* move it out of a loop when its operands do not change in the loop
  (loop-invariant code motion): it then runs once, before the loop;
* merge it with an identical call on the same operands (CSE): it then
  runs where that one runs, earlier or later;
* delete it when nothing uses its results (DCE).

Inlining a ``call`` (a jitted helper, a ``custom_vjp``, a checkpoint) comes
first, so a computation called at two places is two calls, one per place.

What survives every such change is data: a call that has no side effect
runs after the values its operands are computed from, and before the
calls that consume its results; nothing else holds it in place. So a pair
is ordered here only when one call's operands are computed from the
other's results, through edges that no compiler folds away:

* ``optimization_barrier`` passes each operand on to its own result and
  orders nothing else (XLA:CPU expands it away);
* a ``select`` on a constant predicate is the branch it picks (or, where
  the constant cannot be read here, only what both branches share);
* an integer product with a constant that may be zero, an ``and`` with
  ``false`` and an ``or`` with ``true`` are constants (a floating-point
  product with zero is not: XLA keeps it, since ``nan * 0`` is ``nan``,
  unless fast math is switched on, which JAX leaves off);
* an index (of a dynamic slice, gather, dynamic update or scatter) and a
  sort's keys order nothing: XLA drops an index that cannot change the
  result, and the sort of one element;
* an integer operation or a comparison keeps nothing that both its
  operands are computed from (``w - w``, ``max(w, w) - w``, ``w == w``
  cancel), and ``x % 1``, ``x ** 0`` and a clamp to one constant are
  constants;
* a loop's state element is what its initial value and the body's results
  for it are; one the body hands back unchanged is its initial value;
* a ``conditional`` with a constant predicate runs the branch it picks
  only: the other branches' calls never run.

A call that has a side effect is never moved, merged or deleted. It runs,
besides, after the predicates that decide whether it runs (a conditional's,
a loop's condition), and the iterations of a loop run in turn: iteration
``k + 1``'s calls run after iteration ``k``'s, except a call without side
effect whose operands do not change in the loop, where the loop may run
twice or more (a loop that runs once has no earlier iteration).

`MayOrder` evaluates the program once per call site (each computation in
the context of the chain of instructions that runs it), as sets of the
calls each value is computed from, as bits. Loops are evaluated to a fixed
point of their state, all loops at once: a pass over the whole program,
repeated until no loop's state grows (about as many passes as loops are
nested).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing._hlo import Instruction, Module
from entangle_jax.testing._hlo.attributes import Stack


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
  """For a ``concatenate``: its operands' leaves, of which a slice may
  take only one (XLA folds a slice of a concatenate to the part it
  takes)."""


_new = object.__new__
_set = object.__setattr__


def _new_leaf(
  deps: int = 0,
  var: int = 0,
  const: bool = False,
  lit: object = None,
  origin: tuple | None = None,
  key: tuple | None = None,
  parts: tuple | None = None,
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
    },
  )
  return leaf


def _replace(leaf: Leaf, **changes: object) -> Leaf:
  """``dataclasses.replace(leaf, **changes)``, as fast as `_new_leaf`."""
  fields = dict(leaf.__dict__)
  fields.update(changes)
  found = _new(Leaf)
  _set(found, "__dict__", fields)
  return found


Value = Leaf | tuple
"""A `Leaf`, or a tuple of values for a tuple-shaped result."""

NOTHING = Leaf()

_PASSES_LIMIT = 512
"""Passes before the fixed point is given up on (each carries the loops'
states one iteration further). Stopped early, the states hold less than
the fixed point: fewer calls they are computed from, so fewer pairs
proved ordered and more calls taken as unused; sound, if less exact."""

_IDEMPOTENT = frozenset({"maximum", "minimum", "and", "or"})
"""Opcodes ``f`` with ``f(x, x) == x``, which XLA folds so."""

_SLICING = frozenset({"slice", "dynamic-slice", "gather", "reshape"})
"""Opcodes whose result may be one part of a concatenated operand."""

_INTEGER_MAX = {
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

_CANCELLING = frozenset(
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

_DATA_OPERANDS = {
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

_FORWARDING = frozenset({"copy", "bitcast", "reshape", "opt-barrier"})
"""Opcodes whose result is their operand, unchanged."""

_REARRANGING = frozenset({"reverse", "transpose"})
"""Opcodes whose result holds their operand's elements in another order:
XLA folds a slice of one into a slice of the operand."""

_UNSIGNED_MAX = {k: v for k, v in _INTEGER_MAX.items() if k.startswith("u")}

_NEVER_SPECULATED = frozenset(
  {"send", "recv", "infeed", "outfeed", "rng", "rng-get-and-update-state"}
)
"""Opcodes besides side-effecting custom calls whose results change from
one iteration to the next whatever their operands."""


@dataclasses.dataclass
class CallInstance:
  """One selected call at one place of the program: one chain of the
  instructions that run its computation, from the entry."""

  bit: int
  instruction: Instruction
  chain: tuple[str, ...]
  """The names of the ``call``, ``while`` and ``conditional``
  instructions that lead to it, outermost first."""
  loops: tuple[int, ...]
  """The loops around it (`MayOrder.loops` indices), outermost first."""
  branches: tuple[tuple[int, int], ...]
  """The conditionals around it and the branch it is in:
  ``(conditional, branch)``, by `MayOrder`'s numbering of conditionals."""
  deps: int = 0
  """The instances its operands are computed from (and, for a call with a
  side effect, the decisions that run it)."""
  var: int = 0
  """The loops over whose iterations its operands may change."""

  @property
  def side_effect(self) -> bool:
    return self.instruction.side_effect


@dataclasses.dataclass
class Loop:
  """One ``while`` at one place of the program."""

  instruction: Instruction
  chain: tuple[str, ...]
  trips: int | None = None
  """Its trip count, where the program states it (a counter from a
  constant, stepped by a constant, compared with a constant); None
  otherwise."""
  passed_on: frozenset = frozenset()
  """The paths of the state elements its body hands back unchanged."""
  state: Value | None = None
  """What each state element is computed from, over every iteration."""
  root: Value | None = None
  """What the body's root held in the last pass."""

  @property
  def may_repeat(self) -> bool:
    """Whether the loop may run its body twice or more."""
    return self.trips is None or self.trips > 1


@dataclasses.dataclass(frozen=True)
class Unordered:
  """Two call instances that no compiler has to keep in order, and why."""

  first: CallInstance
  second: CallInstance
  kind: str
  """``"order"`` (neither is computed from the other), ``"hoisted"`` (one
  may run once before the loop both are in), or ``"deleted"`` (one is a
  call without side effect whose results nothing uses)."""
  moved: CallInstance | None = None
  """For ``"hoisted"`` and ``"deleted"``: the call XLA may move or
  delete."""
  loop: Loop | None = None
  """For ``"hoisted"``: the loop it may leave."""


@dataclasses.dataclass(frozen=True)
class _Context:
  chain: tuple[str, ...] = ()
  loops: tuple[int, ...] = ()
  branches: tuple[tuple[int, int], ...] = ()
  control: int = 0
  """Instances the decisions that run this code are computed from."""
  control_var: int = 0


class MayOrder:
  """The program's calls, each at each of its places, and what orders
  them whatever XLA does to calls that have no side effect.

  Args:
    module: the module before optimization.
    selected: which custom calls are calls of the program (the analysis'
      native calls); only they get instances.
    barriers_order: whether the compiler that runs the module keeps
      ``optimization_barrier`` (XLA:TPU, where ``entangle`` lowers to one):
      then each of a barrier's results comes after all its operands.
  """

  def __init__(
    self,
    module: Module,
    selected: Callable[[Instruction], bool],
    barriers_order: bool = False,
  ):
    self.module = module
    self._selected = selected
    self._barriers_order = barriers_order
    self._bits: dict[tuple[tuple[str, ...], str], int] = {}
    self._loop_index: dict[tuple[tuple[str, ...], str], int] = {}
    self._conditional_index: dict[tuple[tuple[str, ...], str], int] = {}
    self.loops: list[Loop] = []
    self.instances: dict[int, CallInstance] = {}
    self._in_loop: dict[int, int] = {}
    """Bits of the instances inside each loop (by its index)."""
    self._in_conditional: dict[int, int] = {}
    """Bits of the instances inside each conditional's branches."""
    self.live = 0
    """Bits of the instances whose results something that runs uses."""
    self.fixed_point = False
    self._by_name: dict[str, Instruction] | None = None
    self._callers: dict[str, list[Instruction]] | None = None
    for _ in range(_PASSES_LIMIT):
      self._grew = False
      self.instances = {}
      self._in_loop = {}
      self._in_conditional = {}
      self.live = 0
      root = self._computation(module.entry, None, _Context())
      self.live |= _deps_of(root)
      if not self._grew:
        self.fixed_point = True
        break

  def by_instruction(self) -> dict[str, list[CallInstance]]:
    """The instances of each selected instruction, by its name."""
    found: dict[str, list[CallInstance]] = {}
    for instance in self.instances.values():
      found.setdefault(instance.instruction.name, []).append(instance)
    return found

  def call_site(self, instance: CallInstance) -> Instruction | None:
    """The innermost ``call`` that leads to `instance` (a jitted helper's
    call at this place), or None where no ``call`` does."""
    self._names()
    assert self._by_name is not None
    for name in reversed(instance.chain):
      found = self._by_name.get(name)
      if found is not None and found.opcode == "call":
        return found
    return None

  def placed_stack(self, instance: CallInstance) -> Stack:
    """The Python stack of `instance` at its place, as XLA's inliner
    composes it: a helper's computation keeps the stack of the place JAX
    traced it at, so each ``call`` on the way swaps that place's frames
    for its own. The instruction's own stack where no ``call`` leads to
    it, or where the traced place cannot be told."""
    self._names()
    placed: Stack | None = None
    helper: str | None = None
    for name in instance.chain:
      call = self._by_name.get(name) if self._by_name else None
      if call is None or call.opcode != "call" or not call.callees:
        continue
      if placed is None or helper is None:
        placed = call.stack
      else:
        placed = self._rebased(call, helper, placed)
      helper = call.callees[0]
    if placed is None or helper is None:
      return instance.instruction.stack
    return self._rebased(instance.instruction, helper, placed)

  def _rebased(self, i: Instruction, helper: str, placed: Stack) -> Stack:
    """`i`'s stack, traced inside `helper` at one of its call sites, with
    that site's frames replaced by `placed`."""
    stack = i.stack
    for caller in self._callers_of(helper):
      site = caller.stack
      if (
        site
        and len(site) <= len(stack)
        and stack[len(stack) - len(site) :] == site
      ):
        return stack[: len(stack) - len(site)] + placed
    return stack

  def _callers_of(self, helper: str) -> list[Instruction]:
    if self._callers is None:
      self._callers = {}
      for body in self.module.computations.values():
        for i in body:
          if i.opcode == "call":
            for callee in i.callees:
              self._callers.setdefault(callee, []).append(i)
    return self._callers.get(helper, [])

  def _names(self) -> None:
    if self._by_name is None:
      self._by_name = {
        i.name: i for body in self.module.computations.values() for i in body
      }

  def _shape_of(self, name: str) -> str:
    """The HLO shape of instruction `name` ("" where unknown)."""
    self._names()
    assert self._by_name is not None
    found = self._by_name.get(name)
    return found.shape if found is not None else ""

  def _element_type(self, name: str) -> str:
    """The element type of instruction `name`'s array (``u32``)."""
    return self._shape_of(name).split("[", 1)[0].strip()

  def deletable(self, instance: CallInstance) -> bool:
    """Whether XLA may delete `instance`: it has no side effect and nothing
    that runs uses its results."""
    return not instance.side_effect and not self.live >> instance.bit & 1

  def unordered(
    self,
    a: CallInstance,
    b: CallInstance,
    writes: Callable[[CallInstance], bool],
  ) -> Unordered | None:
    """Why `a` and `b` may run in either order, or at once, after what XLA
    may do; None when every compile keeps them in order, or when they
    never both run (two branches of one conditional, or a call XLA may
    delete that only reads). `writes` says whether a call may write
    (only a deleted write loses anything)."""
    if _exclusive(a, b):
      return None
    for call in (a, b):
      if self.deletable(call):
        if writes(call):
          return Unordered(a, b, "deleted", moved=call)
        return None
    for call in (a, b):
      loop = self._hoistable_from(call, a if call is b else b)
      if loop is not None:
        return Unordered(a, b, "hoisted", moved=call, loop=loop)
    if a.deps >> b.bit & 1 or b.deps >> a.bit & 1:
      return None
    return Unordered(a, b, "order")

  def movable(self, instance: CallInstance) -> bool:
    """Whether XLA may move `instance` out of a loop around it or delete
    it: what makes `unordered` look past the data."""
    if instance.side_effect:
      return False
    if self.deletable(instance):
      return True
    return any(
      self.loops[index].may_repeat and not instance.var >> index & 1
      for index in instance.loops
    )

  def _hoistable_from(
    self, call: CallInstance, other: CallInstance
  ) -> Loop | None:
    """The outermost loop around both calls that XLA may move `call` out
    of and that may run twice or more; None when there is none."""
    if call.side_effect:
      return None
    for index in call.loops:
      if index not in other.loops:
        continue
      loop = self.loops[index]
      if loop.may_repeat and not call.var >> index & 1:
        return loop
    return None

  # The evaluation: one pass over the program.

  def _computation(
    self, name: str, arguments: list[Value] | None, context: _Context
  ) -> Value:
    values: dict[str, Value] = {}
    root: Value = NOTHING
    for i in self.module.computations[name]:
      value = self._instruction(i, values, arguments, context)
      values[i.name] = value
      if i.root:
        root = value
    return root

  def _instruction(
    self,
    i: Instruction,
    values: dict[str, Value],
    arguments: list[Value] | None,
    context: _Context,
  ) -> Value:
    operands = [values.get(o, NOTHING) for o in i.operands]
    opcode = i.opcode
    if opcode not in _SPECIAL:
      # Most of a large program (arithmetic): none of the cases below.
      return self._plain(i, operands, context)
    if opcode == "add" and len(operands) == 2:
      # Before the cases below, none of which takes an add.
      return _cancelled(opcode, i.shape, operands, _add(operands, i.shape))
    if opcode == "parameter":
      number = i.parameter_number
      if (
        arguments is not None and number is not None and number < len(arguments)
      ):
        return arguments[number]
      return _keyed(_shaped(i.shape, NOTHING), ("entry", i.name))
    if opcode == "constant":
      return _new_leaf(
        const=True, lit=_literal(i.literal), key=("c", i.literal, i.shape)
      )
    if opcode == "iota":
      return _new_leaf(const=True, key=("iota", i.shape))
    if opcode == "tuple":
      return tuple(operands)
    if opcode == "get-tuple-element":
      whole = operands[0] if operands else NOTHING
      if (
        isinstance(whole, tuple)
        and i.tuple_index is not None
        and i.tuple_index < len(whole)
      ):
        return whole[i.tuple_index]
      return _joined([whole]) if isinstance(whole, tuple) else whole
    if opcode == "opt-barrier" and self._barriers_order:
      # Kept where it runs (TPU): each result after every operand.
      return _shaped(i.shape, _joined(operands))
    if opcode in _FORWARDING:
      return operands[0] if operands else NOTHING
    if opcode in _REARRANGING and operands:
      # The same elements in another order or shape: a slice of it may
      # still take one part of a concatenate alone.
      leaf = _leaf(operands[0])
      return dataclasses.replace(leaf, origin=None, key=_key_of(i, operands))
    if opcode == "pad" and len(operands) == 2:
      # The operand's elements and the padding value's, either of which
      # may be cut away: negative padding slices the operand, and a pad
      # that adds no element (``interior`` on one element) is folded to
      # its operand. The padding is not read here, so only what both
      # share surely reaches the result.
      inner, padding = _leaf(operands[0]), _leaf(operands[1])
      parts = (*(inner.parts or (inner,)), padding)
      return dataclasses.replace(_common(parts), parts=parts)
    if opcode == "broadcast" or opcode == "convert":
      return _unchanged_constant(operands[0], i) if operands else NOTHING
    if opcode == "select" and len(operands) == 3:
      return _select(*operands)
    if opcode in _IDEMPOTENT and len(operands) == 2:
      a, b = (_leaf(o) for o in operands)
      if a.key is not None and a.key == b.key:
        return a
    if opcode in _ABSORBING and len(operands) == 2:
      folded = _absorbed(opcode, operands, i.shape)
      if folded is not None:
        return folded
    if opcode == "add" and len(operands) == 2:
      return _cancelled(opcode, i.shape, operands, _add(operands, i.shape))
    if opcode == "concatenate" and operands:
      joined = _joined(operands)
      parts = tuple(_leaf(o) for o in operands)
      return _replace(joined, parts=parts, key=_key_of(i, operands))
    if opcode in _SLICING and operands:
      whole = _leaf(operands[0])
      if whole.parts is not None:
        return _common(whole.parts)
    if opcode in _DATA_OPERANDS and operands:
      data = [operands[k] for k in _DATA_OPERANDS[opcode](len(operands))]
      return _shaped(i.shape, _replace(_joined(data), key=_key_of(i, operands)))
    if opcode == "sort" and operands:
      # Each result is its own operand reordered: the keys decide the
      # order only, and XLA drops a sort of one element.
      if len(operands) == 1:
        return _shaped(i.shape, _joined(operands))
      return tuple(_joined([operand]) for operand in operands)
    if opcode == "clamp" and len(operands) == 3:
      low, high = _leaf(operands[0]), _leaf(operands[2])
      if _may_be_equal_constants(low, high):
        return Leaf(const=True, lit=low.lit)
    if opcode == "compare" and len(operands) == 2:
      element = self._element_type(i.operands[0])
      if _tautology(i.direction, element, operands):
        # XLA folds it to a constant (``w == w`` of integers, an unsigned
        # ``u >= 0``): it orders nothing.
        return Leaf(const=True)
      return _cancelled(
        opcode, i.shape, operands, _compare(i.direction, operands)
      )
    if opcode == "bitcast-convert" and operands:
      return _bitcast(
        _leaf(operands[0]), self._shape_of(i.operands[0]), i.shape
      )
    if opcode == "call" and i.callees:
      inner = dataclasses.replace(context, chain=(*context.chain, i.name))
      return self._computation(i.callees[0], operands, inner)
    if opcode == "while" and i.body and i.condition:
      return self._while(i, operands, context)
    if opcode == "conditional" and i.branches:
      return self._conditional(i, operands, context)
    if opcode == "custom-call":
      return self._custom_call(i, operands, context)
    return self._plain(i, operands, context)

  def _plain(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    """An instruction that no case of `_instruction` takes: its result is
    computed from all its operands."""
    opcode = i.opcode
    joined = _replace(_joined(operands), key=_key_of(i, operands))
    if opcode in _CANCELLING and len(operands) == 2:
      joined = _cancelled(opcode, i.shape, operands, joined)
    if opcode in _NEVER_SPECULATED:
      joined = _replace(joined, var=joined.var | _bits(context.loops))
      self.live |= joined.deps
    return _shaped(i.shape, joined)

  def _custom_call(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    joined = _joined(operands)
    if i.target == ENTANGLE_TARGET:
      return _shaped(i.shape, _replace(joined, const=False))
    if not self._selected(i):
      if i.side_effect:
        self.live |= joined.deps
        joined = _replace(joined, var=joined.var | _bits(context.loops))
      return _shaped(i.shape, _replace(joined, const=False))
    key = (context.chain, i.name)
    bit = self._bits.setdefault(key, len(self._bits))
    deps, var = joined.deps, joined.var
    if i.side_effect:
      deps |= context.control
      var |= _bits(context.loops) | context.control_var
      self.live |= deps | 1 << bit
    self.instances[bit] = CallInstance(
      bit, i, context.chain, context.loops, context.branches, deps, var
    )
    for index in context.loops:
      self._in_loop[index] = self._in_loop.get(index, 0) | 1 << bit
    for index, _ in context.branches:
      inside = self._in_conditional.get(index, 0)
      self._in_conditional[index] = inside | 1 << bit
    return _keyed(
      _shaped(i.shape, _new_leaf(deps=deps | 1 << bit, var=var)), ("call", bit)
    )

  def _while(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    key = (context.chain, i.name)
    index = self._loop_index.get(key)
    if index is None:
      index = self._loop_index[key] = len(self.loops)
      self.loops.append(Loop(i, context.chain))
    loop = self.loops[index]
    initial = operands[0] if operands else NOTHING
    state = initial
    if loop.root is not None:
      state = _merged(initial, loop.root, loop.passed_on, ())
    grown = loop.state is None or state != loop.state
    if loop.state is not None and grown:
      self._grew = True
    loop.state = state
    mark = 1 << index
    parameter = _parameter(state, loop.passed_on, index, mark, ())
    inner = dataclasses.replace(
      context, chain=(*context.chain, i.name), loops=(*context.loops, index)
    )
    assert i.condition is not None and i.body is not None
    decision = self._computation(i.condition, [parameter], inner)
    decided = decision if isinstance(decision, Leaf) else _joined([decision])
    self.live |= decided.deps
    body_context = dataclasses.replace(
      inner,
      control=inner.control | decided.deps,
      control_var=inner.control_var | decided.var,
    )
    root = self._computation(i.body, [parameter], body_context)
    passed_on = frozenset(_passed_on(root, index, ()))
    if loop.root is None or passed_on != loop.passed_on:
      # The first pass took every element as changing: one more pass
      # with the elements the body hands back.
      self._grew = True
    loop.passed_on = passed_on
    loop.root = root
    loop.trips = _trips(decided, root, initial, index)
    if loop.trips == 0:
      return initial  # XLA deletes a loop that never runs.
    merged = _merged(initial, root, passed_on, ())
    if loop.trips is None:
      # It may run no iteration: then each element is its initial value,
      # and only what that shares with the body's result (or what a call
      # in the body computes, where the body ran) surely reaches it.
      merged = _at_most(merged, initial, self._in_loop.get(index, 0))
    return merged

  def _conditional(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    key = (context.chain, i.name)
    index = self._conditional_index.setdefault(
      key, len(self._conditional_index)
    )
    decision = _leaf(operands[0]) if operands else NOTHING
    self.live |= decision.deps
    taken = range(len(i.branches))
    picked = _branch_picked(decision, len(i.branches))
    if picked is not None:
      taken = range(picked, picked + 1)
    results = []
    for k in taken:
      inner = _Context(
        (*context.chain, i.name),
        context.loops,
        (*context.branches, (index, k)),
        context.control | decision.deps,
        context.control_var | decision.var,
      )
      argument = operands[k + 1] if k + 1 < len(operands) else NOTHING
      results.append(self._computation(i.branches[k], [argument], inner))
    if len(results) == 1:
      return results[0]
    # One branch runs: a result is surely computed from what every
    # branch's result is, from the decision (the conditional waits for
    # it), and from each call in the branches that ran.
    inside = self._in_conditional.get(index, 0)
    return _met(results, decision, inside)


def _leaf(value: Value) -> Leaf:
  """`value` as one leaf: itself, or every leaf of a tuple joined."""
  return value if isinstance(value, Leaf) else _joined([value])


def _keyed(value: Value, key: tuple) -> Value:
  """`value` with each leaf numbered by `key` and its path."""
  if isinstance(value, Leaf):
    return _replace(value, key=key)
  return tuple(_keyed(v, (*key, k)) for k, v in enumerate(value))


def _key_of(i: Instruction, operands: list[Value]) -> tuple | None:
  """The value number of a result computed by `i` from `operands`; None
  where an operand has none."""
  keys = []
  for operand in operands:
    if not isinstance(operand, Leaf) or operand.key is None:
      return None
    keys.append(operand.key)
  return (i.opcode, i.shape, i.direction, i.tuple_index, *keys)


def _common(parts: tuple) -> Leaf:
  """What every one of `parts` is computed from: a slice may take any
  one of them alone."""
  deps = var = -1
  const = True
  for part in parts:
    deps &= part.deps
    var &= part.var
    const = const and part.const
  return _new_leaf(max(deps, 0), max(var, 0), const)


def _exclusive(a: CallInstance, b: CallInstance) -> bool:
  """Whether `a` and `b` lie in two branches of one conditional."""
  mine = dict(a.branches)
  return any(
    conditional in mine and mine[conditional] != branch
    for conditional, branch in b.branches
  )


def _bits(indices: tuple[int, ...]) -> int:
  found = 0
  for index in indices:
    found |= 1 << index
  return found


def _leaves(value: Value):
  if isinstance(value, Leaf):
    yield value
  else:
    for element in value:
      yield from _leaves(element)


def _deps_of(value: Value) -> int:
  found = 0
  for leaf in _leaves(value):
    found |= leaf.deps
  return found


def _joined(values: list[Value]) -> Leaf:
  """One leaf computed from every leaf of `values`."""
  deps = var = 0
  const = True
  for value in values:
    # A leaf itself, the usual operand, without `_leaves`' generator.
    for leaf in (value,) if isinstance(value, Leaf) else _leaves(value):
      deps |= leaf.deps
      var |= leaf.var
      const = const and leaf.const
  return _new_leaf(deps, var, const)


def _shaped(shape: str, leaf: Leaf) -> Value:
  """`leaf` in the structure of an HLO shape (``(f32[], (s32[]))``)."""
  arity = _tuple_arity(shape)
  if arity is None:
    return leaf
  return tuple(_shaped(element, leaf) for element in arity)


@functools.lru_cache(maxsize=4096)
def _tuple_arity(shape: str) -> tuple[str, ...] | None:
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


def _literal(text: str | None) -> object:
  """A scalar constant's value (``0``, ``true``, ``1.5``); None for any
  other literal."""
  if text is None:
    return None
  text = text.strip()
  if text in ("true", "false"):
    return text == "true"
  try:
    return int(text)
  except ValueError:
    pass
  try:
    return float(text)
  except ValueError:
    return None


def _unchanged_constant(value: Value, i: Instruction) -> Value:
  """A broadcast or conversion of `value`: the same dependences; a
  constant keeps its value (``broadcast(constant(true))``), a state
  element no longer is itself."""
  leaf = _leaf(value)
  key = None if leaf.key is None else (i.opcode, i.shape, leaf.key)
  return _replace(leaf, origin=None, key=key, parts=None)


def _select(predicate: Value, yes: Value, no: Value) -> Value:
  choice = _leaf(predicate)
  a, b = _leaf(yes), _leaf(no)
  if a.key is not None and a.key == b.key:
    return yes  # XLA folds select(p, x, x) to x.
  if choice.const:
    if isinstance(choice.lit, bool):
      return yes if choice.lit else no
    # A constant that cannot be read here: only what both share, and
    # either's place in a loop's state (XLA may pick the one the body
    # hands back unchanged).
    return Leaf(
      a.deps & b.deps,
      a.var & b.var,
      a.const and b.const,
      origin=a.origin or b.origin,
    )
  return _joined([predicate, yes, no])


_ABSORBING = {
  # opcode: the operands that may absorb, and whether a value does
  "multiply": ((0, 1), lambda v: v == 0),
  "and": ((0, 1), lambda v: v is False or (_plain_int(v) and v == 0)),
  "or": ((0, 1), lambda v: v is True or (_plain_int(v) and v == -1)),
  "remainder": ((1,), lambda v: _plain_int(v) and v in (1, -1)),
  "power": ((1,), lambda v: v == 0),
}
"""Binary opcodes with an operand value that makes the result a constant
whatever the other operand (``x * 0``, ``x & false``, ``x | -1``, ``x %
1``, ``x ** 0``), as XLA's algebraic simplifier folds them. A constant
this module cannot read may be that value."""

_SPECIAL = frozenset(
  {
    "parameter",
    "constant",
    "iota",
    "tuple",
    "get-tuple-element",
    "broadcast",
    "convert",
    "select",
    "add",
    "concatenate",
    "sort",
    "clamp",
    "compare",
    "call",
    "while",
    "conditional",
    "custom-call",
    "bitcast-convert",
    "pad",
    *_FORWARDING,
    *_REARRANGING,
    *_IDEMPOTENT,
    *_ABSORBING,
    *_SLICING,
    *_DATA_OPERANDS,
  }
)
"""The opcodes that `MayOrder._instruction` has a case for; any other
is `MayOrder._plain`."""


def _plain_int(value: object) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


@functools.lru_cache(maxsize=4096)
def _element_type(shape: str) -> str:
  """The element type of an array shape (``s32`` of ``s32[2]{0}``)."""
  return shape.split("[", 1)[0].strip()


def _integral(shape: str) -> bool:
  element = _element_type(shape)
  return element in _INTEGER_MAX or element == "pred"


def _cancelled(
  opcode: str, shape: str, operands: list[Value], result: Leaf
) -> Leaf:
  """`result` of a binary op less what both operands are computed from,
  where the two may cancel: on integers (``w - w`` is 0, ``w ^ w`` too),
  and in a comparison (``w == w`` is true). A float ``x - x`` is kept, as
  XLA keeps it (``inf - inf`` is ``nan``); so is ``w + w`` and ``w * w``
  of one value, which vary with it."""
  if opcode != "compare" and not _integral(shape):
    return result
  a, b = (_leaf(o) for o in operands)
  if opcode in ("add", "multiply") and a.key is not None and a.key == b.key:
    return result
  common_deps, common_var = a.deps & b.deps, a.var & b.var
  if not common_deps and not common_var:
    return result
  return _replace(
    result, deps=result.deps & ~common_deps, var=result.var & ~common_var
  )


def _may_be_equal_constants(low: Leaf, high: Leaf) -> bool:
  """Whether a clamp's bounds are constants that may be equal, so that
  the clamp is that constant."""
  if not (low.const and high.const):
    return False
  return low.lit is None or high.lit is None or low.lit == high.lit


def _absorbed(opcode: str, operands: list[Value], shape: str) -> Leaf | None:
  """The constant that `_ABSORBING` makes a binary op (XLA's algebraic
  simplifier folds it); None otherwise. A floating-point product or
  remainder is never folded: XLA keeps ``x * 0`` for floats, whose ``nan *
  0`` is ``nan`` (it folds them only under fast math, off in JAX), so the
  documented ``token * 0`` stays an order."""
  if opcode in ("multiply", "remainder") and not _integral(shape):
    return None
  positions, absorbs = _ABSORBING[opcode]
  for position in positions:
    leaf = _leaf(operands[position])
    if leaf.const and (leaf.lit is None or absorbs(leaf.lit)):
      if leaf.lit is None:
        return Leaf(const=True)
      return Leaf(
        const=True, lit={"remainder": 0, "power": 1}.get(opcode, leaf.lit)
      )
  return None


def _add(operands: list[Value], shape: str) -> Leaf:
  a, b = _leaf(operands[0]), _leaf(operands[1])
  joined = _joined([a, b])
  limit = _INTEGER_MAX.get(_element_type(shape))
  for x, y in ((a, b), (b, a)):
    if (
      x.origin is not None
      and x.origin[0] == "state"
      and y.const
      and isinstance(y.lit, int)
      and not isinstance(y.lit, bool)
    ):
      origin = ("step", *x.origin[1:], y.lit, limit)
      return _replace(joined, origin=origin)
  return joined


def _compare(direction: str | None, operands: list[Value]) -> Leaf:
  a, b = (_leaf(o) for o in operands)
  joined = _joined([a, b])
  if direction in ("LT", "LE") and b.const and isinstance(b.lit, int):
    limit = b.lit + (direction == "LE")
    if a.origin is not None and a.origin[0] == "state":
      return _replace(joined, origin=("below", *a.origin[1:], limit))
  return joined


def _parameter(
  state: Value, passed_on: frozenset, index: int, mark: int, path: tuple
) -> Value:
  """The body's parameter: each state element as `state` has it, marked
  as changing over the loop's iterations unless the body hands it back
  unchanged, and tagged with its path for `_passed_on` and `_trips`."""
  if isinstance(state, tuple):
    return tuple(
      _parameter(element, passed_on, index, mark, (*path, k))
      for k, element in enumerate(state)
    )
  if path in passed_on:
    return _replace(state, origin=("state", index, path))
  origin = ("state", index, path)
  return _new_leaf(
    state.deps, state.var | mark, False, None, origin, key=origin
  )


def _passed_on(root: Value, index: int, path: tuple):
  """The paths of the elements that the body's `root` hands back as the
  parameter had them."""
  if isinstance(root, tuple):
    for k, element in enumerate(root):
      yield from _passed_on(element, index, (*path, k))
  elif root.origin == ("state", index, path):
    yield path


def _merged(
  initial: Value, root: Value, passed_on: frozenset, path: tuple
) -> Value:
  """A loop's state over every iteration: each element as computed from
  its initial value and the body's results for it; one the body hands
  back unchanged keeps its initial value."""
  if (
    isinstance(initial, tuple)
    and isinstance(root, tuple)
    and len(initial) == len(root)
  ):
    return tuple(
      _merged(a, b, passed_on, (*path, k))
      for k, (a, b) in enumerate(zip(initial, root, strict=True))
    )
  if path in passed_on:
    return initial
  joined = _joined([initial, root])
  return _replace(joined, const=False)


def _trips(decision: Leaf, root: Value, initial: Value, index: int):
  """The trip count of a loop whose condition compares a counter with a
  constant (``i < n``), the body stepping the counter by a constant from a
  constant start; None for any other loop."""
  origin = decision.origin
  if origin is None or origin[0] != "below" or origin[1] != index:
    return None
  path, limit = origin[2], origin[3]
  counter, start = root, initial
  for k in path:
    if not isinstance(counter, tuple) or not isinstance(start, tuple):
      return None
    counter, start = counter[k], start[k]
  if not isinstance(counter, Leaf) or not isinstance(start, Leaf):
    return None
  step_origin = counter.origin
  if step_origin is None or step_origin[:3] != ("step", index, path):
    return None
  step, largest = step_origin[3], step_origin[4]
  if not start.const or not isinstance(start.lit, int) or step <= 0:
    return None
  if largest is None or limit + step > largest:
    return None  # The counter may wrap before it reaches the limit.
  return max(0, math.ceil((limit - start.lit) / step))


def _branch_picked(decision: Leaf, branches: int) -> int | None:
  """The branch a constant predicate or index picks; None where it is not
  a constant this module can read."""
  if not decision.const or decision.lit is None:
    return None
  if isinstance(decision.lit, bool):
    return 0 if decision.lit else 1
  if isinstance(decision.lit, int):
    return decision.lit if 0 <= decision.lit < branches else branches - 1
  return None


def _at_most(merged: Value, initial: Value, inside: int) -> Value:
  """A loop's `merged` state where the loop may not run: each element
  keeps only what its `initial` value is computed from too, and the calls
  `inside` the body (which, where they ran, came before the result)."""
  if (
    isinstance(merged, tuple)
    and isinstance(initial, tuple)
    and len(merged) == len(initial)
  ):
    return tuple(
      _at_most(m, a, inside) for m, a in zip(merged, initial, strict=True)
    )
  m, a = _leaf(merged), _leaf(initial)
  deps = m.deps & (a.deps | inside)
  return dataclasses.replace(m, deps=deps, const=m.const and a.const)


def _tautology(direction: str | None, element: str, operands: list) -> bool:
  """Whether a comparison is a constant that XLA's simplifier may fold:
  one value with itself (on integers, ``w == w`` is true, ``w < w``
  false), or an unsigned value against 0 or its type's largest value
  (``u >= 0``, ``u < 0``, ``u <= MAX``), a constant that cannot be read
  here taken as possibly one of those."""
  a, b = (_leaf(o) for o in operands)
  integral = element in _INTEGER_MAX or element == "pred"
  if integral and a.key is not None and a.key == b.key:
    return True
  largest = _UNSIGNED_MAX.get(element)
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
  at_zero = lit is None or (_plain_int(lit) and lit == 0)
  at_max = lit is None or (_plain_int(lit) and lit == largest)
  return (way in ("GE", "LT") and at_zero) or (way in ("LE", "GT") and at_max)


def _bitcast(leaf: Leaf, source: str, shape: str) -> Leaf:
  """A bitcast-convert of `leaf` (of shape `source`) to `shape`: the same
  dependences, and the value number of the value it came from where it
  converts back (XLA folds ``bitcast(bitcast(w))`` to ``w``)."""
  key = leaf.key
  if key is not None and key[:1] == ("bitcast-convert",) and key[1] == shape:
    return dataclasses.replace(leaf, key=key[2], origin=None, parts=None)
  number = None if key is None else ("bitcast-convert", source, key)
  return dataclasses.replace(leaf, key=number, origin=None, parts=None)


def _met(results: list[Value], decision: Leaf, inside: int) -> Value:
  """A conditional's result from its branches' `results`, one of which
  runs: element by element, what every branch's is computed from, plus
  the `decision`'s dependences and those of the calls `inside` its
  branches that reach some branch's result."""
  first = results[0]
  if isinstance(first, tuple) and all(
    isinstance(r, tuple) and len(r) == len(first) for r in results
  ):
    return tuple(
      _met([r[k] for r in results if isinstance(r, tuple)], decision, inside)
      for k in range(len(first))
    )
  leaves = [_leaf(r) for r in results]
  every = -1
  some, var, const = 0, decision.var, decision.const
  for leaf in leaves:
    every &= leaf.deps
    some |= leaf.deps
    var |= leaf.var
    const = const and leaf.const
  deps = max(every, 0) | decision.deps | some & inside
  return Leaf(deps, var, const)
