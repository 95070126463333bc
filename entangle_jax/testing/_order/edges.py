"""One computation's instructions and the dependency edges among them.

`Computation` is the structure the text gives (positions, users, root);
`ComputationGraph` adds the edges, which `entangle_jax.testing._order.
dataflow` works out from the rule table (`entangle_jax.testing._order.
rules`, rules 1-3 and each construct's rule), and what follows from them:
a topological order, and the async pair each position belongs to. Neither
knows how the edges were found.
"""

from __future__ import annotations

from entangle_jax.testing._hlo import Instruction
from entangle_jax.testing._order import rules

Path = tuple[int, ...]
"""Indices into nested tuples: ``(1, 0)`` is element 0 of element 1."""


class Computation:
  """One computation's instructions, by position, and who uses each.

  Attributes:
    name: the computation's name.
    instructions: in text order; positions below index this list.
    index: instruction name -> position.
    root: the position of the ROOT instruction (the last if none is
      marked).
  """

  def __init__(self, name: str, instructions: list[Instruction]):
    self.name = name
    self.instructions = instructions
    self.index = {i.name: n for n, i in enumerate(instructions)}
    self.root = next(
      (n for n, i in enumerate(instructions) if i.root),
      len(instructions) - 1,
    )
    self._users: list[list[int]] | None = None
    self._span: list[tuple[int, int]] | None = None

  def spans(self) -> list[tuple[int, int]]:
    """Per position, the (start, done) positions of the async pair it is
    part of, or (itself, itself) (rule 3): from the structure alone, so
    that naming an op needs no edges."""
    if self._span is None:
      self._span = self._spans()
    return self._span

  def users(self) -> list[list[int]]:
    """Per position, the positions that name it as an operand."""
    if self._users is None:
      self._users = [[] for _ in self.instructions]
      for n, i in enumerate(self.instructions):
        for operand in dict.fromkeys(i.operands):
          self._users[self.index[operand]].append(n)
    return self._users

  def _spans(self) -> list[tuple[int, int]]:
    span = [(n, n) for n in range(len(self.instructions))]
    users = self.users()
    for n, i in enumerate(self.instructions):
      if not rules.starts_async(i.opcode):
        continue
      chain = [n]
      while not rules.ends_async(self.instructions[chain[-1]].opcode):
        step = [
          u
          for u in users[chain[-1]]
          if rules.continues_async(self.instructions[u].opcode)
        ]
        if not step:
          break
        chain.append(step[0])
      for member in chain:
        span[member] = (chain[0], chain[-1])
    return span

  def parameter_number(self, n: int) -> int | None:
    """``N`` when the instruction at `n` is ``parameter(N)``, else None."""
    i = self.instructions[n]
    return i.parameter_number if i.opcode == "parameter" else None


class ComputationGraph(Computation):
  """A `Computation` and the edges among its instructions.

  Args:
    computation: the structure.
    deps: per position, the positions of the instructions it depends on.

  Attributes:
    deps: `deps`.
    order: every position, in a topological order of `deps`.
    rank: per position, its place in `order`.
    span: per position, the (start, done) positions of the async pair it
      is part of, or (itself, itself) (rule 3).
  """

  def __init__(self, computation: Computation, deps: list[list[int]]):
    # The structure's fields, shared rather than recomputed.
    self.name = computation.name
    self.instructions = computation.instructions
    self.index = computation.index
    self.root = computation.root
    self._users = computation.users()
    self._span = computation.spans()
    self._dependents: list[list[int]] | None = None
    self.deps = deps
    self.order = self._topological_order()
    self.rank = [0] * len(self.order)
    for r, n in enumerate(self.order):
      self.rank[n] = r
    self.span = self._span

  def dependents(self) -> list[list[int]]:
    """Per position, the positions whose `deps` name it."""
    if self._dependents is None:
      self._dependents = [[] for _ in self.instructions]
      for n, producers in enumerate(self.deps):
        for p in producers:
          self._dependents[p].append(n)
    return self._dependents

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
