"""The dependency edges XLA's runtimes honour, inside one computation.

Concluded, and why:

* **Operands** (data dependencies). XLA:CPU runs thunks concurrently on an
  execution graph built from their buffer and resource uses
  (``xla/backends/cpu/runtime/thunk_executor.cc``), and GPU command buffers
  in concurrent mode order their commands by buffer uses too: a value one op
  writes and another reads is a buffer conflict, which orders the two.
* **Only the element read.** Through ``tuple`` and ``get-tuple-element``,
  however deeply nested, an op depends on the producer of the element it
  reads, not on the producers of the other elements.
* **Zero-size values order nothing.** An empty buffer slice overlaps, so
  conflicts with, nothing (``BufferAllocation::Slice::OverlapsWith``), and
  XLA usually replaces such a value with an empty constant anyway.
* **Calls read what their computations read.** A ``while``,
  ``conditional``, ``call`` or ``async-start`` runs the ops of the
  computations it calls, and its buffer uses are theirs (``WhileThunk`` and
  ``ConditionalThunk`` list the uses of their nested thunks): it depends on
  the producer of an operand element only if some op in there reads that
  element. An element a loop body merely carries to the next iteration is
  not read. A loop's predicate is, even when the condition returns a state
  element as it is: the loop reads the predicate's buffer. A conditional
  also reads its branch index. Fusions, custom calls and every other
  instruction read all their operands (their thunks list every operand).
* **An element passed on unchanged** by a ``while`` (its body's root holds
  the state element it was given, however the tuples around it are
  rebuilt), a ``call`` (its computation's root holds an element of a
  parameter) or a ``conditional`` (each branch does) is the operand's
  buffer, which no op inside touches: reading it afterwards depends on the
  producer of that operand element, not on the loop, call or conditional.
  A conditional whose branches differ depends on both.
* **Async pairs** (``*-start`` ... ``*-done``, ``send``/``send-done``,
  ``recv``/``recv-done``, ``async-start``/``async-update``/``async-done``)
  are one piece of work that begins at the start and ends at the done: an
  op that depends on the start alone may overlap it.

Not concluded: anything from the schedule's order, from
``control-predecessors={...}`` (they shape XLA's schedule, but XLA:CPU's
execution graph ignores them) or from side-effect flags. How ops in
different computations relate is `entangle_jax.testing._order.reach`'s
docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from entangle_jax.testing._hlo.parser import Instruction, Module

if TYPE_CHECKING:
  # Dataflow builds the graphs and answers what their callees read.
  from entangle_jax.testing._order.dataflow import Dataflow

Path = tuple[int, ...]
"""Indices into nested tuples: ``(1, 0)`` is element 0 of element 1."""

# Instructions whose called computations' parameters are their operands.
PARAMETER_CALLS = frozenset({"call", "async-start"})
# Instructions whose dependencies depend on what their callees read.
READS_CALLEES = frozenset({"while", "conditional", *PARAMETER_CALLS})
# Instructions whose result may hold operand elements passed on unchanged.
FORWARDS = frozenset({"while", "call", "conditional"})


class ComputationGraph:
  """One computation's instructions and the edges among them.

  Attributes:
    instructions: in text order; positions below index this list.
    index: instruction name -> position.
    deps: per position, the positions of the instructions it depends on.
    order: every position, in a topological order of `deps`.
    rank: per position, its place in `order`.
    span: per position, the (start, done) positions of the async pair it
      is part of, or (itself, itself).
  """

  def __init__(self, module: Module, name: str, dataflow: Dataflow):
    self.name = name
    self.instructions = module.computations[name]
    self.index = {i.name: n for n, i in enumerate(self.instructions)}
    self.root = next(
      (n for n, i in enumerate(self.instructions) if i.root),
      len(self.instructions) - 1,
    )
    self._dataflow = dataflow
    self._users: list[list[int]] | None = None
    self._dependents: list[list[int]] | None = None
    self.deps = [self._dependencies(n) for n in range(len(self.instructions))]
    self.order = self._topological_order()
    self.rank = [0] * len(self.order)
    for r, n in enumerate(self.order):
      self.rank[n] = r
    self.span = self._spans()

  def users(self) -> list[list[int]]:
    """Per position, the positions that name it as an operand."""
    if self._users is None:
      self._users = [[] for _ in self.instructions]
      for n, i in enumerate(self.instructions):
        for operand in dict.fromkeys(i.operands):
          self._users[self.index[operand]].append(n)
    return self._users

  def dependents(self) -> list[list[int]]:
    """Per position, the positions whose `deps` name it."""
    if self._dependents is None:
      self._dependents = [[] for _ in self.instructions]
      for n, producers in enumerate(self.deps):
        for p in producers:
          self._dependents[p].append(n)
    return self._dependents

  def _dependencies(self, n: int) -> list[int]:
    i = self.instructions[n]
    if i.opcode == "get-tuple-element":
      return self.resolve(n, ())
    operands = [self.index[name] for name in i.operands]
    found: list[int] = []
    for k, operand in enumerate(operands):
      reads = (
        self._dataflow.operand_reads(i, k)
        if i.opcode in READS_CALLEES
        else [()]
      )
      for path in reads:
        found += self.resolve(operand, path)
    return list(dict.fromkeys(found))

  def resolve(self, n: int, path: Path) -> list[int]:
    """The positions whose bytes element `path` of instruction `n` holds
    (`sources` without the elements). Empty when it holds no bytes."""
    i = self.instructions[n]
    if not path and i.opcode != "get-tuple-element":  # Most operands.
      return [] if i.zero_sized else [n]
    return list(
      dict.fromkeys(position for position, _ in self.sources(n, path))
    )

  def sources(self, n: int, path: Path) -> list[tuple[int, Path]]:
    """Which instructions produced the bytes of element `path` of
    instruction `n`, as (position, element of its result) pairs.

    Follows tuples and get-tuple-elements, and elements that a loop, call
    or conditional passes on unchanged (`Dataflow.forwarded`), to where the
    bytes were written; within a called computation that may be one of its
    parameters. Empty when the element holds no bytes.
    """
    found: list[tuple[int, Path]] = []
    pending = [(n, path)]
    seen: set[tuple[int, Path]] = set()
    while pending:
      state = pending.pop()
      if state in seen:
        continue
      seen.add(state)
      n, path = state
      i = self.instructions[n]
      if i.opcode == "get-tuple-element":
        if not i.zero_sized:
          pending.append(
            (self.index[i.operands[0]], (i.tuple_index or 0, *path))
          )
      elif i.opcode == "tuple" and path and path[0] < len(i.operands):
        pending.append((self.index[i.operands[path[0]]], path[1:]))
      elif path and i.opcode in FORWARDS:
        for k, element in self._dataflow.forwarded(i, path):
          if k is None:
            found.append((n, path))
          else:
            pending.append((self.index[i.operands[k]], element))
      elif path or not i.zero_sized:
        found.append((n, path))
    return list(dict.fromkeys(found))

  def parameter_number(self, n: int) -> int | None:
    """``N`` when the instruction at `n` is ``parameter(N)``, else None."""
    i = self.instructions[n]
    return i.parameter_number if i.opcode == "parameter" else None

  def _topological_order(self) -> list[int]:
    """Kahn's algorithm on operands; text order among ready instructions."""
    users = self.users()
    waiting = [len(set(i.operands)) for i in self.instructions]
    ready = [n for n, w in enumerate(waiting) if w == 0]
    ready.reverse()
    order = []
    while ready:
      n = ready.pop()
      order.append(n)
      for user in reversed(users[n]):
        waiting[user] -= 1
        if waiting[user] == 0:
          ready.append(user)
    if len(order) < len(self.instructions):
      stuck = next(i for n, i in enumerate(self.instructions) if waiting[n])
      raise ValueError(
        f"HLO text, line {stuck.line}: %{stuck.name} depends on itself "
        f"through its operands (computation %{self.name})"
      )
    return order

  def _spans(self) -> list[tuple[int, int]]:
    span = [(n, n) for n in range(len(self.instructions))]
    users = self.users()
    for n, i in enumerate(self.instructions):
      if not _starts_async(i.opcode):
        continue
      chain = [n]
      while not _ends_async(self.instructions[chain[-1]].opcode):
        step = [u for u in users[chain[-1]] if _continues(self.instructions[u])]
        if not step:
          break
        chain.append(step[0])
      for member in chain:
        span[member] = (chain[0], chain[-1])
    return span


def _starts_async(opcode: str) -> bool:
  return opcode.endswith("-start") or opcode in ("send", "recv")


def _ends_async(opcode: str) -> bool:
  return opcode.endswith("-done")


def _continues(user: Instruction) -> bool:
  return user.opcode == "async-update" or _ends_async(user.opcode)
