"""Host callbacks made of host transfers, as one call each (TPU).

On a TPU, JAX lowers ``io_callback``, ``jax.debug.callback`` and
``pure_callback`` to no custom call. Each callback is a run of host
transfers (``send``, ``send-done``, ``recv``, ``recv-done``, each with
``is_host_transfer=true`` and a ``_xla_host_transfer_rendezvous`` key): it
sends each operand to the host, the host runs the Python function, and it
receives each result back. A callback with no operand sends a dummy value;
one with no result receives one. The transfers of one callback are chained
by a token: an unordered callback starts its own (``after-all()``), an
ordered one takes JAX's effect token, so that the token chain runs through
every ordered callback in turn. The metadata keeps the primitive's name
(``op_type="io_callback"``) and the user's line.

`group` replaces the transfers of each callback by one custom call of
`TPU_HOST_CALLBACK_TARGET` that takes the operands sent (and the token the
callback started from) and returns the values received (one value, or a
tuple of several, as a host callback's custom call on CPU returns them);
each ``recv-done`` becomes a ``tuple`` of its value and the call. The call
is declared as a host callback on CPU (it may write anything, on every
device alike; ``pure_callback``'s is not side-effecting, and not a native
call, as on CPU). Transfers are grouped along the token chain: a
``send-done`` and a ``recv-done`` belong to the transfer they finish, a
``recv`` to the transfers its token comes from, a ``send`` to a
``send-done`` its token comes from (another operand of the same callback),
and transfers that take their token from the same ``after-all`` to one
callback; a ``send`` whose token comes from a ``recv-done`` starts the next
callback of an ordered chain, which then reads the token the earlier one
produced (its order, as the token gives it).

When the host runs the function: XLA's host-callback runtime
(``HostCallbackContext::OnSend`` in ``xla/pjrt/host_callback.cc``) calls
it as the last of its operands arrives, and hands each result to the
matching receive; so a callback has run once its last send is done, and
has finished once its last receive is done. The TPU runs its module in
schedule order, host transfers included (docs/platforms.md, "TPU":
measured).

`entangle` lowers to ``optimization_barrier`` on TPU, and the optimized
module keeps no barrier: its order survives, if at all, as schedule order
only, and measured on a TPU v5e the schedule does not always keep it (a
barrier between two callbacks, and ``in_program_order``'s barriers between
the groups of a hazard, were scheduled against, and ran against, the
program's order). `orders_before_optimization` reads the barriers from the
module before optimization (which XLA dumps beside the optimized one, and
which ``Lowered.as_text(dialect="hlo")`` prints): callback A is ordered
before callback B when a chain of operands runs from A through an
``opt-barrier`` to B. `complete` writes those pairs into the optimized text
as a comment line (`ORDER_COMMENT`), and `group` makes the later call take
the earlier one as an operand only where the optimized module's schedule
keeps that order (A's last receive comes before B's last send, when B
runs). A pair the schedule puts the other way keeps no edge, and the check
reports it. A callback is named across the two modules by its rendezvous
keys, which XLA does not change.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Sequence

from entangle_jax._src.targets import platforms
from entangle_jax._src.targets.names import TPU_HOST_CALLBACK_TARGET
from entangle_jax.testing._hlo.attributes import Stack
from entangle_jax.testing._hlo.instruction import Instruction, InstructionReader

ORDER_COMMENT = "// entangle-jax host callbacks ordered before optimization:"
"""The comment line `complete` writes at the top of an optimized module:
pairs ``A<B`` of callback keys (`Callback.key`), A ordered before B by an
``optimization_barrier`` in the module before optimization."""

SIDE_EFFECT_FREE = frozenset({"pure_callback"})
"""The ``op_type`` of a callback that its user declares pure: its call is
not side-effecting, as ``pure_callback``'s custom call on CPU."""

_PAIR = re.compile(r"(\d+)<(\d+)")
_ENTRY_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")


