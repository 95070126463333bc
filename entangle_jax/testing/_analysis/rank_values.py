"""What a loop's or conditional's decision is computed from, in a form two
ranks' modules can be compared by: the cross-rank check's answer to
"constants that differ between ranks" (issue 77).

Each rank compiles its own module. A ``fori_loop`` that runs ``3 + rank``
times holds the constant 3 in one rank's module and 4 in the other's; a
``cond`` that compares an allreduced value with a per-rank threshold holds
each rank's own threshold. Inside one module those constants look the
same on every rank; only a comparison of the ranks' modules shows that
they are not.

`DecisionSlice` reads one module and gives each decision a *signature*:
a hash of the expression that computes it, in which

* an entry parameter is a leaf named by its number and type (the values
  may differ between ranks; whether the decision may depend on them at
  all is `RankProgram.decision`'s question);
* a constant is a leaf with its type and literal, a ``while``'s
  ``known_trip_count`` is part of the loop's node;
* the result of a communicating call whose result is the same on every
  rank of its group (`Communication.same_result`) is a leaf named by its
  kind, its target or opcode, its type and its position among the rank's
  collectives: the simulation matches those calls across ranks, in that
  order, so equal results need no equal operands;
* every other instruction is a node of its opcode, its result type, its
  attributes (names, metadata, channel ids and a native call's
  ``backend_config``, which holds per-process handles, left out), its
  operands, and the computations it calls (their parameters symbolic);
* a ``while``'s decision reads its carry: the carry's elements that the
  condition reads, each with its initial value and its update by the
  body, and the elements those read in turn.

Two ranks whose decisions have equal signatures compute them by the same
expression from the same constants and the same shared results. Where
they differ, `DecisionSlice.leaves` lists the constants and trip counts
read, in order, so that a report can name the first that differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable

from entangle_jax._src.targets.communication import Communication
from entangle_jax._src.targets.names import ENTANGLE_TARGET
from entangle_jax.testing import _hlo

# Attributes that name things rather than say what is computed: callee
# and operand names, where the Python line was, per-compile ids.
_NAMING = frozenset(
  {
    "metadata",
    "calls",
    "to_apply",
    "condition",
    "body",
    "branch_computations",
    "true_computation",
    "false_computation",
    "control-predecessors",
    "channel_id",
    "sharding",
    "frontend_attributes",
    "statistics",
    "origin",
    "schedule",
    "async_execution_thread",
  }
)
_LAYOUT = re.compile(r"\{[^{}]*\}")
_SAME_VALUE = frozenset({"copy", "opt-barrier", "custom-call"})
"""Opcodes whose result is an operand's value: a copy, and entangle's
custom call (its payload; the other operands only order it)."""
_ARRAY = re.compile(r"\w+\[[^\]]*\]")
"""An array (or token) type in a shape's text, its layout taken off."""
_DIRECTION = re.compile(r"direction=(\w+)")
_PRED_LITERALS = {"true": True, "false": False}
"""A scalar ``pred`` constant's literal, as HLO writes it."""
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')
ALL = -1
"""A read of the whole carry (the parameter used other than through
``get-tuple-element``)."""


@dataclasses.dataclass(frozen=True)
class Signature:
  """One decision's signature and what it reads."""

  digest: str
  """Equal on two ranks when they compute the decision alike."""
  leaves: tuple[str, ...]
  """The constants (type and literal) and trip counts it reads, in
  order."""
  base: str = ""
  """A two-way conditional's predicate with its negations taken off
  (``not``, and the ``convert`` to a branch index, through fusions):
  two ranks whose bases are equal decide alike, or opposite ways when
  `negated` differs; "" where not read."""
  negated: bool = False


def _strip_layout(shape: str) -> str:
  return _LAYOUT.sub("", shape)


