"""One rank's communicating calls, in program order, and which values are
the same on every rank: what the cross-rank check
(`entangle_jax.testing.races_across`) compares between ranks.

`RankProgram` reads one optimized module:

* its communicating calls: XLA's collectives (by opcode) and custom calls
  whose target is declared to communicate (`Communication`), each with a
  fingerprint (kind, target or opcode, shapes, reduction, what must
  match) and the values that are compared up to a consistent renaming
  (a communicator's or a reduction's handle differs in each process);
* the order of those calls, in a tree: a loop or a conditional that
  holds communicating calls is one item with its calls inside. Two calls
  (or such items) of one computation that nothing orders (the order
  analysis, `OrderAnalysis.precedes`) are `Unordered`: the ranks may make
  them in different orders, a possible deadlock;
* whether each such loop's or conditional's decision is the same on every
  rank: entry parameters are rank-local (each process passes its own
  inputs), constants are the same everywhere, and so are the results of
  collectives that give every rank the same result
  (`Communication.same_result`: allreduce, allgather, bcast); anything
  computed from values the same everywhere is too. A native call's result
  is rank-local unless declared the same (it may read the process's
  state); ``partition-id`` and ``replica-id`` are rank-local.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from entangle_jax._src import access_policy
from entangle_jax._src.targets import sources
from entangle_jax._src.targets.communication import (
  XLA_COLLECTIVES,
  XLA_DONE,
  Communication,
  Place,
)
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax._src.targets.library_kernels import is_library_target
from entangle_jax._src.targets.names import (
  DEBUG_CALLBACK_PRIMITIVES,
  ENTANGLE_TARGET,
  is_host_callback,
  is_sanitizer_counter,
)
from entangle_jax.testing import _hlo
from entangle_jax.testing._analysis import call_attributes, same_module
from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._analysis.order_analysis import OrderAnalysis
from entangle_jax.testing._analysis.rank_values import (
  DecisionSlice,
  PureValues,
  Signature,
  inlined_fusions,
)
from entangle_jax.testing._hlo.instruction import picked_branch, scalar_literal
from entangle_jax.testing._hlo.module_text import CompiledModule, module_text

# Whether a value is the same on every rank: True, False, or one such tree
# per element of a tuple.
Same = bool | tuple

_LOCAL_SOURCES = frozenset(
  {
    "partition-id",
    "replica-id",
    "rng",
    "rng-get-and-update-state",
    "rng-bit-generator",
    "infeed",
    "recv",
    "recv-done",
    "send",
    "send-done",
    "all-to-all",
    "ragged-all-to-all",
    "reduce-scatter",
    "collective-permute",
    "collective-permute-start",
    "collective-permute-done",
  }
)
"""Opcodes whose result may differ between ranks whatever their operands."""


MAY_COMMUNICATE = Communication("collective")
"""What an undeclared native call or a host callback with effects is
taken for: a call every rank must make alike, in one order."""


def _all_same(value: Same) -> bool:
  if isinstance(value, bool):
    return value
  return all(_all_same(v) for v in value)


def _meet(a: Same, b: Same) -> Same:
  """Same only where both are."""
  if a is True:
    return b
  if b is True:
    return a
  if a is False or b is False:
    return False
  if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
    return tuple(_meet(x, y) for x, y in zip(a, b, strict=True))
  return False


def _element(value: Same, index: int | None) -> Same:
  if isinstance(value, bool) or index is None:
    return value
  return value[index] if index < len(value) else False


def _at(value: Same, path: tuple[int, ...]) -> Same:
  for index in path:
    value = _element(value, index)
  return value


@dataclasses.dataclass(frozen=True, order=True)
class EntryParameter:
  """An entry parameter of a module, as a call's operand reads it."""

  number: int
  type: str
  """Its shape and element type, layout left out (``f32[4]``)."""
  name: str

  def __str__(self) -> str:
    return f"{self.number} (%{self.name})"