@dataclasses.dataclass
class Callback:
  """The host transfers of one callback, in text order."""

  transfers: list[Instruction]

  @property
  def key(self) -> int:
    """The smallest rendezvous key of its transfers (a number, as JAX
    writes them); -1 if none has one."""
    keys = [
      int(k) for t in self.transfers if (k := t.rendezvous) and k.isdigit()
    ]
    return min(keys, default=-1)

  @property
  def sends(self) -> list[Instruction]:
    return [t for t in self.transfers if t.opcode == "send"]

  @property
  def receive_dones(self) -> list[Instruction]:
    return [t for t in self.transfers if t.opcode == "recv-done"]


def callbacks(instructions: Sequence[Instruction]) -> list[Callback]:
  """The host callbacks among one computation's `instructions`, each with
  its transfers, in the text order of their first transfer."""
  by_name = {i.name: i for i in instructions}
  parent: dict[str, str] = {
    i.name: i.name for i in instructions if i.host_transfer
  }
  if not parent:
    return []

  def find(name: str) -> str:
    while parent[name] != name:
      parent[name] = parent[parent[name]]
      name = parent[name]
    return name

  def union(a: str, b: str) -> None:
    parent[find(a)] = find(b)

  def token_source(i: Instruction) -> Instruction | None:
    """Where a send's or a recv's token comes from: a transfer, through
    the token element of a ``recv-done``, or another instruction."""
    index = 1 if i.opcode == "send" else 0
    if len(i.operands) <= index or i.operands[index] not in by_name:
      return None
    source = by_name[i.operands[index]]
    if (
      source.opcode == "get-tuple-element"
      and source.operands
      and (inner := by_name.get(source.operands[0])) is not None
      and inner.host_transfer
    ):
      return inner
    return source

  started_by: dict[str, str] = {}
  for name in parent:
    i = by_name[name]
    if i.opcode in ("send-done", "recv-done"):
      if i.operands and i.operands[0] in parent:
        union(name, i.operands[0])
      continue
    source = token_source(i)
    if source is None:
      continue
    if source.host_transfer:
      # A send after a receive starts the next callback of an ordered chain.
      if not (i.opcode == "send" and source.opcode == "recv-done"):
        union(name, source.name)
    elif source.opcode == "after-all" and not source.operands:
      key = source.name
      if key in started_by:
        union(name, started_by[key])
      else:
        started_by[key] = name
  groups: dict[str, list[Instruction]] = collections.defaultdict(list)
  for i in instructions:
    if i.host_transfer:
      groups[find(i.name)].append(i)
  return [Callback(g) for g in groups.values()]


def group(
  instructions: list[Instruction],
  orders: frozenset[tuple[int, int]] = frozenset(),
) -> list[Instruction]:
  """`instructions` (one computation, in text order) with the transfers of
  each host callback made one custom call (see the module docstring), and
  each call taking as operands the calls `orders` puts before it where the
  schedule agrees. Without host transfers, `instructions` itself."""
  found = [c for c in callbacks(instructions) if c.sends and c.receive_dones]
  if not found:
    return instructions
  position = {i.name: k for k, i in enumerate(instructions)}
  by_name = {i.name: i for i in instructions}
  members = {t.name: c for c in found for t in c.transfers}
  used_outside: set[str] = set()
  for i in instructions:
    for operand in (*i.operands, *i.control_predecessors):
      if operand in members and members.get(i.name) is not members[operand]:
        used_outside.add(operand)
  by_key = {c.key: c for c in found if c.key >= 0}
  name_of = {
    id(c): c.sends[0].name
    if c.sends[0].name not in used_outside
    else f"{c.sends[0].name}.host_callback"
    for c in found
  }
  calls: dict[str, Instruction] = {}  # By its first receive's name.
  elements: dict[str, Instruction] = {}  # By the receive it stands for.
  removed: set[str] = set()
  for c in found:
    # The host runs the function once its last operand arrives: after the
    # callback's last send. An earlier callback has finished once its last
    # receive is done.
    runs = max(position[t.name] for t in c.sends)
    earlier = [
      name_of[id(e)]
      for a, b in sorted(orders)
      if b == c.key
      and (e := by_key.get(a)) is not None
      and e is not c
      and max(position[d.name] for d in e.receive_dones) < runs
    ]
    call = _call(c, members, by_name, name_of[id(c)], earlier)
    calls[c.receive_dones[0].name] = call
    single = len(c.receive_dones) == 1
    for k, done in enumerate(c.receive_dones):
      # Each receive hands on (its value, a token): its value is the call's
      # result (element k of it, for several), as on CPU.
      value = call.name
      if not single:
        value = f"{done.name}.value"
        elements[value] = dataclasses.replace(
          done,
          name=value,
          opcode="get-tuple-element",
          operands=(call.name,),
          shape=_tuple_elements(done.shape)[0],
          tuple_index=k,
          host_transfer=False,
          control_predecessors=(),
        )
      elements[done.name] = dataclasses.replace(
        done,
        opcode="tuple",
        operands=(value, call.name),
        host_transfer=False,
        control_predecessors=(),
      )
    removed.update(
      t.name
      for t in c.transfers
      if t.opcode != "recv-done" and t.name not in used_outside
    )
  out: list[Instruction] = []
  for i in instructions:
    if i.name in calls:
      out.append(calls[i.name])
    if i.name in elements:
      if f"{i.name}.value" in elements:
        out.append(elements[f"{i.name}.value"])
      out.append(elements[i.name])
    elif i.name not in removed:
      out.append(i)
  return out