def _attributes(line: str, native: bool) -> tuple[str, ...]:
  """The attributes after an instruction's operand list, each
  ``key=value``, without those that only name things."""
  start = line.find("(", line.find("=") + 1)
  if start < 0:
    return ()
  depth = 0
  index = start
  while index < len(line):
    if line[index] in "([{":
      depth += 1
    elif line[index] in ")]}":
      depth -= 1
      if depth == 0:
        break
    index += 1
  found = [part.strip() for part in _split_top(line[index + 1 :])]
  kept = []
  for attribute in found:
    key = attribute.split("=", 1)[0].strip()
    if not attribute or key in _NAMING:
      continue
    if native and key == "backend_config":
      # A native call's attributes may hold per-process handles (an MPI
      # communicator's address): those are left out, the rest compared
      # (a LAPACK call's `uplo`: eigh's `lower` of rank 0 against rank
      # 1's reads another triangle, skeptic pass 77c, N7).
      attribute = _without_handles(attribute)
      if attribute is None:
        continue
    kept.append(attribute)
  return tuple(kept)


_TYPED_ENTRY = re.compile(r"^\s*(\w+)\s*=\s*(-?\d+)\s*:\s*\w+\s*$")


def _without_handles(attribute: str) -> str | None:
  """A native call's ``backend_config=...``, with each entry whose value
  may be a per-process handle left out: an integer outside 32 bits (an
  address). None for an opaque string (it may hold anything)."""
  value = attribute.split("=", 1)[1].strip()
  if not (value.startswith("{") and value.endswith("}")):
    return None
  kept = []
  for entry in _split_top(value[1:-1]):
    found = _TYPED_ENTRY.match(entry)
    if found and not -(1 << 31) <= int(found.group(2)) < 1 << 32:
      continue
    kept.append(entry.strip())
  return "backend_config={" + ", ".join(kept) + "}"


def _split_top(text: str) -> list[str]:
  """`text` split at its commas outside brackets and quotes."""
  parts: list[str] = []
  depth = 0
  quoted = False
  current = ""
  for char in text:
    if quoted:
      current += char
      quoted = char != '"'
      continue
    if char == '"':
      quoted = True
    elif char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
    if char == "," and depth == 0:
      parts.append(current)
      current = ""
    else:
      current += char
  if current.strip():
    parts.append(current)
  return parts


ELIDED = "{...}"
"""How HLO text writes a large constant whose values it leaves out
(XLA's dumps, ``Compiled.as_text()``), unless dumped with
``--xla_dump_large_constants``."""


def _hash(*parts: object) -> str:
  return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


PURE = frozenset(
  {
    "abs",
    "add",
    "and",
    "bitcast",
    "bitcast-convert",
    "broadcast",
    "clamp",
    "compare",
    "concatenate",
    "constant",
    "convert",
    "copy",
    "dynamic-slice",
    "get-tuple-element",
    "iota",
    "maximum",
    "minimum",
    "negate",
    "not",
    "or",
    "pad",
    "parameter",
    "reshape",
    "reverse",
    "select",
    "sign",
    "slice",
    "subtract",
    "transpose",
    "tuple",
    "xor",
  }
)
"""Opcodes whose result is the same function of their operands wherever
XLA computes them, fused or not: additions, comparisons and moves. Left
out: products and quotients (a product feeding a sum may be contracted
into one fused multiply-add in one fusion and not in another, rounding
otherwise), reductions and dots (summed in another order in a fusion of
another shape), random numbers, custom calls (a native call may hold
state)."""


def inlined_fusions(module: _hlo.Module) -> dict[str, _hlo.Instruction]:
  """The fused computations that can be read as the expression they
  compute at their one call: each computation called by exactly one
  instruction, a ``fusion``, and made of `PURE` opcodes only, with that
  fusion. XLA fuses an expression into each of its users as it sees fit
  (``x[:1] + 1`` computed once for a broadcast and again inside the
  decision that reads it): read through its fusions, an expression is
  the same on every rank however each rank's XLA fused it."""
  callers: dict[str, list[_hlo.Instruction]] = {}
  for body in module.computations.values():
    for i in body:
      for callee in i.callees:
        callers.setdefault(callee, []).append(i)
  found: dict[str, _hlo.Instruction] = {}
  for name, calls in callers.items():
    if len(calls) != 1 or calls[0].opcode != "fusion":
      continue
    if tuple(calls[0].callees) != (name,):
      continue
    if all(i.opcode in PURE for i in module.computations.get(name, ())):
      found[name] = calls[0]
  return found


