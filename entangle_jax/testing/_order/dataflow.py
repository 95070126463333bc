"""Where each computation's edges come from: what instructions read of
their operands, what called computations read of their parameters, and
where the elements of a loop's, call's or conditional's result come from.

Each question is answered from the instruction's rule
(`entangle_jax.testing._order.rules`), never from its opcode. `Dataflow`
builds each computation's `ComputationGraph` on demand, the computations
whose reads its edges need first (callees before callers, so that no
answer recurses more than one level), and keeps the facts it found; the
graphs it builds hold only their edges, and know nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from entangle_jax.testing._hlo import Instruction, Module
from entangle_jax.testing._order import rules
from entangle_jax.testing._order.call_graph import post_order
from entangle_jax.testing._order.edges import (
  Computation,
  ComputationGraph,
  Path,
)
from entangle_jax.testing._order.rules import Forwards, Parameters, Reads

Source = tuple[int | None, Path]
"""Where a result element comes from: ``(k, element)`` for an element of
operand ``k`` passed on unchanged, ``(None, path)`` for bytes written
inside."""


class Dataflow:
  """The edges of each computation of a module, and the facts behind them.

  Args:
    module: the parsed module.
  """

  def __init__(self, module: Module):
    self.module = module
    self._computations: dict[str, Computation] = {}
    self._graphs: dict[str, ComputationGraph] = {}
    self._reads: dict[tuple[str, int], list[Path]] = {}
    self._parameter_positions: dict[str, dict[int | None, list[int]]] = {}
    self._operand_positions: dict[tuple[str, int], dict[str, list[int]]] = {}
    self._forwarded: dict[tuple[str, str, Path], list[Source]] = {}
    # Loop conditions: their ROOT is the predicate, which the loop reads
    # (rule 13).
    self._conditions = {
      i.condition
      for instructions in module.computations.values()
      for i in instructions
      if rules.rule_for(i.opcode).parameters is Parameters.LOOP_STATE
      and i.condition
    }

  def computation(self, name: str) -> Computation:
    """The structure of computation `name` (no edges)."""
    if name not in self._computations:
      self._computations[name] = Computation(
        name, self.module.computations[name]
      )
    return self._computations[name]

  def __getitem__(self, name: str) -> ComputationGraph:
    """The graph of computation `name`, built with those it needs."""
    if name not in self._graphs:
      for callee in self._post_order(name):
        if callee not in self._graphs:
          self._graphs[callee] = self._build(callee)
    return self._graphs[name]

  def _post_order(self, name: str) -> list[str]:
    """`name` and the computations whose reads its edges need, callees
    first."""

    def callees(current: str):
      for i in self.module.computations[current]:
        reads = rules.rule_for(i.opcode).reads
        if reads is Reads.CALLEES and current not in self._graphs:
          yield from i.callees

    return post_order(name, callees)

  def _build(self, name: str) -> ComputationGraph:
    computation = self.computation(name)
    deps = [
      self._dependencies(computation, n)
      for n in range(len(computation.instructions))
    ]
    return ComputationGraph(computation, deps)

  def _dependencies(self, computation: Computation, n: int) -> list[int]:
    """Rule 1: the producers of the operand elements instruction `n` reads."""
    i = computation.instructions[n]
    reads = rules.rule_for(i.opcode).reads
    if reads is Reads.ELEMENT:  # Rule 11.
      return self.resolve(computation, n, ())
    found: list[int] = []
    for k, operand in enumerate(i.operands):
      position = computation.index[operand]
      paths = self.operand_reads(i, k) if reads is Reads.CALLEES else [()]
      for path in paths:
        found += self.resolve(computation, position, path)
    return list(dict.fromkeys(found))

  def resolve(self, computation: Computation, n: int, path: Path) -> list[int]:
    """The positions whose bytes element `path` of instruction `n` holds
    (`sources` without the elements). Empty when it holds no bytes."""
    i = computation.instructions[n]
    if not path and rules.rule_for(i.opcode).forwards is not Forwards.ELEMENT:
      return [] if i.zero_sized else [n]  # Most operands. Rule 2.
    return list(dict.fromkeys(p for p, _ in self.sources(computation, n, path)))

  def sources(
    self, computation: Computation, n: int, path: Path
  ) -> list[tuple[int, Path]]:
    """Which instructions produced the bytes of element `path` of
    instruction `n`, as (position, element of its result) pairs.

    Follows what each instruction passes on unchanged (its rule's
    `Forwards`) to where the bytes were written; within a called
    computation that may be one of its parameters. Empty when the element
    holds no bytes (rule 2).
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
      i = computation.instructions[n]
      forwards = rules.rule_for(i.opcode).forwards
      if forwards is Forwards.ELEMENT:  # Rule 11.
        if not i.zero_sized:
          operand = computation.index[i.operands[0]]
          pending.append((operand, (i.tuple_index or 0, *path)))
      elif (
        forwards is Forwards.ELEMENTS and path and path[0] < len(i.operands)
      ):  # Rule 10.
        pending.append((computation.index[i.operands[path[0]]], path[1:]))
      elif forwards is Forwards.ROOTS and path:  # Rules 13-15.
        for k, element in self.forwarded(i, path):
          if k is None:
            found.append((n, path))
          else:
            pending.append((computation.index[i.operands[k]], element))
      elif path or not i.zero_sized:
        found.append((n, path))
    return list(dict.fromkeys(found))

  def operand_reads(self, i: Instruction, k: int) -> list[Path]:
    """Elements of operand `k` that `i`, whose rule reads what its
    computations read, reads through them (rules 13-16)."""
    parameters = rules.rule_for(i.opcode).parameters
    if parameters is Parameters.LOOP_STATE:
      return self.loop_reads(i) if k == 0 else []
    if parameters is Parameters.BRANCH:
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

    ``()`` is the whole value. What passes its operand on reads nothing
    (rules 10-12); the ROOT of a loop condition is the predicate, which the
    loop reads; the ROOT tuple of a loop body only carries values to the
    next iteration (rule 13).
    """
    key = (computation, number)
    if key not in self._reads:
      self._reads[key] = self._parameter_reads(computation, number)
    return self._reads[key]

  def _parameters(self, name: str) -> dict[int | None, list[int]]:
    """The positions of computation `name`'s parameters, by number: found
    once, not once per parameter (a computation JAX lowers for a loop body
    of 2,000 leaves takes 2,000 parameters)."""
    if name not in self._parameter_positions:
      found: dict[int | None, list[int]] = {}
      for n, i in enumerate(self.computation(name).instructions):
        if i.opcode == "parameter":
          found.setdefault(i.parameter_number, []).append(n)
      self._parameter_positions[name] = found
    return self._parameter_positions[name]

  def _positions_in(self, name: str, n: int) -> dict[str, list[int]]:
    """Where each operand of instruction `n` of computation `name` stands
    among its operands: looked up, not searched, for each of the values a
    tuple of thousands of them passes on."""
    key = (name, n)
    if key not in self._operand_positions:
      found: dict[str, list[int]] = {}
      operands = self.computation(name).instructions[n].operands
      for k, operand in enumerate(operands):
        found.setdefault(operand, []).append(k)
      self._operand_positions[key] = found
    return self._operand_positions[key]

  def _parameter_reads(self, name: str, number: int) -> list[Path]:
    computation = self.computation(name)
    instructions = computation.instructions
    users = computation.users()
    found: list[Path] = []
    # (position, where the parameter's part sits in its value, which part).
    pending: list[tuple[int, Path, Path]] = [
      (n, (), ()) for n in self._parameters(name).get(number, ())
    ]
    seen: set[tuple[int, Path, Path]] = set()
    while pending:
      state = pending.pop()
      if state in seen:
        continue
      seen.add(state)
      n, at, part = state
      if n == computation.root and name in self._conditions:
        found.append(part)
      value = instructions[n].name
      for u in users[n]:
        user = instructions[u]
        rule = rules.rule_for(user.opcode)
        if rule.reads is Reads.ELEMENT:  # Rule 11.
          j = user.tuple_index or 0
          if user.zero_sized or (at and at[0] != j):
            continue
          pending.append((u, at[1:], part) if at else (u, (), (*part, j)))
        elif rule.reads is Reads.PASSES_ON:
          if rule.forwards is Forwards.ELEMENTS:  # Rule 10.
            pending += [
              (u, (k, *at), part)
              for k in self._positions_in(name, u).get(value, ())
            ]
          else:  # Rule 12.
            pending.append((u, at, part))
        elif rule.reads is Reads.CALLEES:
          # Only what the inner loop, call or conditional itself reads.
          for k in self._positions_in(name, u).get(value, ()):
            for read in self.operand_reads(user, k):
              found += _part_read(read, at, part)
          if (
            rule.parameters is Parameters.LOOP_STATE
            and at
            and self.forwarded(user, at) == [(0, at)]
          ):
            pending.append((u, at, part))  # The inner loop passes it on.
        else:
          found.append(part)
    return _outermost(found)

  def forwarded(self, i: Instruction, path: Path) -> list[Source]:
    """Where element `path` of the result of `i`, whose rule forwards what
    its computations' roots hold, comes from (rules 13-15).

    A loop's result element is its initial one when the body's root holds
    the state element it was given at the same place (copy insertion makes
    any other loop-carried value a write inside the body).
    """
    key = (i.computation, i.name, path)
    if key not in self._forwarded:
      self._forwarded[key] = list(dict.fromkeys(self._find_forwarded(i, path)))
    return self._forwarded[key]

  def _passes_on(self, body: Computation, element: Path) -> bool:
    """Whether a loop `body`'s root holds state element `element` as the
    body was given it."""
    return all(
      body.parameter_number(position) == 0 and found == element
      for position, found in self.sources(body, body.root, element)
    )

  def _find_forwarded(self, i: Instruction, path: Path) -> Iterator[Source]:
    if rules.rule_for(i.opcode).parameters is Parameters.LOOP_STATE:
      if i.body is None:
        yield None, path
        return
      body = self.computation(i.body)
      for position, element in self.sources(body, body.root, path):
        from_state = body.parameter_number(position) == 0
        if from_state and element == path:
          yield 0, path
        elif (
          from_state and element is not None and self._passes_on(body, element)
        ):
          # Another state element, one the body hands back unchanged:
          # after any iteration this one holds that element's initial
          # value, before the first its own.
          yield 0, element
          yield 0, path
        else:
          yield None, path
      return
    for operand, name in rules.callee_parameters(i):
      computation = self.computation(name)
      for position, element in self.sources(
        computation, computation.root, path
      ):
        k = computation.parameter_number(position)
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
  # Looked up by each shorter prefix of a path, not compared with every
  # path kept: a loop state of thousands of elements reads as many paths.
  covering: set[Path] = set()
  for path in sorted(set(paths), key=len):
    if not any(path[:length] in covering for length in range(len(path))):
      kept.append(path)
      covering.add(path)
  return kept
