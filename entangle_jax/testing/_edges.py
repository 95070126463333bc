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
* **A loop result that the body carries through unchanged** is the buffer
  its initial value was in: reading it after the loop depends on the
  producer of that value, not on the loop.
* **Async pairs** (``*-start`` ... ``*-done``, ``send``/``send-done``,
  ``recv``/``recv-done``, ``async-start``/``async-update``/``async-done``)
  are one piece of work that begins at the start and ends at the done: an
  op that depends on the start alone may overlap it.

Not concluded: anything from the schedule's order, from
``control-predecessors={...}`` (they shape XLA's schedule, but XLA:CPU's
execution graph ignores them) or from side-effect flags. How ops in
different computations relate is `entangle_jax.testing._reach`'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax.testing._call_graph import post_order
from entangle_jax.testing._hlo_parse import Instruction, Module

Path = tuple[int, ...]
"""Indices into nested tuples: ``(1, 0)`` is element 0 of element 1."""

# Instructions whose called computations' parameters are their operands.
_PARAMETER_CALLS = frozenset({"call", "async-start"})
# Instructions whose dependencies depend on what their callees read.
_READS_CALLEES = frozenset({"while", "conditional", *_PARAMETER_CALLS})


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
    if i.opcode == "while":
      for path in self._dataflow.loop_reads(i):
        found += self.resolve(operands[0], path)
    elif i.opcode == "conditional":
      found += self.resolve(operands[0], ())  # The branch index.
      for callee, operand in zip(i.callees, operands[1:], strict=False):
        for path in self._dataflow.parameter_reads(callee, 0):
          found += self.resolve(operand, path)
    elif i.opcode in _PARAMETER_CALLS:
      for callee in i.callees:
        for k, operand in enumerate(operands):
          for path in self._dataflow.parameter_reads(callee, k):
            found += self.resolve(operand, path)
    else:
      for operand in operands:
        found += self.resolve(operand, ())
    return list(dict.fromkeys(found))

  def resolve(self, n: int, path: Path) -> list[int]:
    """The positions whose bytes element `path` of instruction `n` holds.

    Follows tuples and get-tuple-elements to the instruction that produced
    the element, and loop results that the body carries through unchanged
    to the loop's initial value. Empty when the element holds no bytes.
    """
    while True:
      i = self.instructions[n]
      if i.opcode == "get-tuple-element":
        if i.zero_sized:
          return []
        n, path = self.index[i.operands[0]], (i.tuple_index or 0, *path)
      elif i.opcode == "tuple" and path and path[0] < len(i.operands):
        n, path = self.index[i.operands[path[0]]], path[1:]
      elif i.opcode == "while" and path and self._carries(i, path[0]):
        n = self.index[i.operands[0]]
      else:
        return [] if i.zero_sized and not path else [n]

  def _carries(self, loop: Instruction, element: int) -> bool:
    return element in self._dataflow.carried(loop)

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


class Dataflow:
  """The `ComputationGraph` of each computation of a module, built on demand.

  Building one builds the graphs of the computations it calls first, in
  post-order, so that no build recurses (the parser refuses call cycles).
  """

  def __init__(self, module: Module):
    self.module = module
    self._graphs: dict[str, ComputationGraph] = {}
    self._reads: dict[tuple[str, int], list[Path]] = {}
    self._carried: dict[tuple[str, str], frozenset[int]] = {}
    self._conditions = {
      i.condition
      for instructions in module.computations.values()
      for i in instructions
      if i.opcode == "while" and i.condition
    }

  def __getitem__(self, name: str) -> ComputationGraph:
    if name not in self._graphs:
      for callee in self._post_order(name):
        if callee not in self._graphs:
          self._graphs[callee] = ComputationGraph(self.module, callee, self)
    return self._graphs[name]

  def _post_order(self, name: str) -> list[str]:
    """`name` and the computations whose reads its edges need, callees
    first."""

    def callees(current: str):
      for i in self.module.computations[current]:
        if i.opcode in _READS_CALLEES and current not in self._graphs:
          yield from i.callees

    return post_order(name, callees)

  def loop_reads(self, loop: Instruction) -> list[Path]:
    """The state elements a while loop's condition or body reads."""
    paths: list[Path] = []
    for callee in (loop.condition, loop.body):
      if callee is not None:
        paths += self.parameter_reads(callee, 0)
    return _outermost(paths)

  def parameter_reads(self, computation: str, number: int) -> list[Path]:
    """Elements of parameter `number` that an op of `computation` reads.

    ``()`` is the whole value. Forwarding (get-tuple-element, tuple,
    bitcast) reads nothing; the ROOT of a loop condition is the predicate,
    which the loop reads; the ROOT tuple of a loop body only carries values
    to the next iteration.
    """
    key = (computation, number)
    if key not in self._reads:
      self._reads[key] = self._parameter_reads(computation, number)
    return self._reads[key]

  def _parameter_reads(self, computation: str, number: int) -> list[Path]:
    graph = self[computation]
    users = graph.users()
    found: list[Path] = []
    # (position, where the parameter's part sits in its value, which part).
    pending: list[tuple[int, Path, Path]] = [
      (n, (), ())
      for n, i in enumerate(graph.instructions)
      if i.opcode == "parameter" and i.parameter_number == number
    ]
    seen: set[tuple[int, Path, Path]] = set()
    while pending:
      state = pending.pop()
      if state in seen:
        continue
      seen.add(state)
      n, at, part = state
      if n == graph.root and computation in self._conditions:
        found.append(part)
      for u in users[n]:
        user = graph.instructions[u]
        if user.opcode == "get-tuple-element":
          j = user.tuple_index or 0
          if user.zero_sized or (at and at[0] != j):
            continue
          pending.append((u, at[1:], part) if at else (u, (), (*part, j)))
        elif user.opcode == "tuple":
          name = graph.instructions[n].name
          pending += [
            (u, (k, *at), part)
            for k, operand in enumerate(user.operands)
            if operand == name
          ]
        elif user.opcode == "bitcast":
          pending.append((u, at, part))
        else:
          found.append(part)
    return _outermost(found)

  def carried(self, loop: Instruction) -> frozenset[int]:
    """State elements that the loop's body passes on unchanged."""
    key = (loop.computation, loop.name)
    if key not in self._carried:
      self._carried[key] = self._find_carried(loop)
    return self._carried[key]

  def _find_carried(self, loop: Instruction) -> frozenset[int]:
    if loop.body is None:
      return frozenset()
    body = self[loop.body]
    root = body.instructions[body.root]
    if root.opcode != "tuple":
      return frozenset()
    carried = set()
    for k, name in enumerate(root.operands):
      element = body.instructions[body.index[name]]
      if element.opcode != "get-tuple-element" or element.tuple_index != k:
        continue
      source = body.instructions[body.index[element.operands[0]]]
      if source.opcode == "parameter" and source.parameter_number == 0:
        carried.add(k)
    return frozenset(carried)


def _outermost(paths: Sequence[Path]) -> list[Path]:
  """`paths` without those inside another one (``()`` covers all)."""
  kept: list[Path] = []
  for path in sorted(set(paths), key=len):
    if not any(path[: len(k)] == k for k in kept):
      kept.append(path)
  return kept


def _starts_async(opcode: str) -> bool:
  return opcode.endswith("-start") or opcode in ("send", "recv")


def _ends_async(opcode: str) -> bool:
  return opcode.endswith("-done")


def _continues(user: Instruction) -> bool:
  return user.opcode == "async-update" or _ends_async(user.opcode)