def _tuple_elements(shape: str) -> list[str]:
  """The top-level elements of a tuple shape ``(a, (b, c), d)``; the
  shape itself, as one element, if it is no tuple."""
  text = shape.strip()
  if not (text.startswith("(") and text.endswith(")")):
    return [text]
  parts, depth, start = [], 0, 1
  for k, char in enumerate(text[1:-1], 1):
    if char in "({[":
      depth += 1
    elif char in ")}]":
      depth -= 1
    elif char == "," and depth == 0:
      parts.append(text[start:k].strip())
      start = k + 1
  parts.append(text[start:-1].strip())
  return [p for p in parts if p]


def _within(
  operand: str,
  c: Callback,
  members: dict[str, Callback],
  by_name: dict[str, Instruction],
) -> bool:
  """Whether `operand` is a transfer of `c`, or the token that one of them
  hands on (a ``get-tuple-element`` of it): the callback's own chain."""
  if members.get(operand) is c:
    return True
  source = by_name.get(operand)
  return (
    source is not None
    and source.opcode == "get-tuple-element"
    and bool(source.operands)
    and members.get(source.operands[0]) is c
  )


def _call(
  c: Callback,
  members: dict[str, Callback],
  by_name: dict[str, Instruction],
  name: str,
  earlier: Sequence[str],
) -> Instruction:
  """The custom call that stands for callback `c`: called `name` (its
  first send's), at its first receive's place; it takes what the sends send, the
  tokens the callback starts from and the calls `earlier` (which a
  barrier put before it), and returns a tuple of what each receive
  returns."""
  first = c.sends[0]
  operands: list[str] = [s.operands[0] for s in c.sends if s.operands]
  for t in c.transfers:
    if t.opcode in ("send", "recv"):
      index = 1 if t.opcode == "send" else 0
      if len(t.operands) > index and not _within(
        t.operands[index], c, members, by_name
      ):
        operands.append(t.operands[index])
  operands.extend(earlier)
  control = [p for t in c.transfers for p in t.control_predecessors]
  op_type = next((t.op_type for t in c.transfers if t.op_type), "")
  stack: Stack = next((t.stack for t in c.transfers if t.stack), ())
  done = c.receive_dones[0]
  values = [_tuple_elements(d.shape)[0] for d in c.receive_dones]
  return dataclasses.replace(
    first,
    name=name,
    opcode="custom-call",
    operands=tuple(dict.fromkeys(operands)),
    control_predecessors=tuple(
      p for p in dict.fromkeys(control) if p not in members
    ),
    target=TPU_HOST_CALLBACK_TARGET,
    side_effect=op_type not in SIDE_EFFECT_FREE,
    shape=values[0] if len(values) == 1 else "(" + ", ".join(values) + ")",
    op_name=first.op_name or done.op_name,
    op_type=op_type,
    stack=stack,
    source=stack[0] if stack else first.source,
    root=False,
    line=done.line,
    host_transfer=False,
  )