class PureValues:
  """Keys of the values of one module's instructions, equal for two
  instructions that compute one value: the same `PURE` expression of the
  same entry parameters and constants, read through `inlined_fusions`;
  None where an instruction is no such expression."""

  def __init__(self, module: _hlo.Module, lines: list[str]):
    self._module = module
    self._lines = lines
    self._fused = inlined_fusions(module)
    self._defined = {
      (i.computation, i.name): i
      for body in module.computations.values()
      for i in body
    }
    self._keys: dict[tuple[str, str], str | None] = {}

  def key(self, i: _hlo.Instruction) -> str | None:
    at = (i.computation, i.name)
    if at in self._keys:
      return self._keys[at]
    self._keys[at] = None  # Cycles cannot occur in HLO: a guard only.
    found = self._key(i)
    self._keys[at] = found
    return found

  def _key(self, i: _hlo.Instruction) -> str | None:
    if i.opcode not in PURE and i.opcode != "fusion":
      return None
    if i.opcode == "parameter":
      n = i.parameter_number
      if i.computation == self._module.entry and n is not None:
        return _hash("entry parameter", n, _strip_layout(i.shape))
      caller = self._fused.get(i.computation)
      if caller is None or n is None or n >= len(caller.operands):
        return None
      return self.key(self._operand(caller, n))
    if i.opcode == "fusion":
      if not i.callees or i.callees[0] not in self._fused:
        return None
      return self.key(self._root(i.callees[0]))
    if i.opcode == "constant":
      if ELIDED in (i.literal or ""):
        return None
      return _hash("constant", _strip_layout(i.shape), i.literal)
    line = self._lines[i.line - 1] if 0 < i.line <= len(self._lines) else ""
    parts: list[object] = [
      i.opcode,
      _strip_layout(i.shape),
      i.tuple_index,
      _attributes(line, False),
    ]
    for k in range(len(i.operands)):
      operand = self.key(self._operand(i, k))
      if operand is None:
        return None
      parts.append(operand)
    return _hash(*parts)

  def _operand(self, i: _hlo.Instruction, k: int) -> _hlo.Instruction:
    return self._defined[(i.computation, i.operands[k])]

  def _root(self, computation: str) -> _hlo.Instruction:
    return next(i for i in self._module.computations[computation] if i.root)


