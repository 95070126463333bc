"""The dataflow edges the XLA runtimes honour, and reachability along them.

Only these edges count:

* **Operand edges** (data dependencies). XLA:CPU runs thunks concurrently
  on an execution graph built only from their buffer and resource uses
  (``xla/backends/cpu/runtime/thunk_executor.cc``), and GPU command buffers
  in concurrent mode derive their dependencies from buffer uses as well; a
  value one op produces and another reads is a buffer conflict on every
  backend. Through ``tuple``/``get-tuple-element`` only the element that is
  read counts. Edges through zero-sized values do not count: an empty
  buffer slice overlaps, so conflicts with, nothing
  (``BufferAllocation::Slice::OverlapsWith`` in
  ``xla/service/buffer_assignment.h``), and XLA usually replaces a
  zero-size value with an empty constant anyway.
* **Into a while loop**, only the state elements its body or condition
  read: XLA:CPU runs the loop as one thunk whose buffer uses are those of
  the thunks inside (``xla/backends/cpu/runtime/while_thunk.cc``), so an
  element carried through unchanged orders nothing; reading it after the
  loop depends on its producer, not on the loop.
* **Not control predecessors.** They constrain XLA's scheduler, not the
  CPU runtime's execution graph, so a ``control-predecessors={...}`` edge
  alone orders nothing here.
* **Async pairs** (``*-start`` ... ``*-done``, ``send``/``send-done``,
  ``recv``/``recv-done``, ``async-start``/``async-update``/``async-done``)
  are one piece of work that begins at the start and ends at the done: an op
  precedes it when it precedes the start, and it precedes an op when the
  done does. Ops that depend on the start alone may overlap it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from entangle_jax._src.native import ENTANGLE_TARGET
from entangle_jax.testing import _hlo_parse
from entangle_jax.testing._toposort import topological_order

Span = tuple[str, str]
"""The first and last instruction of one piece of work (an async pair)."""


class Dataflow:
  """The honoured edges of one parsed module, and reachability along them.

  Answers are per computation: nested computations are related through the
  instructions that call them by `entangle_jax.testing._analysis`.
  """

  def __init__(self, module: _hlo_parse.Module):
    self._module = module
    self.by_name = {
      (i.computation, i.name): i
      for instructions in module.computations.values()
      for i in instructions
    }
    self._spans = self._find_spans()
    # Per computation, and per loop: computed once, when first asked.
    self._closure = functools.cache(self._find_closure)
    self._loop_elements = functools.cache(self._find_loop_elements)

  def span(self, instruction: _hlo_parse.Instruction) -> Span:
    """The async pair `instruction` belongs to, or itself twice."""
    key = (instruction.computation, instruction.name)
    return self._spans.get(key, (instruction.name, instruction.name))

  def reaches(self, computation: str, source: str, target: str) -> bool:
    """Whether a chain of honoured edges in `computation` leads from
    instruction `source` to instruction `target`."""
    index, closure = self._closure(computation)
    return bool(closure[index[source]] >> index[target] & 1)

  def has_only_empty_witnesses(self, i: _hlo_parse.Instruction) -> bool:
    """Whether `i` is an entangle call whose witnesses (the operands no
    result aliases) are all zero-size, so that it orders nothing."""
    if i.target != ENTANGLE_TARGET:
      return False
    witnesses = [
      self.by_name[(i.computation, name)]
      for n, name in enumerate(i.operands)
      if n not in i.aliased_operands
    ]
    return bool(witnesses) and all(w.zero_sized for w in witnesses)

  def _find_spans(self) -> dict[tuple[str, str], Span]:
    """Each instruction of an async pair -> (its start, its done)."""
    spans = {}
    for computation, instructions in self._module.computations.items():
      users = _users(instructions)
      for i in instructions:
        if not _starts_async(i.opcode):
          continue
        chain = [i.name]
        current = i
        while not _ends_async(current.opcode):
          step = [u for u in users.get(current.name, []) if _continues(u)]
          if not step:
            break
          current = step[0]
          chain.append(current.name)
        for name in chain:
          spans[(computation, name)] = (chain[0], chain[-1])
    return spans

  def _find_closure(self, computation: str):
    """Per instruction, the bitset of instructions that depend on it."""
    instructions = self._module.computations[computation]
    index = {i.name: n for n, i in enumerate(instructions)}
    users: list[list[int]] = [[] for _ in instructions]
    for n, i in enumerate(instructions):
      for producer in self._producers(i):
        users[index[producer]].append(n)
    reach = [0] * len(instructions)
    for n in reversed(topological_order(users)):
      bits = 0
      for user in users[n]:
        bits |= (1 << user) | reach[user]
      reach[n] = bits
    return index, reach

  def _producers(self, i: _hlo_parse.Instruction) -> Iterable[str]:
    """Operands whose values `i` reads: the edges the runtime honours."""
    for name in i.operands:
      operand = self.by_name[(i.computation, name)]
      if i.opcode == "while" and operand.opcode == "tuple":
        # The loop reads only the elements its body or condition use; an
        # element it merely carries through is no buffer conflict of it.
        used = self._loop_elements(i)[0]
        elements = [
          self.by_name[(i.computation, e)]
          for k, e in enumerate(operand.operands)
          if used is None or k in used
        ]
        yield from (e.name for e in elements if not e.zero_sized)
        continue
      if i.opcode == "while" and self._loop_elements(i)[0] == set():
        continue  # The loop reads nothing of its init: no conflict.
      if i.opcode == "get-tuple-element" and i.tuple_index is not None:
        operand = self._element(operand, i.tuple_index)
      if not operand.zero_sized:
        yield operand.name

  def _element(
    self, producer: _hlo_parse.Instruction, index: int
  ) -> _hlo_parse.Instruction:
    """The instruction that produced element `index` of `producer`."""
    if producer.opcode == "tuple" and index < len(producer.operands):
      return self.by_name[(producer.computation, producer.operands[index])]
    if producer.opcode == "while" and index in self._loop_elements(producer)[1]:
      # Carried through unchanged: the value (and buffer) of the init.
      (init,) = producer.operands[:1] or (None,)
      if init is not None:
        return self._element(self.by_name[(producer.computation, init)], index)
    return producer

  def _find_loop_elements(self, loop: _hlo_parse.Instruction):
    """(elements the loop reads or None for all, elements it carries through).

    XLA:CPU runs a while loop as one thunk whose buffer uses are those of
    the thunks in its condition and body, so only the elements some op in
    there reads make the loop wait for their producers.
    """
    used: set[int] | None = set()
    carried: set[int] = set()
    for callee in loop.callees:
      instructions = self._module.computations.get(callee, [])
      params = [i for i in instructions if i.opcode == "parameter"]
      if len(params) != 1:
        return None, set()
      users = _users(instructions)
      for user in users.get(params[0].name, []):
        if user.opcode == "get-tuple-element" and user.tuple_index is not None:
          if used is not None and _read_by_an_op(user, users):
            used.add(user.tuple_index)
        elif not user.root:
          used = None
      if callee == loop.body:
        root = next((i for i in instructions if i.root), None)
        if root is not None and root.opcode == "tuple":
          for k, name in enumerate(root.operands):
            element = self.by_name[(callee, name)]
            if (
              element.opcode == "get-tuple-element"
              and element.tuple_index == k
              and element.operands == (params[0].name,)
            ):
              carried.add(k)
    return used, carried


def _users(instructions) -> dict[str, list[_hlo_parse.Instruction]]:
  users: dict[str, list[_hlo_parse.Instruction]] = {}
  for i in instructions:
    for operand in i.operands:
      users.setdefault(operand, []).append(i)
  return users


# Ops that only rename or regroup buffers: no thunk reads through them.
_FORWARDING = frozenset({"get-tuple-element", "bitcast", "tuple"})


def _read_by_an_op(value: _hlo_parse.Instruction, users) -> bool:
  """Whether an op other than the ROOT forwarding reads `value`."""
  pending, seen = [value], set()
  while pending:
    current = pending.pop()
    for user in users.get(current.name, []):
      if user.name in seen:
        continue
      seen.add(user.name)
      if user.root and user.opcode == "tuple":
        continue  # Carried to the next iteration, not read.
      if user.opcode not in _FORWARDING:
        return True
      pending.append(user)
  return False


def _starts_async(opcode: str) -> bool:
  return opcode.endswith("-start") or opcode in ("send", "recv")


def _ends_async(opcode: str) -> bool:
  return opcode.endswith("-done")


def _continues(user: _hlo_parse.Instruction) -> bool:
  return user.opcode == "async-update" or _ends_async(user.opcode)
