"""The instructions of one module looked up by name: the one index the
evaluation of what XLA may do (`may_order.MayOrder`) and its helpers ask,
built on the first question (instruction names are unique in a module)."""

from __future__ import annotations

import functools

from entangle_jax.testing._hlo import Instruction, Module


class ModuleIndex:
  """Lookups into `module`."""

  def __init__(self, module: Module):
    self.module = module
    self._used: dict[frozenset[str], frozenset[str]] = {}

  @functools.cached_property
  def by_name(self) -> dict[str, Instruction]:
    """Every instruction of the module, by its name."""
    return {
      i.name: i for body in self.module.computations.values() for i in body
    }

  @functools.cached_property
  def _callers(self) -> dict[str, list[Instruction]]:
    found: dict[str, list[Instruction]] = {}
    for body in self.module.computations.values():
      for i in body:
        if i.opcode == "call":
          for callee in i.callees:
            found.setdefault(callee, []).append(i)
    return found

  def named(self, name: str) -> Instruction | None:
    """Instruction `name`; None where there is none."""
    return self.by_name.get(name)

  def callers_of(self, computation: str) -> list[Instruction]:
    """The ``call`` instructions that call `computation`."""
    return self._callers.get(computation, [])

  def shape_of(self, name: str) -> str:
    """The HLO shape of instruction `name` ("" where unknown)."""
    found = self.by_name.get(name)
    return found.shape if found is not None else ""

  def dims_of(self, name: str) -> tuple[int, ...] | None:
    """The dimensions of instruction `name`'s array; None where unknown."""
    found = self.by_name.get(name)
    return found.dims if found is not None else None

  def element_type(self, name: str) -> str:
    """The element type of instruction `name`'s array (``u32``)."""
    return self.shape_of(name).split("[", 1)[0].strip()

  def roots(self, computation: str) -> list[str]:
    """The name of `computation`'s root (none for a name no computation
    has)."""
    body = self.module.computations.get(computation, ())
    return [i.name for i in body if i.root]

  def computation(self, name: str) -> list[Instruction]:
    """The instructions of computation `name` (none for a name no
    computation has)."""
    return list(self.module.computations.get(name, ()))

  def used_names(self, kept: frozenset[str]) -> frozenset[str]:
    """The instructions whose results something that may run uses,
    through any edge: from the entry's root, each op that has a side
    effect and each op of `kept` (opcodes that run whatever uses them),
    back through operands and into called computations."""
    if kept in self._used:
      return self._used[kept]
    todo = [
      i.name
      for body in self.module.computations.values()
      for i in body
      if (i.root and i.computation == self.module.entry)
      or i.side_effect
      or i.opcode in kept
    ]
    used: set[str] = set()
    while todo:
      name = todo.pop()
      if name in used:
        continue
      used.add(name)
      found = self.by_name.get(name)
      if found is None:
        continue
      todo.extend(found.operands)
      for callee in found.callees:
        todo.extend(self.roots(callee))
    self._used[kept] = frozenset(used)
    return self._used[kept]