class DecisionSlice:
  """The signatures of one module's decisions.

  Args:
    module: the parsed module.
    lines: its text's lines (for the attributes).
    communication: how an instruction communicates (None: it does not).
    call_index: a collective's position among the rank's collectives
      (None: no collective).
    broadcast_from: where given, the broadcast (declared with a
      `Communication.root` and `same_result`) whose root this rank is
      that sends an instruction, and its place among the broadcast's
      data operands (None: none). Such an operand, and every rank's
      result of a rooted broadcast, is a leaf named by the broadcast's
      position: the root decides on what it sends, the others on what
      they receive, and that is one value.
  """

  def __init__(
    self,
    module: _hlo.Module,
    lines: list[str],
    communication: Callable[[_hlo.Instruction], Communication | None],
    call_index: Callable[[_hlo.Instruction], int | None],
    broadcast_from: Callable[
      [_hlo.Instruction], tuple[_hlo.Instruction, int] | None
    ]
    | None = None,
  ):
    self._broadcast_from = broadcast_from
    self._module = module
    self._lines = lines
    self._communication = communication
    self._call_index = call_index
    self._defined = {
      (i.computation, i.name): i
      for body in module.computations.values()
      for i in body
    }
    self._fused = inlined_fusions(module)
    self._nodes: dict[tuple[str, str], tuple[str, frozenset[int]]] = {}
    self._leaves: dict[tuple[str, str], tuple[str, ...]] = {}
    self._loops: set[str] = {
      c
      for body in module.computations.values()
      for i in body
      if i.opcode == "while"
      for c in (i.body, i.condition)
      if c is not None
    }

  def _root(self, computation: str) -> _hlo.Instruction:
    return next(i for i in self._module.computations[computation] if i.root)

  def _line(self, i: _hlo.Instruction) -> str:
    return self._lines[i.line - 1] if 0 < i.line <= len(self._lines) else ""

  def _node(self, i: _hlo.Instruction) -> tuple[str, frozenset[int]]:
    """`i`'s hash, and the carry elements it reads where `i` is in a loop's
    condition or body (`ALL` for the whole carry)."""
    key = (i.computation, i.name)
    if key in self._nodes:
      return self._nodes[key]
    # Cycles cannot occur in HLO; the placeholder guards a malformed one.
    self._nodes[key] = (_hash("cycle", i.name), frozenset())
    self._leaves[key] = ()
    shape = _strip_layout(i.shape)
    reads: frozenset[int] = frozenset()
    leaves: tuple[str, ...] = ()
    communication = self._communication(i)
    broadcast = self._broadcast(i, communication)
    inlined = self._inlined(i)
    if broadcast is not None:
      digest = broadcast
    elif inlined is not None:
      # Read through the fusion: its expression, as if XLA had not fused
      # it (`inlined_fusions`).
      digest, reads = self._node(inlined)
      self._nodes[key] = (digest, reads)
      self._leaves[key] = self._leaves[(inlined.computation, inlined.name)]
      return digest, reads
    elif i.opcode == "parameter":
      in_loop = i.computation in self._loops
      if i.computation == self._module.entry:
        digest = _hash("entry parameter", i.parameter_number, shape)
      else:
        digest = _hash("argument", i.parameter_number, shape)
        reads = frozenset({ALL}) if in_loop else frozenset()
    elif i.opcode == "constant" and ELIDED in (i.literal or ""):
      # The module text leaves out a large constant's values: equal text
      # on two ranks says nothing of their values, so it is this
      # module's own (it differs from every other rank's).
      digest = _hash("elided constant", shape, id(self))
      leaves = (f"constant {shape} {ELIDED}",)
    elif i.opcode == "constant":
      digest = _hash("constant", shape, i.literal)
      leaves = (f"constant {shape} {i.literal}",)
    elif communication is not None and communication.same_result:
      index = self._call_index(i)
      digest = _hash("shared", i.target or i.opcode, shape, index)
    elif i.opcode in _SAME_VALUE and i.operands:
      # The value of its operand: an order witness adds nothing to it.
      payload = i.aliased_operands or (0,)
      if i.opcode == "custom-call" and i.target != ENTANGLE_TARGET:
        payload = ()
      if payload:
        nodes = [self._node(self._operand(i, k)) for k in payload]
        digest = nodes[0][0] if len(nodes) == 1 else _hash(*nodes)
        for _, read in nodes:
          reads |= read
        leaves = tuple(
          x
          for k in payload
          for x in self._leaves[(i.computation, self._operand(i, k).name)]
        )
        self._nodes[key] = (digest, reads)
        self._leaves[key] = _few(leaves)
        return digest, reads
      digest, reads, leaves = self._plain(i, shape)
    elif (
      i.opcode == "get-tuple-element"
      and i.operands
      and self._operand(i, 0).opcode == "parameter"
      and i.computation in self._loops
    ):
      digest = _hash("carry", i.tuple_index, shape)
      reads = frozenset({i.tuple_index if i.tuple_index is not None else ALL})
    else:
      digest, reads, leaves = self._plain(i, shape)
    self._nodes[key] = (digest, reads)
    self._leaves[key] = _few(leaves)
    return digest, reads

  def _broadcast(
    self, i: _hlo.Instruction, communication: Communication | None
  ) -> str | None:
    """The leaf of a broadcast's value that `i` is, where it is one
    (`broadcast_from`): the root's data operand, a rooted broadcast's
    result (or its element); else None."""
    if self._broadcast_from is None:
      return None
    sent = self._broadcast_from(i)
    if sent is not None:
      call, k = sent
      return _hash(
        "broadcast", self._call_index(call), k, _strip_layout(i.shape)
      )
    if i.opcode == "get-tuple-element" and i.operands:
      call, k = self._operand(i, 0), i.tuple_index or 0
    elif not i.shape.startswith("("):
      call, k = i, 0
    else:
      return None
    rooted = self._communication(call) if call is not i else communication
    if rooted is None or rooted.root is None or not rooted.same_result:
      return None
    elements = _ARRAY.findall(_strip_layout(call.shape))
    if k >= len(elements) or elements[k].startswith("token"):
      return None
    data = sum(1 for e in elements[:k] if not e.startswith("token"))
    return _hash(
      "broadcast", self._call_index(call), data, _strip_layout(i.shape)
    )

  def _plain(
    self, i: _hlo.Instruction, shape: str
  ) -> tuple[str, frozenset[int], tuple[str, ...]]:
    """An instruction's node: opcode, type, attributes, operands, the
    computations it calls."""
    parts: list[object] = [
      i.opcode,
      shape,
      i.target,
      _attributes(self._line(i), i.opcode == "custom-call"),
    ]
    reads: frozenset[int] = frozenset()
    operand_leaves: list[str] = []
    for k in range(len(i.operands)):
      digest, read = self._node(self._operand(i, k))
      parts.append(digest)
      reads |= read
      operand_leaves += self._leaves[(i.computation, self._operand(i, k).name)]
    if i.opcode == "while" and i.body and i.condition:
      parts.append(self._whole(i.condition))
      parts.append(self._whole(i.body))
      trip = _TRIP.search(self._line(i))
      if trip is not None:
        operand_leaves.append(f"known_trip_count {trip.group(1)}")
    else:
      for callee in i.callees:
        parts.append(self._whole(callee))
        operand_leaves += self._leaves[(callee, self._root(callee).name)]
    return _hash(*parts), reads, tuple(operand_leaves)

  def _inlined(self, i: _hlo.Instruction) -> _hlo.Instruction | None:
    """What `i` stands for where it is read through a fusion: a
    parameter of an inlined fused computation, its fusion's operand; an
    inlined fusion, its computation's root; else None."""
    if i.opcode == "parameter" and i.computation in self._fused:
      caller = self._fused[i.computation]
      n = i.parameter_number
      if n is not None and n < len(caller.operands):
        return self._operand(caller, n)
      return None
    if i.opcode == "fusion" and i.callees and i.callees[0] in self._fused:
      return self._root(i.callees[0])
    return None

  def _whole(self, computation: str) -> str:
    """A called computation's root, its parameters symbolic."""
    return self._node(self._root(computation))[0]

  def _operand(self, i: _hlo.Instruction, k: int) -> _hlo.Instruction:
    return self._defined[(i.computation, i.operands[k])]

  def origin(self, i: _hlo.Instruction) -> str:
    """What communicating call `i`'s data operands (its tokens left out)
    are computed from, as one hash: equal on two ranks whose calls send
    the same expression of the same inputs."""
    parts = [
      self._node(self._operand(i, k))[0]
      for k in range(len(i.operands))
      if not self._operand(i, k).shape.startswith("token")
    ]
    return _hash("origin", *parts)

  def conditional(self, i: _hlo.Instruction) -> Signature:
    """The signature of conditional `i`'s predicate or branch index."""
    predicate = self._operand(i, 0)
    digest, _ = self._node(predicate)
    base, negated = self._polarity(predicate, ())
    return Signature(
      digest,
      self._leaves[(i.computation, predicate.name)],
      base if len(i.branches) == 2 else "",
      negated,
    )

  def _polarity(
    self, i: _hlo.Instruction, arguments: tuple[str, ...]
  ) -> tuple[str, bool]:
    """`i` with its negations peeled: (the digest of what is left, whether
    an odd number of ``not`` were taken off). Follows ``not``, a
    ``convert`` of a scalar and a fusion's root; `arguments` are the
    digests of the fusion operands that the parameters of `i`'s
    computation stand for."""
    negated = False
    while True:
      if i.opcode == "not" and i.operands:
        negated = not negated
        i = self._operand(i, 0)
      elif (
        i.opcode == "convert"
        and i.operands
        and self._operand(i, 0).shape.startswith("pred[]")
      ):  # A predicate as a branch index: 0 or 1, as it was.
        i = self._operand(i, 0)
      elif (against := self._against_constant(i)) is not None:
        # p == false, p != true, p ^ true: a not; p == true, p != false,
        # p ^ false: p itself.
        flips, i = against
        negated = negated != flips
      elif i.opcode == "fusion" and i.callees and i.operands:
        # An inlined fusion's parameters are its operands' nodes already.
        outer = tuple(
          self._node(self._operand(i, k))[0]
          for k in range(len(i.operands))
          if i.callees[0] not in self._fused
        )
        base, inner = self._polarity(self._root(i.callees[0]), outer)
        return base, negated != inner
      else:
        return _hash("base", self._node(i)[0], arguments), negated

  def _against_constant(
    self, i: _hlo.Instruction
  ) -> tuple[bool, _hlo.Instruction] | None:
    """Where `i` is a scalar predicate compared (``EQ``, ``NE``) or
    ``xor``-ed with a constant ``true`` or ``false``: whether it negates
    the other operand, and that operand; else None."""
    if i.opcode not in ("compare", "xor") or len(i.operands) != 2:
      return None
    if not i.shape.startswith("pred[]"):
      return None
    first, second = self._operand(i, 0), self._operand(i, 1)
    for constant, other in ((first, second), (second, first)):
      value = _PRED_LITERALS.get(constant.literal or "")
      if constant.opcode != "constant" or value is None:
        continue
      if not other.shape.startswith("pred[]"):
        return None
      if i.opcode == "xor":
        return value, other
      direction = _DIRECTION.search(self._line(i))
      if direction is None:
        return None
      if direction.group(1) == "EQ":
        return not value, other
      if direction.group(1) == "NE":
        return value, other
      return None
    return None

  def loop(self, i: _hlo.Instruction) -> Signature:
    """The signature of while `i`'s decision: its condition, and each
    carry element the condition reads (with the elements those read),
    its initial value and its update by the body."""
    assert i.condition is not None and i.body is not None
    condition = self._root(i.condition)
    digest, reads = self._node(condition)
    leaves = list(self._leaves[(i.condition, condition.name)])
    trip = _TRIP.search(self._line(i))
    if trip is not None:
      leaves.append(f"known_trip_count {trip.group(1)}")
    body = self._root(i.body)
    init = self._operand(i, 0) if i.operands else None
    parts: list[object] = ["loop", digest, trip and trip.group(1)]
    done: set[int] = set()
    todo = set(reads)
    while todo:
      k = min(todo)
      todo.discard(k)
      if k in done:
        continue
      done.add(k)
      start = _element(init, k, self._defined)
      update = _element(body, k, self._defined)
      for part in (start, update):
        if part is None:
          parts.append((k, None))
          continue
        node, read = self._node(part)
        parts.append((k, node))
        leaves += self._leaves[(part.computation, part.name)]
        if part is update:
          todo |= read - done
    return Signature(_hash(*parts), _few(tuple(leaves)))


LEAVES = 64
"""The most leaves kept for a node: the report names the first that
differs; a node's hash, not its leaves, decides."""


def _few(leaves: tuple[str, ...]) -> tuple[str, ...]:
  """`leaves` without repeats, the first `LEAVES` of them (an expression
  that reads one value twice would double them at each level)."""
  return tuple(dict.fromkeys(leaves))[:LEAVES]


def _element(
  tuple_op: _hlo.Instruction | None,
  k: int,
  defined: dict[tuple[str, str], _hlo.Instruction],
) -> _hlo.Instruction | None:
  """Element `k` of a ``tuple`` instruction (the whole value for `ALL`, or
  where it is no ``tuple``)."""
  if tuple_op is None:
    return None
  if k == ALL or tuple_op.opcode != "tuple" or k >= len(tuple_op.operands):
    return tuple_op
  return defined[(tuple_op.computation, tuple_op.operands[k])]