@dataclasses.dataclass(frozen=True)
class Call:
  """One communicating call of a rank."""

  op: Op
  communication: Communication
  fingerprint: tuple[tuple[str, object], ...]
  """What must be equal on every rank: kind, target or opcode, shapes,
  reduction, the values of `Communication.match`."""
  renamed: tuple[tuple[str, object], ...]
  """Values equal on every rank up to a consistent renaming: the
  communicator's, the reduction's."""
  peer: int | None = None
  tag: int | None = None
  source: int | None = None
  source_tag: int | None = None
  shapes: str = ""
  """Its operands' (a receive's results') shapes, as the module has them;
  the fingerprint of a native call holds their counts."""
  sent: str = ""
  """What a send (or a sendrecv) sends, as MPI matches it: its data
  operands' element types and counts (``f32[8]``)."""
  received: str = ""
  """What a receive (or a sendrecv) receives into, so: its data
  results'."""
  origin: str = ""
  """What its data operands are computed from (`DecisionSlice.origin`):
  which entry parameters, constants, shared results and ops, up to the
  instructions' names. Two calls of one type are told apart by it."""
  reads: tuple[frozenset[EntryParameter], ...] = ()
  """Per data operand (tokens left out), the entry parameters its value
  is computed from: a caller may pass two of one type the other way round
  on one rank, which no origin shows (`origins.argument_swaps`)."""

  @property
  def kind(self) -> str:
    return self.communication.kind

  @property
  def what(self) -> str:
    """The call's target or opcode."""
    return self.op.target or self.op.instruction.opcode

  def label(self) -> str:
    """One line naming the call: what, its shapes, where."""
    shapes = self.shapes or dict(self.fingerprint).get("shapes", "")
    where = self.op.location or f"%{self.op.name}"
    if self.kind in ("send", "recv"):
      direction = "to" if self.kind == "send" else "from"
      peer = f" {direction} rank {self.peer}, tag {self.tag or 0}"
    elif self.kind == "sendrecv":
      peer = f" to rank {self.peer}, from rank {self.source}"
    else:
      peer = ""
    kind = self.kind
    if self.communication is MAY_COMMUNICATE:
      kind = "possibly communicating (undeclared)"
    return f"{kind} {self.what}{peer} {shapes} at {where}".replace("  ", " ")


@dataclasses.dataclass(frozen=True)
class Loop:
  """A while loop that holds communicating calls."""

  op: Op
  body: tuple[Item, ...]
  """Its condition's calls, then its body's."""
  decision: str | None
  """None when its decision is the same on every rank; else the
  rank-local value it depends on, in words."""
  signature: Signature | None = None
  """How its decision is computed (`rank_values`): the ranks' loops at
  one step must have equal signatures, else their constants (a trip
  count) differ between ranks."""
  trips: int | None = None
  """How many times it runs, where XLA knows (``known_trip_count``) and
  its condition makes no communicating call: the simulation may then
  run its body that many times (`Simulation.run`)."""


@dataclasses.dataclass(frozen=True)
class Branch:
  """A conditional that holds communicating calls."""

  op: Op
  branches: tuple[tuple[Item, ...], ...]
  decision: str | None
  """As `Loop.decision`."""
  signature: Signature | None = None
  """As `Loop.signature`: its predicate's or branch index's."""


Item = Call | Loop | Branch


@dataclasses.dataclass(frozen=True)
class Unordered:
  """Two communicating calls (or loops or conditionals that hold some) of
  one rank that nothing orders: ranks may make them in different orders."""

  first: Op
  second: Op


class BeyondTheModel(ValueError):
  """A program the cross-rank check does not model (a sendrecv with
  MPI_PROC_NULL on one side, too many matchings of receives from any
  source): it cannot answer, which is no crash of the check."""


