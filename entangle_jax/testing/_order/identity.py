"""Which object each native call touches: its object operand, followed back
through the module to the value that holds the handle.

The object operand is the one its target's declaration names
(``object = k``); inside a ``Resource``, by default, the first operand,
where ``Resource`` hands the call its token. A call with neither touches
the whole library (no `ObjectRef`).

From there, back through everything that passes the handle on unchanged:
``bitcast``, ``copy`` and ``reshape``; tuples and ``get-tuple-element``;
a static one-element ``slice`` (an element of an array of handles), also
inside a fusion, and an element of a ``broadcast`` of one handle (every
element of ``[h, h, h]`` is ``h``, which ``vmap`` of a call on one handle
makes); ``entangle``'s payload; results declared to hand back the
object (``returns_object``), and a ``Resource`` write's result, which is
the next token of the same object; loop state the body carries unchanged
(or hands back the same object), and the parameters of calls,
conditionals and fusions whose every caller passes the same value. What
it cannot see through (an entry parameter, a dynamic slice, another call's
result) is the value itself: calls that reach one value touch one object,
and calls that reach different values may still touch one.

What one step back through a construct is, is its rule's `Identity`
(``rules.rule_for(opcode).identity``, rules 6 to 21); `ObjectFinder`
dispatches on it and tests no opcode.

The walk back nests as deeply as the program does (a chain of calls, loops
in loops, every branch of a conditional seen from the loop around it), so
it keeps its pending steps on a list of its own (`ObjectFinder._run`), not
on Python's stack, as does the walk that tells values apart per device
(`_DeviceValues._run`): no depth of program reaches the interpreter's
recursion limit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator
from typing import TypeVar

from entangle_jax._src import access_policy
from entangle_jax._src.access_policy import Footprint
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing._hlo import Instruction, Module, compact_operands
from entangle_jax.testing._order import rules
from entangle_jax.testing._order.dataflow import Dataflow
from entangle_jax.testing._order.edges import Computation, Path
from entangle_jax.testing._order.objects import ObjectRef, Root

# (root, element) where a value comes from; for a computation's own
# parameter (when asked not to leave it), root is ("parameter", number,
# path).
_Found = tuple[Root, int | None]
# A question the walk asks: where element `path` of instruction `n` of
# computation `name` comes from, leaving it at a parameter or not; the
# arguments of `ObjectFinder._root`, (name, n, path, leave).
_Key = tuple[str, int, Path, bool]
# A step of the walk that answers _Found: a generator that yields each
# `_Key` it needs, is sent back that key's `_Found`, and returns its own
# answer (`ObjectFinder._run` drives it).
_Walk = Generator[_Key, _Found, _Found]
_T = TypeVar("_T")

Identity = rules.Identity
DeviceValue = rules.DeviceValue


class ObjectFinder:
  """Finds the `ObjectRef` of native calls of one module.

  Args:
    module: the parsed module.
    dataflow: its `Dataflow` (for the computations' structure).
    declarations: what the targets declare.
  """

  def __init__(
    self,
    module: Module,
    dataflow: Dataflow,
    declarations: Declarations,
  ):
    self._module = module
    self._dataflow = dataflow
    self._declarations = declarations
    self._memo: dict[_Key, _Found] = {}
    self._callers: dict[str, list[tuple[Instruction, int | None]]] | None = None
    self._checked: set[tuple[str, str]] = set()
    self._device_values: _DeviceValues | None = None
    self._footprints: dict[tuple[str | None, str, int], Footprint] = {}

  # The object of a call -----------------------------------------------------

  def footprint(self, i: Instruction) -> Footprint:
    """What the one access policy says custom call `i` touches, its
    object not yet followed (`entangle_jax._src.access_policy`): which
    operand names it, which results hand it back, by which declaration.
    Asked once per target, ``op_name`` and number of operands."""
    key = (i.target, i.op_name, len(i.operands))
    found = self._footprints.get(key)
    if found is None:
      found = self._footprints[key] = access_policy.footprint(
        i.target,
        self._declarations,
        operands=(None,) * len(i.operands),
        op_name=i.op_name,
      )
    return found

  def object_operand(self, i: Instruction) -> int | None:
    """The operand of custom call `i` that names its object, or None.

    Raises:
      ValueError: its declaration names an operand `i` does not have.
    """
    found = self.footprint(i)
    access_policy.check_object_operand(
      found, len(i.operands), f"%{i.name} (line {i.line})"
    )
    return found.operand

  def object_of(self, i: Instruction) -> ObjectRef | None:
    """The object custom call `i` touches, or None: the whole library."""
    operand = self.object_operand(i)
    if operand is None:
      return None
    computation = self._dataflow.computation(i.computation)
    self._check_returned(
      i, computation.instructions[computation.index[i.operands[operand]]]
    )
    position = computation.index[i.operands[operand]]
    root, element = self._root(i.computation, position, (), True)
    found = self.footprint(i)
    # A declaration's promise that distinct elements are distinct objects
    # holds only for arrays the program did not build: ops of the program
    # (a tile, a concatenate, a gather...) can repeat a handle.
    distinct = found.distinct_elements and self._unbuilt(root)
    given = computation.instructions[position]
    dims = given.dims
    # A constant scalar names one object. Where no declaration says which
    # operand is the handle (a Resource's first operand), only an integer
    # one is taken for a handle: a float constant there is data, and two
    # different ones prove nothing.
    declared = found.declared_object
    scalar = (
      dims is not None
      and all(d == 1 for d in dims)
      and (declared or given.shape.startswith(("s", "u")))
    )
    argument = self._argument(root)
    return ObjectRef(
      root,
      element,
      distinct,
      scalar,
      argument is not None and argument.tiled,
      argument is not None and argument.replicated,
      per_device=self._per_device(root, element),
      label=argument.op_name if argument is not None else "",
    )

  def _unbuilt(self, root: Root) -> bool:
    """Whether `root` is an array of handles the program did not build
    from other handles: an argument of the module (an entry parameter),
    or what a native call returned (a binding's create)."""
    if root[0] != "value":
      return False
    computation = self._dataflow.computation(root[1])
    found = computation.instructions[computation.index[root[2]]]
    if found.opcode == "parameter":
      return root[1] == self._module.entry
    return found.opcode == "custom-call" and found.target != ENTANGLE_TARGET

  def _per_device(self, root: Root, element: int | None) -> bool:
    """Whether `root` is built to hold another value on each device of an
    SPMD module (`ObjectRef.per_device`)."""
    if self._module.devices < 2 or root[0] != "value" or root[3]:
      return False
    if element is not None:
      return False
    if self._device_values is None:
      self._device_values = _DeviceValues(self._module, self._dataflow, self)
    return self._device_values.of(root[1], root[2]) == _DEVICE

  def _argument(self, root: Root) -> Instruction | None:
    """The entry parameter that `root` is, if it is one (all of it)."""
    if root[0] != "value" or root[1] != self._module.entry or root[3]:
      return None
    computation = self._dataflow.computation(root[1])
    found = computation.instructions[computation.index[root[2]]]
    parameter = rules.rule_for(found.opcode).identity is Identity.PARAMETER
    return found if parameter else None

  def _returned(self, i: Instruction) -> tuple[int, ...] | None:
    """The results of custom call `i` that hand back its object (None:
    all of them), or ``()`` for none."""
    found = self.footprint(i)
    operand = found.operand
    if (
      found.declared_object
      and found.returns_object
      and operand is not None
      and operand < len(i.operands)
    ):
      computation = self._dataflow.computation(i.computation)
      given = computation.index[i.operands[operand]]
      self._check_returned(i, computation.instructions[given])
    return found.returns_object

  def _check_returned(self, i: Instruction, given: Instruction) -> None:
    """Raises unless every result that the declaration of custom call `i`
    says hands back its object exists and has the shape and type of the
    object operand `given`: a declared result that is something else
    would make later calls on it the same object, and hide their races."""
    found = self.footprint(i)
    declaration = found.declaration
    returned = found.returns_object if found.declared_object else None
    if declaration is None or not returned:
      return
    key = (i.computation, i.name)
    if key in self._checked:
      return
    results = result_shapes(i.shape)
    where = (
      f"{declaration.source}: target {declaration.pattern!r}: "
      f"returns_object = {list(returned)}"
    )
    for r in returned:
      if r >= len(results):
        raise ValueError(
          f"{where} names result {r}, but %{i.name} (line {i.line}) has "
          f"{len(results)} result{'s' * (len(results) != 1)} ({i.shape})"
        )
      if _kind(results[r]) != _kind(given.shape):
        raise ValueError(
          f"{where} names result {r}, but %{i.name} (line {i.line}) "
          f"returns {_bare(results[r])} there, not the object operand's "
          f"{_bare(given.shape)} (operand {found.operand}, "
          f"%{given.name}): a result that hands back the object is the "
          "handle itself"
        )
    self._checked.add(key)

  # Following a value back ---------------------------------------------------

  def _root(self, name: str, n: int, path: Path, leave: bool) -> _Found:
    """Where element `path` of instruction `n` of computation `name`
    comes from; at a parameter, from the callers too when `leave`."""
    key = (name, n, path, leave)
    found = self._memo.get(key)
    if found is None:
      found = self._run(self._find(*key))
      self._memo[key] = found
    return found

  def _run(self, walk: Generator[_Key, _Found, _T]) -> _T:
    """Drives `walk` (and every step it asks for) to its answer, one step
    at a time: the steps waiting for an answer wait on a list, so a walk
    back through thousands of links or hundreds of nested computations
    takes no more of Python's stack than one step does.

    The steps are taken in the order a recursive walk would take them, a
    key not yet answered taken anew wherever it is asked (also while an
    earlier asking of it waits): every answer is a function of its key
    alone, and the memo holds only answers, never a placeholder."""
    # Each pending step, with the key it answers (None for `walk`).
    pending: list[tuple[_Key | None, Generator[_Key, _Found, object]]] = [
      (None, walk)
    ]
    answer: _Found | None = None  # None: start the step on top.
    while True:
      key, step = pending[-1]
      try:
        asked = step.send(answer) if answer is not None else next(step)
      except StopIteration as finished:
        pending.pop()
        if key is None:
          return finished.value
        answer = finished.value
        self._memo[key] = answer
        continue
      answer = self._memo.get(asked)
      if answer is None:
        pending.append((asked, self._find(*asked)))

  def _find(self, name: str, n: int, path: Path, leave: bool) -> _Walk:
    """Element `path` of instruction `n`, followed back one construct as
    its rule's `Identity` says (``rules.rule_for``)."""
    computation = self._dataflow.computation(name)
    i = computation.instructions[n]
    identity = rules.rule_for(i.opcode).identity

    def operand(k: int, at: Path = ()) -> _Key:
      return name, computation.index[i.operands[k]], at, leave

    if identity is Identity.SAME_BYTES and i.operands:  # Rule 12.
      if not _default_layouts(
        i, computation.instructions[computation.index[i.operands[0]]]
      ):
        return _value(i, path)  # Elements move: slices of it are others.
      return (yield operand(0, path))
    if identity is Identity.PASSES_ON and i.operands:  # Rule 18.
      return (yield operand(0, path))
    if identity is Identity.TUPLE_ELEMENT and i.tuple_index is not None:
      return (yield operand(0, (i.tuple_index, *path)))  # Rule 11.
    if identity is Identity.TUPLE and path and path[0] < len(i.operands):
      return (yield operand(path[0], path[1:]))  # Rule 10.
    if identity is Identity.CONSTANT and not path:  # Rule 19.
      return ("constant", _constant_value(i)), None
    if identity is Identity.STATIC_ELEMENT and not path:  # Rule 20.
      element = yield from self._element(computation, i, leave)
      return element or _value(i, path)
    if identity is Identity.PARAMETER and i.parameter_number is not None:
      if not leave:  # Rule 9.
        return ("parameter", i.parameter_number, path), None
      return (yield from self._through_callers(name, i, path))
    if identity is Identity.CALL_RESULT:  # Rule 7.
      return (yield from self._through_call(computation, i, path, leave))
    if identity is Identity.LOOP_CARRIED and i.body is not None:  # Rule 13.
      if (yield from self._carried(i.body, path)):
        return (yield operand(0, path))
      return _value(i, path)
    if identity is Identity.CALLEE_ROOT and i.callees:  # Rules 8, 15.
      return (
        yield from self._out_of(i.callees[0], None, computation, i, path, leave)
      )
    if identity is Identity.BRANCHES_AGREE and i.branches:  # Rule 14.
      found = set()
      for k, b in enumerate(i.branches, start=1):
        found.add((yield from self._out_of(b, k, computation, i, path, leave)))
      return found.pop() if len(found) == 1 else _value(i, path)
    # NEW_VALUE (rule 6 and the rest); BROADCAST_ONE's elements are picked
    # from the value (`_pick`, rule 21).
    return _value(i, path)

  def _element(
    self, computation: Computation, i: Instruction, leave: bool
  ) -> Generator[_Key, _Found, _Found | None]:
    """A one-element static slice of an array: that element of it."""
    base = computation.instructions[computation.index[i.operands[0]]]
    dims, starts, size = base.dims, i.slice_starts, i.dims
    if (
      dims is None or starts is None or size is None or len(starts) != len(dims)
    ):
      return None
    if any(d != 1 for d in size):
      return None
    root, element = yield (
      computation.name,
      computation.index[base.name],
      (),
      leave,
    )
    if element is not None:
      return None
    flat = 0
    for start, dim in zip(starts, dims, strict=True):
      flat = flat * dim + start
    return (yield from self._pick(root, flat))

  def _pick(self, root: Root, element: int) -> _Walk:
    """Element `element` of the array `root`: where the one value comes
    from when `root` broadcasts a single element, else that element."""
    single = yield from self._broadcast_source(root)
    return single if single is not None else (root, element)

  def _broadcast_source(
    self, root: Root
  ) -> Generator[_Key, _Found, _Found | None]:
    """Where the one value comes from that `root`, a ``broadcast`` of a
    single element, holds in each of its elements; None for any other
    root. (Declared distinct elements must not tell its elements apart.)

    The broadcast may lie in another computation than the caller's (a
    fusion's), so its operand is followed out through that computation's
    callers: the answer is a value or a constant, never a ``parameter``
    root that the caller would take for one of its own."""
    if root[0] != "value" or root[3]:
      return None
    computation = self._dataflow.computation(root[1])
    i = computation.instructions[computation.index[root[2]]]
    broadcast = rules.rule_for(i.opcode).identity is Identity.BROADCAST_ONE
    if not broadcast or len(i.operands) != 1:  # Rule 21.
      return None
    source = computation.instructions[computation.index[i.operands[0]]]
    if source.dims is None or math.prod(source.dims) != 1:
      return None
    return (yield root[1], computation.index[source.name], (), True)

  def _through_call(
    self, computation: Computation, i: Instruction, path: Path, leave: bool
  ) -> _Walk:
    """A custom call's result: entangle's payload, or the object of a call
    that hands it back."""
    tupled = i.shape.startswith("(")
    result = path[0] if tupled and path else 0
    rest = path[1:] if tupled and path else path
    if tupled and not path:
      return _value(i, path)
    if i.target == ENTANGLE_TARGET:
      # Payload operand k is aliased to result k.
      if result in i.aliased_operands and result < len(i.operands):
        k = computation.index[i.operands[result]]
        return (yield computation.name, k, rest, leave)
      return _value(i, path)
    returned = self._returned(i)
    if (returned is None or result in returned) and not rest:
      operand = self.object_operand(i)
      if operand is not None:
        k = computation.index[i.operands[operand]]
        return (yield computation.name, k, (), leave)
    return _value(i, path)

  def _carried(self, body: str, path: Path) -> Generator[_Key, _Found, bool]:
    """Whether a loop body hands back element `path` of its state as the
    same object it was given."""
    inner = self._dataflow.computation(body)
    found = yield body, inner.root, path, False
    return found == (("parameter", 0, path), None)

  def _out_of(
    self,
    callee: str,
    operand_of_parameter_0: int | None,
    computation: Computation,
    i: Instruction,
    path: Path,
    leave: bool,
  ) -> _Walk:
    """Element `path` of what `callee`'s root holds, seen from its caller
    `i`: a parameter of it becomes the operand passed for it."""
    inner = self._dataflow.computation(callee)
    root, element = yield callee, inner.root, path, False
    if root[0] != "parameter":
      return root, element
    _, number, at = root
    k = _passed_operand(number, operand_of_parameter_0, len(i.operands))
    if k is None:
      return _value(i, path)
    position = computation.index[i.operands[k]]
    outer_root, outer_element = yield computation.name, position, at, leave
    if element is not None:
      if outer_element is not None:
        return _value(i, path)
      return (yield from self._pick(outer_root, element))
    return outer_root, outer_element

  def _through_callers(self, name: str, i: Instruction, path: Path) -> _Walk:
    """A parameter of computation `name`: what every caller passes for it,
    when all pass the same; else the parameter itself."""
    number = i.parameter_number
    assert number is not None
    found: set[_Found] = set()
    for caller, offset in self._callers_of(name):
      if (
        rules.rule_for(caller.opcode).parameters is rules.Parameters.LOOP_STATE
      ):
        if caller.body is None or not (
          yield from self._carried(caller.body, path)
        ):
          return _value(i, path)
        k = 0
      else:
        k = _passed_operand(number, offset, len(caller.operands))
        if k is None:
          return _value(i, path)
      outer = self._dataflow.computation(caller.computation)
      found.add(
        (yield caller.computation, outer.index[caller.operands[k]], path, True)
      )
    if len(found) == 1:
      return found.pop()
    return _value(i, path)

  def _callers_of(self, name: str) -> list[tuple[Instruction, int | None]]:
    """Who calls computation `name`, and which of its operands is the
    callee's parameter 0 (None: parameter k is operand k)."""
    if self._callers is None:
      self._callers = {}
      for body in self._module.computations.values():
        for i in body:
          if not (i.callees or i.branches or i.condition or i.body):
            continue  # Calls nothing: no pairs (most instructions).
          pairs = rules.callee_parameters(i)
          if rules.rule_for(i.opcode).identity is Identity.CALLEE_ROOT:
            # A fusion's parameter k is operand k too (rule 8).
            pairs = [(None, c) for c in i.callees]
          for offset, callee in pairs:
            self._callers.setdefault(callee, []).append((i, offset))
    return self._callers.get(name, [])


# How a value varies over the devices of an SPMD module (`_DeviceValues`):
_ONE = "one"  # the same on every device, every element alike
_SAME = "same"  # the same on every device
_INDEX = "index"  # the same on every device; 1-D, element k one-to-one in k
_DEVICE = "device"  # each element a one-to-one function of the device
_UNIFORM = (_ONE, _SAME, _INDEX)
_ELEMENTWISE = frozenset(
  {
    DeviceValue.OFFSET,
    DeviceValue.MASK,
    DeviceValue.SCALE,
    DeviceValue.ELEMENTWISE,
  }
)
"""What makes a value alike on every device of operands alike on every
device, where nothing else does (rule 30)."""
_INT_WIDTH = re.compile(r"[su](\d+)\[")
# A value `_DeviceValues` asks about: (computation, instruction); and a
# step that answers one, asking for the values it depends on.
_ValueKey = tuple[str, str]
_ValueWalk = Generator[_ValueKey, str | None, str | None]


class _DeviceValues:
  """Which values of an SPMD module are the same on every device, and
  which are built to differ on each: one value every device holds alike,
  offset (``add``, ``subtract``, ``xor``) by a one-to-one function of the
  device's number. That number is ``partition-id`` where partitions are
  all the devices (or ``replica-id`` where replicas are), widened by
  ``convert``, masked by an ``and`` that keeps every device's number
  (JAX's ``axis_index``), scaled by a constant that keeps them apart, or
  used to pick element k of an ``iota`` (plus
  a value alike everywhere) by a ``dynamic-slice`` (a replicated array
  split over the devices). Anything else: unknown (None). What each
  construct does is its rule's `DeviceValue` (rules 22 on, and the
  column of rules 8-21), which `_find` dispatches on."""

  def __init__(self, module: Module, dataflow: Dataflow, finder: ObjectFinder):
    self._module = module
    self._dataflow = dataflow
    self._finder = finder
    self._memo: dict[tuple[str, str], str | None] = {}

  def of(self, name: str, instruction: str) -> str | None:
    key = (name, instruction)
    if key not in self._memo:
      self._memo[key] = None  # A cycle (a loop's state) is unknown.
      self._memo[key] = self._run(key)
    return self._memo[key]

  def _run(self, key: _ValueKey) -> str | None:
    """The answer for `key`, each value it depends on found first, in the
    order a recursive walk would take them; the steps waiting for an
    answer wait on a list, not on Python's stack (as
    `ObjectFinder._run`'s). A value asked for while it is being found (a
    cycle) is unknown, None, as the memo holds for it until found."""
    pending = [(key, self._find(*key))]
    answer: str | None = None
    fresh = True  # Whether the step on top is yet to start.
    while True:
      key, step = pending[-1]
      try:
        asked = next(step) if fresh else step.send(answer)
      except StopIteration as finished:
        pending.pop()
        self._memo[key] = finished.value
        if not pending:
          return finished.value
        fresh, answer = False, finished.value
        continue
      if asked in self._memo:
        fresh, answer = False, self._memo[asked]
      else:
        self._memo[asked] = None  # A cycle (a loop's state) is unknown.
        pending.append((asked, self._find(*asked)))
        fresh = True

  def _find(self, name: str, instruction: str) -> _ValueWalk:
    computation = self._dataflow.computation(name)
    i = computation.instructions[computation.index[instruction]]
    devices = self._module.devices

    def operand(k: int) -> _ValueKey:
      return name, i.operands[k]

    # What the construct does to a device value: its rule's column.
    value = rules.rule_for(i.opcode).device_value
    if value is DeviceValue.PARTITION_NUMBER:  # Rule 22.
      return _DEVICE if self._module.partitions == devices else None
    if value is DeviceValue.REPLICA_NUMBER:  # Rule 23.
      return _DEVICE if self._module.partitions == 1 else None
    if value is DeviceValue.CONSTANT:  # Rule 19.
      return _ONE if i.dims is not None and math.prod(i.dims) == 1 else _SAME
    if value is DeviceValue.INDEX:  # Rule 24.
      return _INDEX if i.dims is not None and len(i.dims) == 1 else _SAME
    if value is DeviceValue.PARAMETER and i.parameter_number is not None:
      return (yield from self._parameter(name, i))  # Rule 9.
    if not i.operands:
      return None
    if value is DeviceValue.PASSES_ON:  # Rules 12, 18, 25.
      found = yield operand(0)
      if found in (_DEVICE, _INDEX) and not _keeps_every_value(
        computation.instructions[computation.index[i.operands[0]]], i
      ):
        return None
      return found
    if value is DeviceValue.UNIFORM_OF_INDEX:  # Rules 20, 21.
      found = yield operand(0)
      return _SAME if found == _INDEX else found
    if value is DeviceValue.OFFSET and len(i.operands) == 2:  # Rule 26.
      a = yield operand(0)
      b = yield operand(1)
      if _DEVICE in (a, b):
        return _DEVICE if {a, b} - {_DEVICE} <= set(_UNIFORM) else None
      if a in _UNIFORM and b in _UNIFORM:
        if _INDEX in (a, b) and _ONE in (a, b):
          return _INDEX
        return _ONE if a == b == _ONE else _SAME
      return None
    if value is DeviceValue.MASK and len(i.operands) == 2:  # Rule 27.
      a = yield operand(0)
      b = yield operand(1)
      if _DEVICE in (a, b):
        mask = i.operands[1 if a == _DEVICE else 0]
        held = computation.instructions[computation.index[mask]]
        return _DEVICE if self._keeps_devices(held) else None
    if value is DeviceValue.SCALE and len(i.operands) == 2:  # Rule 28.
      a = yield operand(0)
      b = yield operand(1)
      if _DEVICE in (a, b):
        factor = i.operands[1 if a == _DEVICE else 0]
        held = computation.instructions[computation.index[factor]]
        return _DEVICE if self._scales_apart(held) else None
    if value is DeviceValue.PICK:  # Rule 29.
      operand_values = []
      for k in range(len(i.operands)):
        operand_values.append((yield operand(k)))
      array, *starts = operand_values
      size = i.dims
      if (
        array == _INDEX
        and starts == [_DEVICE]
        and size is not None
        and math.prod(size) == 1
      ):
        given = computation.instructions[computation.index[i.operands[0]]]
        if given.dims is not None and given.dims[0] >= devices:
          return _DEVICE
      found = [array, *starts]
      return _SAME if all(f in _UNIFORM for f in found) else None
    if value in _ELEMENTWISE:  # Rules 26-28 otherwise, and 30.
      found = []
      for k in range(len(i.operands)):
        found.append((yield operand(k)))
      if all(f == _ONE for f in found):
        return _ONE
      return _SAME if all(f in _UNIFORM for f in found) else None
    if value is DeviceValue.CALLEE_ROOT and i.callees:  # Rules 8, 15.
      callee = self._dataflow.computation(i.callees[0])
      root = callee.instructions[callee.root]
      return (yield callee.name, root.name)
    return None

  def _parameter(self, name: str, i: Instruction) -> _ValueWalk:
    """An entry parameter: alike on every device when the module says it
    is replicated, or it is one element (a scalar cannot be split). A
    callee's: what every caller passes for it, where all agree."""
    if name == self._module.entry:
      if i.tiled:
        return None
      one = i.dims is not None and math.prod(i.dims) == 1
      if one:
        return _ONE
      return _SAME if i.replicated else None
    found = set()
    for caller, offset in self._finder._callers_of(name):
      rule = rules.rule_for(caller.opcode)
      if rule.parameters is rules.Parameters.LOOP_STATE:
        return None
      k = _passed_operand(i.parameter_number or 0, offset, len(caller.operands))
      if k is None:
        return None
      found.add((yield caller.computation, caller.operands[k]))
    return found.pop() if len(found) == 1 else None

  def _scales_apart(self, factor: Instruction) -> bool:
    """Whether ``multiply`` by constant `factor` keeps every device's
    number apart: not zero, and small enough that no product wraps (a
    shard's size, as a split ``iota`` starts at ``partition-id * n``)."""
    value = _int_constant(factor)
    return value is not None and 0 < abs(value) * self._module.devices < 2**31

  def _keeps_devices(self, mask: Instruction) -> bool:
    """Whether ``and`` with constant `mask` keeps every device's number:
    its low bits all set, as many as the numbers need."""
    value = _int_constant(mask)
    if value is None:
      return False
    return value >= self._module.devices - 1 and (value & (value + 1)) == 0


def _int_constant(i: Instruction) -> int | None:
  """The value of an integer scalar ``constant``, or None."""
  if i.opcode != "constant" or _INT_WIDTH.match(i.shape) is None:
    return None
  try:
    return int((i.literal or "").strip())
  except ValueError:
    return None


def _keeps_every_value(given: Instruction, result: Instruction) -> bool:
  """Whether a ``convert``, ``bitcast``, ``copy`` or ``reshape`` from
  `given` to `result` keeps values apart: integers no narrower, and an
  array's elements in their order (a 1-D or one-element shape)."""
  a, b = _INT_WIDTH.match(given.shape), _INT_WIDTH.match(result.shape)
  if a is None or b is None or int(b.group(1)) < int(a.group(1)):
    return False
  dims = given.dims, result.dims
  return all(d is not None and len([n for n in d if n != 1]) <= 1 for d in dims)


def _passed_operand(number: int, offset: int | None, count: int) -> int | None:
  """The operand of a caller with `count` operands that its callee's
  parameter `number` holds: operand `number`, or, for a callee that takes
  one operand (`offset`, as `rules.callee_parameters` gives it), that one
  as parameter 0; None when the caller passes none."""
  k = number if offset is None else (offset if number == 0 else None)
  return k if k is not None and k < count else None


_BITS = re.compile(r"[su](\d+)\[")


def _constant_value(i: Instruction) -> object:
  """A constant's value, for comparing: an integer scalar (or one-element
  array: ``3`` and ``{3}`` alike) as its bits, modulo its width (so s32
  -1 and u32 4294967295 are one value); anything else as its text."""
  text = (i.literal or "").replace("{", "").replace("}", "").strip()
  bits = _BITS.match(i.shape)
  try:
    value = int(text)
  except ValueError:
    return text
  return value % (1 << int(bits.group(1))) if bits else text


def result_shapes(shape: str) -> list[str]:
  """The results of an instruction of shape `shape`: each element of a
  tuple shape, or the one array."""
  elements = compact_operands.tuple_elements(shape)
  return [shape.strip()] if elements is None else elements


_LAYOUT_TEXT = re.compile(r"(?<=\])\{[^}]*\}")


def _bare(shape: str) -> str:
  """`shape` without layouts: the type and dimensions alone."""
  return _LAYOUT_TEXT.sub("", shape).replace(" ", "")


_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([\d,]*)\]")


def _kind(shape: str) -> tuple[str, tuple[str, ...]] | str:
  """What a handle's shape must keep from operand to result: its type
  (for an integer, its width), and its dimensions but those of size 1
  (``s32[1]`` holds what ``s32[]`` does, as a reshape passes it on); a
  tuple's text as it is."""
  bare = _bare(shape)
  found = _ARRAY.fullmatch(bare)
  if found is None:
    return bare
  dims = tuple(d for d in found.group(2).split(",") if d and d != "1")
  kind = found.group(1)
  # Signed and unsigned integers of one width hold the same bits.
  return re.sub(r"^[su](?=\d)", "int", kind), dims


_LAYOUT = re.compile(r"\{([\d,]*)")


def _default_layouts(*instructions: Instruction) -> bool:
  """Whether each array's layout is the default (major to minor), so a
  bitcast between them keeps each element's logical index."""
  for i in instructions:
    dims = i.dims
    if dims is None:
      return False
    found = _LAYOUT.search(i.shape[i.shape.find("]") :])
    if found and found.group(1):
      order = [int(d) for d in found.group(1).split(",")]
      if order != list(range(len(dims) - 1, -1, -1)):
        return False
  return True


def _value(i: Instruction, path: Path) -> _Found:
  """The value itself: element `path` of `i`'s result."""
  return ("value", i.computation, i.name, path), None