def read_orders(text: str) -> frozenset[tuple[int, int]]:
  """The pairs `complete` wrote into `text` (none if it wrote none)."""
  for line in _first_lines(text, 3):
    if line.startswith(ORDER_COMMENT):
      return frozenset(
        (int(a), int(b)) for a, b in _PAIR.findall(line[len(ORDER_COMMENT) :])
      )
  return frozenset()


def _first_lines(text: str, count: int) -> list[str]:
  """``text.splitlines()[:count]``, without splitting the whole text (the
  module is read line by line once already)."""
  size = 4096
  while True:
    lines = text[:size].splitlines()
    # More lines than asked: the first `count` end inside the prefix.
    if len(lines) > count or size >= len(text):
      return lines[:count]
    size *= 4


def is_tpu_text(text: str) -> bool:
  """Whether module `text` was compiled for a TPU: its ``HloModule`` line
  (the entry's layout) or its first instructions carry TPU's tiling
  (``{:T(128)}``), which no CPU or GPU module of XLA writes (the platform
  table's `Platform.text_mark`)."""
  return platforms.of_text(text) is platforms.TPU


def has_transfer_callbacks(text: str) -> bool:
  """Whether module `text` holds host transfers and is for a platform
  whose host callbacks are made of them (`Platform.transfer_target`, the
  platform known by its text: `platforms.of_text`), which this module
  reads as one call each."""
  if not has_host_transfers(text):
    return False
  row = platforms.of_text(text)
  return row is not None and row.transfer_target is not None


def has_host_transfers(text: str) -> bool:
  """Whether `text` holds a host transfer (without parsing it)."""
  return "is_host_transfer=true" in text


def orders_before_optimization(text: str) -> frozenset[tuple[int, int]]:
  """The pairs of callbacks (by `Callback.key`) that an
  ``optimization_barrier`` orders in `text`, a module before optimization
  (not scheduled; read here line by line, no more than this needs)."""
  pairs: set[tuple[int, int]] = set()
  for body in _computations(text):
    if not any(i.opcode == "opt-barrier" for i in body):
      continue
    pairs.update(_barrier_pairs(body))
  return frozenset(pairs)


def complete(text: str, before: str) -> str:
  """`text` (an optimized module) with the pairs that barriers order in
  `before` (its module before optimization) written at its top; as it is
  when it has no host transfer or there is no such pair."""
  if not has_host_transfers(text) or read_orders(text):
    return text
  pairs = orders_before_optimization(before)
  if not pairs:
    return text
  written = " ".join(f"{a}<{b}" for a, b in sorted(pairs))
  return f"{ORDER_COMMENT} {written}\n{text}"


def _computations(text: str) -> Iterable[list[Instruction]]:
  """Each computation of `text` that has a host transfer, as instructions
  (lines that are not instructions are passed over)."""
  reader = InstructionReader(lambda _: ())
  current: list[Instruction] | None = None
  name = ""
  for number, raw in enumerate(text.splitlines(), 1):
    line = raw.strip()
    if current is None:
      if line.endswith("{") and not line.startswith("HloModule"):
        current = []
        name = line.split("(")[0].split()[-1].lstrip("%")
      continue
    if line == "}":
      if any(i.host_transfer for i in current):
        yield current
      current = None
    elif line and _ENTRY_NAME.match(line):
      try:
        current.append(reader.read(line, number, name))
      except ValueError:
        continue


def _barrier_pairs(body: list[Instruction]) -> set[tuple[int, int]]:
  users: dict[str, list[str]] = collections.defaultdict(list)
  for i in body:
    for operand in dict.fromkeys(i.operands):
      users[operand].append(i.name)
  barriers = {i.name for i in body if i.opcode == "opt-barrier"}
  found = [c for c in callbacks(body) if c.key >= 0]
  key_of = {t.name: c.key for c in found for t in c.sends}

  def reach(starts: Iterable[str]) -> set[str]:
    seen = set(starts)
    stack = list(seen)
    while stack:
      for user in users.get(stack.pop(), ()):
        if user not in seen:
          seen.add(user)
          stack.append(user)
    return seen

  pairs = set()
  for c in found:
    done = reach(d.name for d in c.receive_dones)
    after_barrier = reach(n for n in done if n in barriers)
    for name in after_barrier:
      if (later := key_of.get(name)) is not None and later != c.key:
        pairs.add((c.key, later))
  return pairs
