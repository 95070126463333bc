"""What each computation's parameters are read for, and where the elements
of loop, call and conditional results come from: the questions that
`entangle_jax.testing._order.edges.ComputationGraph` asks about the computations
an instruction calls (the rules are that module's docstring)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from entangle_jax.testing._hlo.parser import Instruction, Module
from entangle_jax.testing._order.call_graph import post_order
from entangle_jax.testing._order.edges import (
  READS_CALLEES,
  ComputationGraph,
  Path,
)


class Dataflow:
  """The `ComputationGraph` of each computation of a module, built on demand.

  Building one builds the graphs of the computations it calls first, in
  post-order, so that no build recurses (the parser refuses call cycles).
  """

  def __init__(self, module: Module):
    self.module = module
    self._graphs: dict[str, ComputationGraph] = {}
    self._reads: dict[tuple[str, int], list[Path]] = {}
    self._forwarded: dict[
      tuple[str, str, Path], list[tuple[int | None, Path]]
    ] = {}
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
        if i.opcode in READS_CALLEES and current not in self._graphs:
          yield from i.callees

    return post_order(name, callees)

  def operand_reads(self, i: Instruction, k: int) -> list[Path]:
    """Elements of operand `k` that the loop, conditional or call `i` (an
    instruction of `READS_CALLEES`) reads through its computations."""
    if i.opcode == "while":
      return self.loop_reads(i) if k == 0 else []
    if i.opcode == "conditional":
      if k == 0:
        return [()]  # The branch index (or predicate).
      branches = i.branches[k - 1 : k]
      return [p for b in branches for p in self.parameter_reads(b, 0)]
    return _outermost(
      [p for c in i.callees for p in self.parameter_reads(c, k)]
    )

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
        elif user.opcode in READS_CALLEES:
          # Only what the inner loop, call or conditional itself reads.
          name = graph.instructions[n].name
          for k, operand in enumerate(user.operands):
            if operand == name:
              for read in self.operand_reads(user, k):
                found += _part_read(read, at, part)
          if (
            user.opcode == "while"
            and at
            and self.forwarded(user, at) == [(0, at)]
          ):
            pending.append((u, at, part))  # The inner loop passes it on.
        else:
          found.append(part)
    return _outermost(found)

  def forwarded(
    self, i: Instruction, path: Path
  ) -> list[tuple[int | None, Path]]:
    """Where element `path` of the result of loop, call or conditional `i`
    comes from: ``(k, element)`` for an element of operand ``k`` that a
    computation's root passes on unchanged, ``(None, path)`` for bytes that
    an op inside wrote.

    A loop's result element is its initial one when the body's root holds
    the state element it was given at the same place (copy insertion makes
    any other loop-carried value a write inside the body).
    """
    key = (i.computation, i.name, path)
    if key not in self._forwarded:
      self._forwarded[key] = list(dict.fromkeys(self._find_forwarded(i, path)))
    return self._forwarded[key]

  def _find_forwarded(
    self, i: Instruction, path: Path
  ) -> Iterator[tuple[int | None, Path]]:
    if i.opcode == "while":
      if i.body is None:
        yield None, path
        return
      body = self[i.body]
      for position, element in body.sources(body.root, path):
        carried = body.parameter_number(position) == 0 and element == path
        yield (0, path) if carried else (None, path)
      return
    # (the operand a computation's parameter 0 is, or None where parameter k
    # is operand k, computation): a call passes all its operands to its
    # computation, a conditional operand b + 1 to branch b.
    if i.opcode == "call":
      computations = [(None, c) for c in i.callees]
    else:
      computations = list(enumerate(i.branches, start=1))
    for operand, computation in computations:
      graph = self[computation]
      for position, element in graph.sources(graph.root, path):
        k = graph.parameter_number(position)
        if k is None:
          yield None, path
        else:
          yield (k if operand is None else operand), element


def _part_read(read: Path, at: Path, part: Path) -> list[Path]:
  """What of a parameter's `part`, sitting at element `at` of an operand,
  is read by a read of the operand's element `read`."""
  if at[: len(read)] == read:
    return [part]
  if read[: len(at)] == at:
    return [(*part, *read[len(at) :])]
  return []


def _outermost(paths: Sequence[Path]) -> list[Path]:
  """`paths` without those inside another one (``()`` covers all)."""
  kept: list[Path] = []
  for path in sorted(set(paths), key=len):
    if not any(path[: len(k)] == k for k in kept):
      kept.append(path)
  return kept
