"""The order no compiler may break: decided from the program, for every XLA.

The module before optimization is the program. XLA's optimizer may change
each call that nothing marks side-effecting, and the next jaxlib may do
more of it than this one did:

* move it out of a loop when its operands do not change in the loop
  (loop-invariant code motion): it then runs once, before the loop;
* merge it with an identical call on the same operands (CSE): it then
  runs where that one runs, earlier or later;
* delete it when nothing uses its results (DCE). A call whose results
  are used only through edges XLA may fold away (an index, a sort key,
  operands that cancel) may be deleted, or kept and then moved or merged:
  its pairs are still compared.

Inlining a ``call`` (a jitted helper, a ``custom_vjp``, a checkpoint) comes
first, so a computation called at two places is two calls, one per place.

What survives every such change is data: a call that has no side effect
runs after the values its operands are computed from, and before the
calls that consume its results; nothing else holds it in place. So a pair
is ordered here only when one call's operands are computed from the
other's results, through edges that no compiler folds away:

* ``optimization_barrier`` passes each operand on to its own result and
  orders nothing else (XLA:CPU expands it away);
* a ``select`` on a constant predicate is the branch it picks; on any
  other predicate, only what both branches share (XLA folds a select whose
  branches it proves equal, and which equalities it proves is its own);
  constants are read as XLA folds them (`folding`);
* an integer product with a constant that may be zero, an ``and`` with
  ``false`` and an ``or`` with ``true`` are constants (a floating-point
  product with zero is not: XLA keeps it, since ``nan * 0`` is ``nan``,
  unless fast math is switched on, which JAX leaves off);
* an index (of a dynamic slice, gather, dynamic update or scatter) and a
  sort's keys order nothing: XLA drops an index that cannot change the
  result, and the sort of one element; an index that picks one element
  of a table whose elements all differ orders (`elements.indexed`);
* an integer operation or a comparison keeps nothing that both its
  operands are computed from (``w - w``, ``max(w, w) - w``, ``w == w``
  cancel), and ``x % 1``, ``x ** 0`` and a clamp to one constant are
  constants;
* one element of a value whose elements differ (a stack, an update, an
  elementwise op or a broadcast of either) is computed only from the
  part it came from: XLA folds a slice into the part it takes. Where the
  program says which part (a static slice of a concatenate, an update at
  constant indices, the last row a ``scan`` stacked), it is that part;
  elsewhere, only what every part shares;
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
import math
from collections.abc import Callable

from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing._hlo import Instruction, Module
from entangle_jax.testing._hlo.attributes import Stack
from entangle_jax.testing._hlo.instruction import uniform_literal
from entangle_jax.testing._order import (
  algebra,
  bitsets,
  call_instances,
  elements,
  folding,
  index_values,
  loop_rules,
)
from entangle_jax.testing._order.algebra import NOTHING, Leaf, Value
from entangle_jax.testing._order.call_instances import (
  CallInstance,
  Loop,
  Unordered,
)
from entangle_jax.testing._order.module_index import ModuleIndex
from entangle_jax.testing._order.never_negative import NeverNegative

_PASSES_LIMIT = 512
"""Passes before the fixed point is given up on (each carries the loops'
states one iteration further). Stopped early, the states hold less than
the fixed point: fewer calls they are computed from, so fewer pairs
proved ordered and more calls taken as unused; sound, if less exact."""


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
    """Bits of the instances whose results something that runs uses,
    through edges that no compiler may fold away."""
    self.fixed_point = False
    self.index = ModuleIndex(module)
    self._never: NeverNegative | None = None
    self._values: dict[str, Value] = {}
    self._constants: dict[str, tuple[object]] = {}
    # What each index or predicate takes, at each place: the module's
    # alone, so worked out once, not once per pass over the loops.
    self._taken: dict[tuple, frozenset[int]] = {}
    with algebra.deep_values():
      for _ in range(_PASSES_LIMIT):
        self._grew = False
        self.instances = {}
        self._in_loop = {}
        self._in_conditional = {}
        self.live = 0
        root = self._computation(module.entry, None, _Context())
        self.live |= algebra.deps_of(root)
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
    """The innermost ``call`` that leads to `instance`
    (`call_instances.call_site`)."""
    return call_instances.call_site(self.index, instance)

  def placed_stack(self, instance: CallInstance) -> Stack:
    """The Python stack of `instance` at its place
    (`call_instances.placed_stack`)."""
    return call_instances.placed_stack(self.index, instance)

  def _never_negative(
    self, i: Instruction, operands: list[Value], values: dict[str, Value]
  ) -> tuple[bool, bool]:
    """Whether XLA may know each operand of comparison `i` never negative
    (`NeverNegative`); asked only where the other may be 0."""
    a, b = (algebra.as_leaf(o) for o in operands)
    if not (folding.may_be_zero(a) or folding.may_be_zero(b)):
      return (False, False)
    self._values = values
    if self._never is None:
      self._never = NeverNegative(
        self.index.by_name, self.module.computations, self._constant
      )
    return (
      folding.may_be_zero(b) and self._never.may_be(i.operands[0]),
      folding.may_be_zero(a) and self._never.may_be(i.operands[1]),
    )

  def _constant(self, name: str) -> tuple[bool, object]:
    """Whether instruction `name` is a constant XLA may fold to, and its
    value where it can be read: the evaluation's answer in the
    computation being evaluated, the instruction's own elsewhere."""
    value = self._values.get(name)
    if isinstance(value, Leaf):
      return value.const, value.lit
    if name in self._constants:
      return True, self._constants[name][0]
    return folding.read_constant(None, self.index.named(name))

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
    if call_instances.exclusive(a, b):
      return None
    for call in (a, b):
      if self.deletable(call):
        if writes(call):
          return Unordered(a, b, "deleted", moved=call)
        if call.instruction.name not in self.used_names():
          return None  # Nothing reads what it reads.
        # A read used only through edges XLA may fold away (an index, a
        # key, operands that cancel): where XLA keeps it, it may still
        # move or merge it, and what it read matters.
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

  def used_names(self) -> frozenset[str]:
    """The instructions whose results something that may run uses,
    through any edge (`ModuleIndex.used_names`)."""
    return self.index.used_names(algebra.NEVER_SPECULATED)

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
      if type(value) is Leaf and value.const:
        # Where it is a constant in some evaluation (a helper's parameter
        # passed one): `NeverNegative` asks it from other computations.
        seen = self._constants.get(i.name, (value.lit,))
        self._constants[i.name] = (value.lit if seen[0] == value.lit else None,)
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
    if opcode in folding.FOLDABLE and (found := self._folded(i, operands)):
      if opcode in ("add", "compare"):
        return _counting(i, operands, found)
      return found
    if opcode not in _SPECIAL:
      # Most of a large program (arithmetic): none of the cases below.
      return self._plain(i, operands, context)
    if opcode == "add" and len(operands) == 2:
      # Before the cases below, none of which takes an add.
      summed = algebra.add(operands, i.shape)
      summed = algebra.replace(summed, key=algebra.key_of(i, operands))
      return algebra.cancelled(opcode, i.shape, operands, summed)
    if opcode == "parameter":
      number = i.parameter_number
      if (
        arguments is not None and number is not None and number < len(arguments)
      ):
        return arguments[number]
      return algebra.keyed(algebra.shaped(i.shape, NOTHING), ("entry", i.name))
    if opcode == "constant":
      return algebra.new_leaf(
        const=True,
        lit=folding.typed(uniform_literal(i.literal), i.shape),
        key=("c", i.literal, i.shape),
      )
    if opcode == "iota":
      return algebra.new_leaf(const=True, key=("iota", i.shape, i.dimensions))
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
      return algebra.join([whole]) if isinstance(whole, tuple) else whole
    if opcode == "opt-barrier" and self._barriers_order:
      # Kept where it runs (TPU): each result after every operand.
      return algebra.shaped(i.shape, algebra.join(operands))
    if opcode == "bitcast" and operands:
      # The same elements, in an order that the layouts decide.
      leaf = algebra.as_leaf(operands[0])
      return algebra.replace(leaf, layout=None)
    if opcode in algebra.FORWARDING:
      return operands[0] if operands else NOTHING
    if opcode in algebra.REARRANGING and operands:
      # The same elements in another order: a slice of it may still take
      # one part of a concatenate alone, but which one is not followed.
      leaf = algebra.as_leaf(operands[0])
      return algebra.replace(
        leaf, origin=None, key=algebra.key_of(i, operands), layout=None
      )
    if opcode == "pad" and len(operands) == 2:
      # The operand's elements and the padding value's, either of which
      # may be cut away: negative padding slices the operand, and a pad
      # that adds no element (``interior`` on one element) is folded to
      # its operand. The padding is not read here, so only what both
      # share surely reaches the result.
      inner, padding = (
        algebra.as_leaf(operands[0]),
        algebra.as_leaf(operands[1]),
      )
      parts = (*(inner.parts or (inner,)), padding)
      return dataclasses.replace(algebra.common(parts), parts=parts)
    if opcode == "broadcast" or opcode == "convert":
      return algebra.unchanged_constant(operands[0], i) if operands else NOTHING
    if opcode == "select" and len(operands) == 3:
      taken = frozenset()
      yes, no = algebra.as_leaf(operands[1]), algebra.as_leaf(operands[2])
      if (
        not algebra.as_leaf(operands[0]).const
        and yes.parts is None
        and no.parts is None
        and self._differ(yes, no)
      ):
        taken = self._starts(i.operands[0], 0, 1, context)
      return algebra.select(*operands, taken=taken)
    if opcode in algebra.IDEMPOTENT and len(operands) == 2:
      a, b = (algebra.as_leaf(o) for o in operands)
      if a.key is not None and a.key == b.key:
        return a
    if opcode in _PRODUCTS and folding.product_wraps_to_zero(
      i, lambda name: algebra.as_leaf(values.get(name, NOTHING)), self.index
    ):
      # XLA multiplies the constants of a product together first.
      return algebra.shaped(i.shape, Leaf(const=True, lit=0))
    if opcode in algebra.ABSORBING and len(operands) == 2:
      read = [
        folding.constant_elements(o, self.index)
        if algebra.as_leaf(v).const and algebra.as_leaf(v).lit is None
        else None
        for o, v in zip(i.operands, operands, strict=True)
      ]
      folded = algebra.absorbed(opcode, operands, i.shape, read)
      if folded is not None:
        return folded
    if opcode == "concatenate" and operands:
      dims = [self.index.dims_of(o) for o in i.operands]
      joined = elements.concatenated(operands, dims, i.dims, _one(i.dimensions))
      return algebra.replace(joined, key=algebra.key_of(i, operands))
    if opcode == "slice" and operands:
      whole = algebra.as_leaf(operands[0])
      if whole.parts is not None:
        dims = self.index.dims_of(i.operands[0])
        return elements.sliced(whole, dims, i.slice_ranges)
    if opcode in algebra.DATA_OPERANDS and operands:
      return elements.indexed(
        i,
        operands,
        self.index.dims_of,
        self._sets(i),
        lambda name, low, high: self._starts(name, low, high, context),
      )
    if opcode == "sort" and operands:
      # Each result is its own operand reordered: the keys decide the
      # order only, and XLA drops a sort of one element.
      if len(operands) == 1:
        return algebra.shaped(i.shape, algebra.join(operands))
      return tuple(algebra.join([operand]) for operand in operands)
    if opcode == "clamp" and len(operands) == 3:
      low, high = algebra.as_leaf(operands[0]), algebra.as_leaf(operands[2])
      if algebra.may_be_equal_constants(low, high):
        return Leaf(const=True, lit=low.lit)
    if opcode == "compare" and len(operands) == 2:
      element = self.index.element_type(i.operands[0])
      never = self._never_negative(i, operands, values)
      if folding.tautology(i.direction, element, operands, never):
        # XLA folds it to a constant (``w == w`` of integers, an unsigned
        # ``u >= 0``): it orders nothing.
        return Leaf(const=True)
      compared = algebra.replace(
        algebra.compare(i.direction, operands), key=algebra.key_of(i, operands)
      )
      return algebra.cancelled(opcode, i.shape, operands, compared)
    if opcode == "bitcast-convert" and operands:
      return algebra.bitcast(
        algebra.as_leaf(operands[0]),
        self.index.shape_of(i.operands[0]),
        i.shape,
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

  def _differ(self, a: algebra.Leaf, b: algebra.Leaf) -> bool:
    """Whether no compiler may prove leaves `a` and `b` equal: constants
    of two values, or one is surely computed from a call (`deps` holds
    only edges no compiler folds away) that nothing the other is computed
    from may be merged with. A call with a side effect is never merged; a
    call without one may be merged with an identical call, taken here as
    any call of its target without a side effect (two reads of one slot
    in the two branches of ``where(p, f(read(t)), f(read(t)))`` become
    one, and the select of one value twice is folded)."""
    if algebra.distinct_constants(a, b):
      return True
    return self._unmatched(a.deps & ~b.deps, b.deps) or self._unmatched(
      b.deps & ~a.deps, a.deps
    )

  def _unmatched(self, only: int, other: int) -> bool:
    """Whether a call of `only` has no call in `other` it may be merged
    with (`_differ`)."""
    if not only:
      return False
    mergeable = set()
    for bit in bitsets.positions(other):
      found = self.instances.get(bit)
      if found is None:
        return False  # Not a call this evaluation knows: may be any.
      if not found.side_effect:
        mergeable.add(found.instruction.target)
    for bit in bitsets.positions(only):
      found = self.instances.get(bit)
      if found is None:
        continue
      if found.side_effect or found.instruction.target not in mergeable:
        return True
    return False

  def _starts(
    self, name: str, low: int, high: int, context: _Context
  ) -> frozenset[int]:
    """The values index `name`, at the place `context`, surely takes once
    clamped into ``[low, high]`` (`index_values.starts_taken`)."""
    key = (name, low, high, context.chain)
    found = self._taken.get(key)
    if found is None:
      found = self._taken[key] = index_values.starts_taken(
        self.index, name, self.module.entry, low, high, context.chain
      )
    return found

  def _sets(self, i: Instruction) -> bool:
    """Whether a scatter's combiner returns the update (a set)."""
    return folding.sets(self._callee(i))

  def _combiner(self, i: Instruction) -> str | None:
    """A reduction's combiner opcode where it is plain (`folding
    .combiner`)."""
    return folding.combiner(self._callee(i))

  def _callee(self, i: Instruction) -> list[Instruction]:
    """The instructions of `i`'s (first) called computation."""
    return self.module.computations.get(i.callees[0] if i.callees else "", [])

  def _folded(self, i: Instruction, operands: list[Value]) -> Leaf | None:
    """The constant XLA folds `i` to, where its operands are constants
    this module can read; None otherwise."""
    lits = []
    for operand in operands:
      if not isinstance(operand, Leaf) or not operand.const:
        return None
      if operand.lit is None:
        return None
      lits.append(operand.lit)
    reduction = count = None
    if i.opcode == "reduce":
      reduction = self._combiner(i)
      dims = self.index.dims_of(i.operands[0]) if i.operands else None
      if reduction is None or dims is None:
        return None
      count = math.prod(dims)
    value = folding.folded(
      i.opcode, i.shape, lits, i.direction, reduction, count
    )
    if value is None:
      return None
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return algebra.new_leaf(const=True, lit=value, key=("c", text, i.shape))

  def _plain(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    """An instruction that no case of `_instruction` takes: its result is
    computed from all its operands."""
    opcode = i.opcode
    if opcode == "reduce" and len(operands) > 2 and self._reduces_one(i):
      # A reduction of pairs (an argmax) over one element each: XLA makes
      # it its combiner on the start and that element, and folds what it
      # can (the index of one element is 0), so only what every input
      # shares surely reaches each result.
      inputs = tuple(algebra.as_leaf(o) for o in operands[: len(operands) // 2])
      return algebra.shaped(i.shape, algebra.common(inputs))
    if opcode == "topk" and operands and self._one_each(i):
      # The top element of one: itself, at index 0 (a constant XLA folds).
      return (algebra.join(operands[:1]), Leaf(const=True))
    combiner = self._combiner(i) if opcode == "reduce" else None
    if folding.absorbs(opcode, i.shape, operands, combiner):
      # XLA folds it to a constant (an integer dot with zeros, a product
      # or an `all` over an element that is 0 or false).
      return algebra.shaped(i.shape, Leaf(const=True))
    joined = algebra.replace(
      algebra.join(operands), key=algebra.key_of(i, operands)
    )
    if opcode in algebra.CANCELLING and len(operands) == 2:
      joined = algebra.cancelled(opcode, i.shape, operands, joined)
    if opcode in algebra.NEVER_SPECULATED:
      joined = algebra.varying(joined, algebra.bits(context.loops))
      self.live |= joined.deps
    return algebra.shaped(i.shape, joined)

  def _one_each(self, i: Instruction) -> bool:
    """Whether a ``topk``'s operand rows hold one element each."""
    dims = self.index.dims_of(i.operands[0])
    return bool(dims) and dims[-1] == 1  # type: ignore[index]

  def _reduces_one(self, i: Instruction) -> bool:
    """Whether reduce `i` reduces one element into each result (its
    reduced dimensions all of size 1)."""
    dims = self.index.dims_of(i.operands[0]) if i.operands else None
    if dims is None or i.dimensions is None:
      return False
    return all(d < len(dims) and dims[d] == 1 for d in i.dimensions)

  def _custom_call(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    # XLA cannot see into a custom call: each element of its results
    # comes after the whole of each operand.
    joined = algebra.opaque(algebra.join(operands))
    if i.target == ENTANGLE_TARGET:
      return algebra.shaped(i.shape, algebra.replace(joined, const=False))
    if not self._selected(i):
      if i.side_effect:
        self.live |= joined.deps
        joined = algebra.replace(
          joined, var=joined.var | algebra.bits(context.loops)
        )
      return algebra.shaped(i.shape, algebra.replace(joined, const=False))
    key = (context.chain, i.name)
    bit = self._bits.setdefault(key, len(self._bits))
    deps, var = joined.deps, joined.var
    if i.side_effect:
      deps |= context.control
      var |= algebra.bits(context.loops) | context.control_var
      self.live |= deps | 1 << bit
    self.instances[bit] = CallInstance(
      bit, i, context.chain, context.loops, context.branches, deps, var
    )
    for index in context.loops:
      self._in_loop[index] = self._in_loop.get(index, 0) | 1 << bit
    for index, _ in context.branches:
      inside = self._in_conditional.get(index, 0)
      self._in_conditional[index] = inside | 1 << bit
    return algebra.keyed(
      algebra.shaped(i.shape, algebra.new_leaf(deps=deps | 1 << bit, var=var)),
      ("call", bit),
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
      state = loop_rules.loop_state(
        initial, loop.root, loop.passed_on, (), met=True
      )
    grown = loop.state is None or state != loop.state
    if loop.state is not None and grown:
      self._grew = True
    loop.state = state
    mark = 1 << index
    parameter = loop_rules.body_parameter(
      state, loop.passed_on, index, mark, ()
    )
    counted = loop.trips
    # A loop that runs once (as the last pass counted it) runs its body on
    # the initial value alone, constants included: XLA inlines it and folds
    # what they make (``c * 0.0`` from ``c = 1.0`` is 0.0), so the body is
    # evaluated on that value. Its condition also sees the last result.
    once = None
    if counted == 1 and not loop.not_once:
      once = loop_rules.first_iteration(initial, index, ())
    inner = dataclasses.replace(
      context, chain=(*context.chain, i.name), loops=(*context.loops, index)
    )
    assert i.condition is not None and i.body is not None
    decision = self._computation(i.condition, [parameter], inner)
    decided = (
      decision if isinstance(decision, Leaf) else algebra.join([decision])
    )
    self.live |= decided.deps
    body_context = dataclasses.replace(
      inner,
      control=inner.control | decided.deps,
      control_var=inner.control_var | decided.var,
    )
    root = self._computation(
      i.body, [parameter if once is None else once], body_context
    )
    passed_on = frozenset(loop_rules.paths_passed_on(root, index, ()))
    if loop.root is None or passed_on != loop.passed_on:
      # The first pass took every element as changing: one more pass
      # with the elements the body hands back.
      self._grew = True
    loop.passed_on = passed_on
    loop.root = root
    loop.trips = loop_rules.trips(decided, root, initial, index)
    if once is not None and loop.trips != 1:
      loop.not_once = True
    if loop.root is not None and loop.trips != counted:
      self._grew = True  # One more pass, with the body evaluated so.
    if loop.trips == 0:
      return initial  # XLA deletes a loop that never runs.
    merged = loop_rules.loop_state(initial, root, passed_on, ())
    if loop.trips:
      # It runs: after it, each element is what its last iteration made.
      merged = loop_rules.after_trips(
        initial, root, passed_on, (), once=loop.trips == 1 and once is not None
      )
      rows = elements.Rows(
        i.shape, loop.trips, index, self._in_loop.get(index, 0)
      )
      merged = elements.rows_written(merged, root, initial, rows)
    if loop.trips is None:
      # It may run no iteration: then each element is its initial value.
      # It may run one, which XLA may count where this cannot (``while i >
      # 0`` from 1, ``i != 1``, ``(i < 1) & (i < 5)``) and replace by its
      # body: then each element is the body's result. Or more, whose last
      # result is the body's too. So only what the initial value shares
      # with the body's result (or what a call in the body computes, where
      # the body ran) surely reaches it.
      last = loop_rules.after_trips(initial, root, passed_on, ())
      merged = loop_rules.at_most(last, initial, self._in_loop.get(index, 0))
    return merged

  def _conditional(
    self, i: Instruction, operands: list[Value], context: _Context
  ) -> Value:
    key = (context.chain, i.name)
    index = self._conditional_index.setdefault(
      key, len(self._conditional_index)
    )
    decision = algebra.as_leaf(operands[0]) if operands else NOTHING
    self.live |= decision.deps
    taken = range(len(i.branches))
    picked = algebra.branch_picked(decision, len(i.branches))
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
    return algebra.met(results, decision, inside)


def _counting(i: Instruction, operands: list[Value], found: Leaf) -> Leaf:
  """`found`, the constant that an ``add`` or a ``compare`` of constants
  folds to, still telling a loop counter's step or bound where it is one
  (a one-trip loop's body sees its counter's start, a constant), so that
  its trip count is still read."""
  if i.opcode == "add":
    origin = algebra.add(operands, i.shape).origin
  else:
    origin = algebra.compare(i.direction, operands).origin
  return found if origin is None else algebra.replace(found, origin=origin)


_PRODUCTS = frozenset({"multiply", "reduce", "dot"})
"""Opcodes that may be integer products (`folding.product_wraps_to_zero`)."""


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
    *_PRODUCTS,
    "pad",
    *algebra.FORWARDING,
    *algebra.REARRANGING,
    *algebra.IDEMPOTENT,
    *algebra.ABSORBING,
    *algebra.SLICING,
    *algebra.DATA_OPERANDS,
  }
)
"""The opcodes that `MayOrder._instruction` has a case for; any other
is `MayOrder._plain`."""


def _one(dimensions: tuple[int, ...] | None) -> int | None:
  """The one dimension a ``concatenate`` joins along; None if unknown."""
  return (
    dimensions[0] if dimensions is not None and len(dimensions) == 1 else None
  )