class RankProgram:
  """One rank's module, read for the cross-rank check.

  Args:
    compiled: a ``jax.stages.Compiled``, a ``jax.stages.Lowered`` or the
      optimized HLO text, as `races` takes it.
    declarations: what the targets do (`Declarations`); those in effect by
      default.
    rank: the rank that compiled it, where known: on the root of a
      broadcast declared with a `Communication.root`, the operand it
      sends is what every rank receives (None: no rank is taken for the
      root).

  Raises:
    TypeError, ValueError: as `OrderAnalysis`; ValueError also for a
      send's or receive's peer or tag that is not a constant.
  """

  def __init__(
    self,
    compiled: CompiledModule,
    declarations: Declarations | None = None,
    *,
    who: str = "races_across",
    rank: int | None = None,
  ):
    self.rank = rank
    self.text = module_text(compiled, who=who)
    self.declarations = (
      sources.current() if declarations is None else declarations
    )
    self.analysis = OrderAnalysis(
      self.text, declarations=self.declarations, who=who
    )
    self.module = self.analysis.module
    self._lines = self.text.splitlines()
    # What an XLA collective needs equal on every rank besides its shapes
    # (`same_module`), where the installed jaxlib needs it.
    self._identity = (
      same_module.ModuleIdentity(self.text)
      if same_module.collectives_need_same_module()
      else None
    )
    self._defined = {
      (i.computation, i.name): i
      for body in self.module.computations.values()
      for i in body
    }
    self._callers: dict[str, list[_hlo.Instruction]] = {}
    for body in self.module.computations.values():
      for i in body:
        for callee in i.callees:
          self._callers.setdefault(callee, []).append(i)
    self._fused = inlined_fusions(self.module)
    self._broadcast = self._broadcast_operands()
    self._same: dict[str, dict[str, Same]] = {}
    self._contexts: dict[tuple[str, tuple], dict[str, Same]] = {}
    self._values(self.module.entry, ())
    self._holds: dict[str, bool] = {}
    self._reads: dict[tuple[str, str, tuple], frozenset[EntryParameter]] = {}
    self.unordered: list[Unordered] = []
    items = self._items(self.module.entry)
    # Each collective's position among the rank's collectives, in program
    # order, for the decisions' signatures: a shared result is named by
    # it. Only collectives give shared results, and they meet the other
    # ranks' in this order whatever messages the ranks exchange between
    # them (a rank that receives from two others makes one call more than
    # each sender: positions among all calls would differ, issue 77's
    # generated corpus).
    collectives = [c for c in calls_of(items) if c.kind == "collective"]
    where = {
      (c.op.instruction.computation, c.op.instruction.name): k
      for k, c in enumerate(collectives)
    }

    def index(i: _hlo.Instruction) -> int | None:
      return where.get((i.computation, i.name))

    # Decisions read a broadcast's operand on its root as what every rank
    # receives; origins keep it as computed (the root's call sends it as
    # any rank's does).
    self._slice = DecisionSlice(
      self.module,
      self._lines,
      self.communication,
      index,
      self._broadcast_from,
    )
    self._origins = DecisionSlice(
      self.module, self._lines, self.communication, index
    )
    self.items: tuple[Item, ...] = self._signed(items)

  def _signed(self, items: tuple[Item, ...]) -> tuple[Item, ...]:
    """`items`, each loop and conditional with its decision's signature,
    each call with its operands' origin."""
    out: list[Item] = []
    for item in items:
      if isinstance(item, Loop):
        item = dataclasses.replace(
          item,
          body=self._signed(item.body),
          signature=self._slice.loop(item.op.instruction),
        )
      elif isinstance(item, Branch):
        item = dataclasses.replace(
          item,
          branches=tuple(self._signed(b) for b in item.branches),
          signature=self._slice.conditional(item.op.instruction),
        )
      else:
        i = item.op.instruction
        data = [
          self._defined[(i.computation, o)]
          for o in i.operands
          if not self._defined[(i.computation, o)].shape.startswith("token")
        ]
        item = dataclasses.replace(
          item,
          origin=self._origins.origin(i),
          reads=tuple(self._entry_reads(o, ()) for o in data),
        )
      out.append(item)
    return tuple(out)

  # Which values are the same on every rank ---------------------------------

  def _broadcast_operands(
    self,
  ) -> dict[tuple[str, str], tuple[_hlo.Instruction, int]]:
    """The data operands that this rank broadcasts as the root: each
    instruction, by (computation, name), with its broadcast and its place
    among the broadcast's data operands. Every rank's result of that
    broadcast is its value, so it is the same on every rank."""
    found: dict[tuple[str, str], tuple[_hlo.Instruction, int]] = {}
    if self.rank is None:
      return found
    for body in self.module.computations.values():
      for i in body:
        c = self.communication(i)
        if c is None or c.root is None or not c.same_result:
          continue
        if call_attributes.as_int(self._place(i, c.root)) != self.rank:
          continue
        data = [
          o
          for o in i.operands
          if not self._defined[(i.computation, o)].shape.startswith("token")
        ]
        for k, name in enumerate(data):
          found.setdefault((i.computation, name), (i, k))
    if not found:
      return found
    # XLA may compute the operand again where the program reads it (a
    # decision fused with its own copy of ``x[:1] + 1``): an instruction
    # that computes the same `PURE` expression holds the same value.
    values = PureValues(self.module, self._lines)
    sent: dict[str, tuple[_hlo.Instruction, int]] = {}
    for (computation, name), where in found.items():
      key = values.key(self._defined[(computation, name)])
      if key is not None:
        sent.setdefault(key, where)
    for body in self.module.computations.values():
      for i in body:
        key = values.key(i)
        if key is not None and key in sent:
          found.setdefault((i.computation, i.name), sent[key])
    return found

  def _broadcast_from(
    self, i: _hlo.Instruction
  ) -> tuple[_hlo.Instruction, int] | None:
    """`_broadcast_operands`' entry for `i`, where it has one."""
    return self._broadcast.get((i.computation, i.name))

  def communication(self, i: _hlo.Instruction) -> Communication | None:
    """How `i` communicates with other ranks; None if it does not.

    A call that no declaration covers, and a host callback that may have
    effects (``io_callback``, ``buffer_callback``; not ``pure_callback``
    nor ``jax.debug.callback``), may communicate (host MPI under
    ``jax.distributed``): it is compared across ranks as a collective
    (`MAY_COMMUNICATE`), never left out as silent."""
    if i.opcode in XLA_COLLECTIVES:
      return XLA_COLLECTIVES[i.opcode]
    if i.opcode == "custom-call":
      declared = access_policy.communication(self.declarations, i.target)
      if declared is not None:
        return declared
      return MAY_COMMUNICATE if self.may_communicate(i) else None
    return None

  def may_communicate(self, i: _hlo.Instruction) -> bool:
    """Whether custom call `i`, declared to communicate by nothing, may
    communicate anyway: an undeclared native call, or a host callback
    with effects."""
    target = i.target
    if target is None or target == ENTANGLE_TARGET:
      return False
    if is_library_target(target) or is_sanitizer_counter(target, i.op_name):
      return False
    if is_host_callback(target):
      # jax 0.6 writes no op_type; its op_name ends in the primitive.
      primitive = i.op_type or i.op_name.rsplit("/", 1)[-1]
      return i.side_effect and primitive not in DEBUG_CALLBACK_PRIMITIVES
    return not access_policy.is_declared(self.declarations, target)

  def _values(self, computation: str, params: tuple) -> dict[str, Same]:
    key = (computation, params)
    if key in self._contexts:
      return self._contexts[key]
    out: dict[str, Same] = {}
    self._contexts[key] = out
    for i in self.module.computations[computation]:
      out[i.name] = self._value(i, out, params)
    merged = self._same.setdefault(computation, {})
    for name, value in out.items():
      merged[name] = _meet(merged.get(name, True), value)
    return out

  def _root(self, computation: str, values: dict[str, Same]) -> Same:
    for i in self.module.computations[computation]:
      if i.root:
        return values[i.name]
    return False

  def _value(
    self, i: _hlo.Instruction, out: dict[str, Same], params: tuple
  ) -> Same:
    ins = [out.get(o, False) for o in i.operands]
    opcode = i.opcode
    if (i.computation, i.name) in self._broadcast:
      return True  # What this rank, the root, broadcasts to every rank.
    if opcode == "parameter":
      n = i.parameter_number
      return params[n] if n is not None and n < len(params) else False
    if opcode in ("constant", "iota", "after-all"):
      return True
    if opcode == "get-tuple-element":
      return _element(ins[0], i.tuple_index) if ins else False
    if opcode == "tuple":
      return tuple(ins)
    if opcode == "opt-barrier":
      return ins[0] if ins else True
    if opcode in XLA_DONE:
      return _element(ins[0], 1) if isinstance(ins[0], tuple) else ins[0]
    if opcode in _LOCAL_SOURCES:
      return False
    communication = self.communication(i)
    if communication is not None:
      return communication.same_result and self.spans_all(i)
    if opcode == "custom-call":
      if i.target == ENTANGLE_TARGET and i.aliased_operands:
        payload = tuple(
          ins[k] if k < len(ins) else False for k in i.aliased_operands
        )
        return payload[0] if len(payload) == 1 else payload
      if i.target is not None and is_library_target(i.target):
        return all(_all_same(v) for v in ins)
      return False
    if opcode == "while" and i.body and i.condition:
      carry = ins[0] if ins else False
      for _ in range(64):
        body = self._values(i.body, (carry,))
        update = _meet(carry, self._root(i.body, body))
        if update == carry:
          break
        carry = update
      else:
        carry = False
      self._values(i.condition, (carry,))
      return carry
    if opcode == "conditional" and i.branches:
      result: Same = True
      for k, branch in enumerate(i.branches):
        operand = ins[k + 1] if k + 1 < len(ins) else False
        result = _meet(
          result, self._root(branch, self._values(branch, (operand,)))
        )
      return result if _all_same(ins[0]) else False
    if opcode == "call" and i.callees:
      return self._root(i.callees[0], self._values(i.callees[0], tuple(ins)))
    if opcode == "fusion" and i.callees and i.callees[0] in self._fused:
      # Read through: its expression may read a copy of a broadcast's
      # operand (`_broadcast_operands`), the same on every rank.
      return self._root(i.callees[0], self._values(i.callees[0], tuple(ins)))
    return all(_all_same(v) for v in ins)

  def spans_all(self, i: _hlo.Instruction) -> bool:
    """Whether XLA collective `i` spans every device of the module: one
    replica group, or none written (all devices). A collective over
    several groups gives each group its own result, and a group need not
    hold every process's devices (a psum over one process's devices), so
    its result is taken to differ between ranks; so is a collective whose
    groups are written in a form not read here. A native call's
    communicator is declared, not read: taken to span all the ranks."""
    if i.opcode == "custom-call":
      return True
    count = call_attributes.group_count(
      call_attributes.raw_attribute(self._line(i), "replica_groups")
    )
    return count is not None and count <= 1

  def same(self, i: _hlo.Instruction) -> Same:
    """Whether `i`'s value is the same on every rank (in every context its
    computation runs in)."""
    return self._same.get(i.computation, {}).get(i.name, False)

  def decision(self, i: _hlo.Instruction) -> str | None:
    """None when the decision of loop or conditional `i` is the same on
    every rank; else the rank-local value it depends on, in words."""
    if i.opcode == "conditional":
      predicate = self._defined[(i.computation, i.operands[0])]
      if _all_same(self.same(predicate)):
        return None
      return self._origin(predicate, ())
    assert i.condition is not None
    root = next(c for c in self.module.computations[i.condition] if c.root)
    if _all_same(self.same(root)):
      return None
    return self._origin(root, ())

  def _origin(self, i: _hlo.Instruction, path: tuple[int, ...]) -> str:
    found = self._find_origin(i, path, set())
    if found is None:
      return f"%{i.name}, computed from rank-local values"
    return found

  def _find_origin(
    self, i: _hlo.Instruction, path: tuple[int, ...], seen: set
  ) -> str | None:
    key = (i.computation, i.name, path)
    if key in seen or _all_same(_at(self.same(i), path)):
      return None
    seen.add(key)

    def operand(k: int) -> _hlo.Instruction:
      return self._defined[(i.computation, i.operands[k])]

    if i.opcode == "parameter":
      if i.computation == self.module.entry:
        return _entry_parameter(i)
      for caller in self._callers.get(i.computation, []):
        found = self._parameter_origin(caller, i, path, seen)
        if found is not None:
          return found
      return None
    if i.opcode == "get-tuple-element" and i.operands:
      return self._find_origin(operand(0), (i.tuple_index or 0, *path), seen)
    if i.opcode == "tuple":
      indices = [path[0]] if path else range(len(i.operands))
      for k in indices:
        if k < len(i.operands):
          found = self._find_origin(operand(k), path[1:], seen)
          if found is not None:
            return found
      return None
    if i.opcode == "while" and i.body:
      root = next(c for c in self.module.computations[i.body] if c.root)
      return self._find_origin(operand(0), path, seen) or self._find_origin(
        root, path, seen
      )
    if i.opcode in _LOCAL_SOURCES:
      return f"%{i.name} ({i.opcode}), which differs between devices"
    if self.communication(i) is not None and not self.spans_all(i):
      groups = call_attributes.raw_attribute(self._line(i), "replica_groups")
      op = self.analysis.op(i)
      where = f" at {op.location}" if op.location else ""
      return (
        f"the result of {i.opcode} %{i.name}{where} over replica groups "
        f"{groups}: the same only within each group, not on every rank"
      )
    if (
      i.opcode == "custom-call"
      and i.target != ENTANGLE_TARGET
      and (i.target is None or not is_library_target(i.target))
    ):
      op = self.analysis.op(i)
      where = f" at {op.location}" if op.location else ""
      return (
        f"the result of {i.target}{where} (%{i.name}), which no "
        "declaration says is the same on every rank"
      )
    for k in range(len(i.operands)):
      found = self._find_origin(operand(k), (), seen)
      if found is not None:
        return found
    return None

  def _parameter_origin(
    self,
    caller: _hlo.Instruction,
    parameter: _hlo.Instruction,
    path: tuple[int, ...],
    seen: set,
  ) -> str | None:
    def operand(k: int) -> _hlo.Instruction | None:
      if k >= len(caller.operands):
        return None
      return self._defined[(caller.computation, caller.operands[k])]

    computation = parameter.computation
    candidates: list[tuple[_hlo.Instruction | None, tuple[int, ...]]] = []
    if caller.opcode == "while":
      candidates.append((operand(0), path))
      if caller.body:
        body = self.module.computations[caller.body]
        candidates.append((next(c for c in body if c.root), path))
    elif caller.opcode == "conditional":
      if computation in caller.branches:
        candidates.append(
          (operand(caller.branches.index(computation) + 1), path)
        )
    else:
      candidates.append((operand(parameter.parameter_number or 0), path))
    for instruction, where in candidates:
      if instruction is not None:
        found = self._find_origin(instruction, where, seen)
        if found is not None:
          return found
    return None

  def _entry_reads(
    self, i: _hlo.Instruction, path: tuple[int, ...]
  ) -> frozenset[EntryParameter]:
    """The entry parameters (tokens left out) that element `path` of
    `i`'s value is computed from; an `entangle` reads its payload only."""
    key = (i.computation, i.name, path)
    if key in self._reads:
      return self._reads[key]
    self._reads[key] = frozenset()  # A loop's carry reads itself.

    def operand(k: int, at: tuple[int, ...] = ()) -> frozenset:
      if k >= len(i.operands):
        return frozenset()
      return self._entry_reads(
        self._defined[(i.computation, i.operands[k])], at
      )

    def root(computation: str, at: tuple[int, ...]) -> frozenset:
      body = self.module.computations[computation]
      return self._entry_reads(next(c for c in body if c.root), at)

    found: frozenset[EntryParameter] = frozenset()
    if i.opcode == "parameter" and i.computation == self.module.entry:
      if not i.shape.startswith("token"):
        found = frozenset(
          {
            EntryParameter(
              i.parameter_number or 0,
              call_attributes.strip_layout(i.shape),
              i.name,
            )
          }
        )
    elif i.opcode == "parameter":
      for caller in self._callers.get(i.computation, []):
        found |= self._caller_reads(caller, i, path)
    elif i.opcode == "get-tuple-element":
      found = operand(0, (i.tuple_index or 0, *path))
    elif i.opcode == "tuple" and path:
      found = operand(path[0], path[1:])
    elif i.opcode == "while" and i.body:
      found = operand(0, path) | root(i.body, path)
    elif i.opcode == "conditional" and i.branches:
      found = operand(0).union(*(root(b, path) for b in i.branches))
    elif i.opcode in ("call", "fusion") and i.callees:
      found = root(i.callees[0], path)
    elif i.opcode == "custom-call" and i.target == ENTANGLE_TARGET:
      found = frozenset().union(*(operand(k) for k in i.aliased_operands))
    else:
      found = frozenset().union(*(operand(k) for k in range(len(i.operands))))
    self._reads[key] = found
    return found

  def _caller_reads(
    self,
    caller: _hlo.Instruction,
    parameter: _hlo.Instruction,
    path: tuple[int, ...],
  ) -> frozenset[EntryParameter]:
    """What `parameter` of a computation that `caller` runs reads, through
    `caller`'s operands (and a loop body's result, for its carry)."""

    def operand(k: int) -> frozenset:
      if k >= len(caller.operands):
        return frozenset()
      at = self._defined[(caller.computation, caller.operands[k])]
      return self._entry_reads(at, path)

    computation = parameter.computation
    if caller.opcode == "while":
      found = operand(0)
      if caller.body:
        body = self.module.computations[caller.body]
        found |= self._entry_reads(next(c for c in body if c.root), path)
      return found
    if caller.opcode == "conditional":
      if computation in caller.branches:
        return operand(caller.branches.index(computation) + 1)
      return frozenset()
    return operand(parameter.parameter_number or 0)

  # The calls, in order -----------------------------------------------------

  def _communicates(self, computation: str) -> bool:
    """Whether `computation`, or one it calls, holds a communicating call."""
    if computation not in self._holds:
      self._holds[computation] = any(
        self.communication(i) is not None
        or any(self._communicates(c) for c in i.callees)
        for i in self.module.computations[computation]
      )
    return self._holds[computation]

  def _items(self, computation: str) -> tuple[Item, ...]:
    found: list[tuple[Op, list[Item]]] = []
    for i in self.module.computations[computation]:
      communication = self.communication(i)
      if communication is not None:
        call = self._call(i, communication)
        if call is not None:
          found.append((self.analysis.op(i), [call]))
      elif not any(self._communicates(c) for c in i.callees):
        continue
      elif i.opcode == "while" and i.body and i.condition:
        condition = self._items(i.condition)
        body = (*condition, *self._items(i.body))
        trips = _KNOWN_TRIPS.search(self._line(i))
        item = Loop(
          self.analysis.op(i),
          body,
          self.decision(i),
          trips=int(trips.group(1)) if trips and not condition else None,
        )
        found.append((item.op, [item]))
      elif (
        i.opcode == "conditional"
        and (picked := self._constant_branch(i)) is not None
      ):
        # A constant decision (XLA left `conditional(constant(1))`): only
        # the branch it picks runs, on every rank.
        inner = list(self._items(picked))
        if inner:
          found.append((self.analysis.op(i), inner))
      elif i.opcode == "conditional":
        branches = tuple(self._items(b) for b in i.branches)
        item = Branch(self.analysis.op(i), branches, self.decision(i))
        found.append((item.op, [item]))
      else:  # A call, an async wrapper: its calls, in its place.
        inner = [x for c in i.callees for x in self._items(c)]
        found.append((self.analysis.op(i), inner))
    return tuple(x for _, items in self._ordered(found) for x in items)

  def _constant_branch(self, i: _hlo.Instruction) -> str | None:
    """The branch computation that conditional `i`'s constant predicate
    or index picks; None where the decision is not a constant."""
    if not i.operands:
      return None
    decision = self._defined.get((i.computation, i.operands[0]))
    if decision is None or decision.opcode != "constant":
      return None
    value = scalar_literal(decision.literal)
    picked = picked_branch(value, len(i.branches))
    return None if picked is None else i.branches[picked]

  def _ordered(
    self, found: list[tuple[Op, list[Item]]]
  ) -> list[tuple[Op, list[Item]]]:
    """`found` in the order the module runs them; each pair that nothing
    orders is recorded in `unordered` (they stay in text order)."""
    before = {k: 0 for k in range(len(found))}
    for a in range(len(found)):
      for b in range(a + 1, len(found)):
        x, y = found[a][0], found[b][0]
        if self.analysis.precedes(x, y):
          before[b] += 1
        elif self.analysis.precedes(y, x):
          before[a] += 1
        else:
          self.unordered.append(Unordered(x, y))
    order = sorted(range(len(found)), key=lambda k: (before[k], k))
    return [found[k] for k in order]

  # One call's fingerprint --------------------------------------------------

  def _line(self, i: _hlo.Instruction) -> str:
    return self._lines[i.line - 1] if 0 < i.line <= len(self._lines) else ""

  def _place(self, i: _hlo.Instruction, place: Place | None) -> object:
    """The value at `place` of call `i`: an attribute's text, or an
    operand's constant literal; None when there is none or it is not a
    constant."""
    if place is None:
      return None
    if isinstance(place, str):
      return call_attributes.backend_attributes(self._line(i)).get(place)
    if place >= len(i.operands):
      raise ValueError(
        f"%{i.name} ({i.target}) has no operand {place}, which its "
        "communication declaration names"
      )
    operand = self._defined[(i.computation, i.operands[place])]
    return operand.literal if operand.opcode == "constant" else None

  def _number(
    self, i: _hlo.Instruction, place: Place | None, what: str
  ) -> int | None:
    if place is None:
      return None
    value = call_attributes.as_int(self._place(i, place))
    if value is None:
      raise ValueError(
        f"the {what} of %{i.name} ({i.target}) is not a constant in the "
        "module: the cross-rank check cannot tell which rank it talks to"
      )
    return value

  def _call(self, i: _hlo.Instruction, c: Communication) -> Call | None:
    """Call `i` as the check matches it; None for a send to, or a receive
    from, MPI_PROC_NULL, which MPI completes at once, matching nothing
    (read as a receive from any source, it met a send that no receive
    took, and a program whose rank 1 got garbage was proved: skeptic pass
    77b)."""
    call = self._call_as_written(i, c)
    if c.kind not in ("send", "recv", "sendrecv"):
      return call
    null = call_attributes.null_peer(
      None if c.communicator is None else self._place(i, c.communicator)
    )
    if null not in (call.peer, call.source):
      return call
    if c.kind == "sendrecv":
      raise BeyondTheModel(
        f"%{i.name} ({i.target}) sends to or receives from MPI_PROC_NULL "
        f"(rank {null}) on one side of a sendrecv, which the cross-rank "
        "check does not model: it cannot answer"
      )
    return None

  def _call_as_written(self, i: _hlo.Instruction, c: Communication) -> Call:
    op = self.analysis.op(i)
    line = self._line(i)
    if c.kind == "recv":  # What it receives: its result.
      shapes = ", ".join(
        s
        for s in re.findall(
          r"\w+\[[^\]]*\]", call_attributes.strip_layout(i.shape)
        )
        if not s.startswith("token")
      )
    else:
      shapes = ", ".join(
        call_attributes.strip_layout(self._defined[(i.computation, o)].shape)
        for o in i.operands
        if not self._defined[(i.computation, o)].shape.startswith("token")
      )
    # MPI matches a native call's message by count and type, not shape:
    # f32[2,2] on one rank meets f32[4] on another.
    compared = (
      call_attributes.arrays(shapes) if i.opcode == "custom-call" else shapes
    )
    what = "shapes"
    if i.opcode == "custom-call" and c.matched_by == "results":
      # A scatter: the root's operand holds every rank's block, another
      # rank's only a placeholder; MPI matches the block each receives.
      compared, what = call_attributes.arrays(i.shape), "received"
    fingerprint: list[tuple[str, object]] = [
      ("kind", c.kind),
      ("call", i.target or i.opcode.removesuffix("-start")),
      (what, f"({compared})"),
    ]
    renamed: list[tuple[str, object]] = []
    if i.opcode != "custom-call":
      fingerprint.append(("result", call_attributes.strip_layout(i.shape)))
      for key in ("replica_groups", "dimensions", "source_target_pairs"):
        value = call_attributes.raw_attribute(line, key)
        if value is not None and key == "source_target_pairs":
          value = call_attributes.pairs_as_set(value)
        if value is not None:
          fingerprint.append((key, value))
      if i.callees:  # The reduction: its computation's root opcode.
        body = self.module.computations.get(i.callees[0], [])
        roots = [x.opcode for x in body if x.root]
        fingerprint.append(("reduction", roots[0] if roots else "?"))
      if self._identity is not None:
        fingerprint.append(("module", self._identity))
    else:
      for place in c.match:
        fingerprint.append((str(place), self._place(i, place)))
      if c.root is not None and c.root not in c.match:
        fingerprint.append((str(c.root), self._place(i, c.root)))
      if c.communicator is not None:
        renamed.append(("communicator", self._place(i, c.communicator)))
      if c.op is not None:
        value = self._place(i, c.op)
        renamed.append(("reduction", value))
        told = call_attributes.handle_told(
          value, call_attributes.backend_attributes(line), c.communicator
        )
        if told is not None:
          fingerprint.append(("reduction's MPI handle", told))
    return Call(
      op,
      c,
      tuple(fingerprint),
      tuple(renamed),
      peer=self._number(i, c.peer, "peer"),
      tag=self._number(i, c.tag, "tag"),
      source=self._number(i, c.source, "source"),
      source_tag=self._number(i, c.source_tag, "source tag"),
      shapes=f"({shapes})",
      # A send's or sendrecv's `shapes` are its data operands'.
      sent=call_attributes.arrays(shapes) if c.kind in _SENDING else "",
      received=call_attributes.arrays(i.shape) if c.kind in _RECEIVING else "",
    )

  def calls(self) -> Iterator[Call]:
    """Every communicating call, loops and branches included."""
    return calls_of(self.items)


def calls_of(items: tuple[Item, ...]) -> Iterator[Call]:
  """The calls of `items`, in order, loops' and branches' included."""
  for item in items:
    if isinstance(item, Call):
      yield item
    elif isinstance(item, Loop):
      yield from calls_of(item.body)
    else:
      for branch in item.branches:
        yield from calls_of(branch)


_KNOWN_TRIPS = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')
"""XLA's count of a while loop's trips, in its ``backend_config``."""
_SENDING = frozenset({"send", "sendrecv"})
_RECEIVING = frozenset({"recv", "sendrecv"})


def _entry_parameter(i: _hlo.Instruction) -> str:
  return (
    f"entry parameter {i.parameter_number} (%{i.name}): each rank passes "
    "its own inputs"
  )
