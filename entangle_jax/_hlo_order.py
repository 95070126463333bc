"""Happens-before and races on a compiled, optimized XLA module.

What is concluded, and what is not:

* Op ``a`` happens before op ``b`` when a chain of dependency edges (operands
  and control predecessors) leads from ``a`` to ``b`` in the module XLA runs.
  Without such a chain the two may run in either order, or concurrently.
* Ops in nested computations (fusions, while/conditional bodies, calls,
  command buffers) are related through the instructions that call their
  computations: ``a`` inside a while loop happens before ``b`` after the loop
  when the while instruction reaches ``b``. Two ops in the same nested
  computation are related within it, that is within one loop iteration; the
  order between different iterations is not analysed.
* Ops in different computations of one instruction (a loop's condition and
  body, two branches of a conditional) and an op and the instruction that
  contains it are never concluded to be ordered.
* A computation called from several places is concluded ordered only if the
  order holds at every call site.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

import jax

from entangle_jax import _hlo_parse, _native_loader

Selector = str
_PATH_LIMIT = 64
_TRANSFORM = re.compile(r"^[\w\-]+\((.*)\)$")
# Ops that carry metadata but are bookkeeping, not work a user names.
_BOOKKEEPING = frozenset(
  {"parameter", "constant", "get-tuple-element", "tuple"}
)


class OrderAnalysis:
  """Ordering facts about one compiled module.

  Build it once and ask many questions; ``happens_before`` and ``races``
  build one per call.
  """

  def __init__(self, compiled: jax.stages.Compiled | str):
    self._module = _hlo_parse.parse(module_text(compiled))
    self._by_name = {
      (i.computation, i.name): i
      for instructions in self._module.computations.values()
      for i in instructions
    }
    self._callers = self._find_callers()
    self._site_paths_cache: dict[str, list] = {}
    self._closures: dict[str, tuple] = {}

  # Selection ----------------------------------------------------------------

  def select(self, selector: Selector) -> list[str]:
    """Names of the instructions `selector` matches, in module text order.

    A selector matches a custom call whose target equals it, or an op whose
    ``op_name`` metadata has it as one scope component (``jax.named_scope``),
    also under transformation wrappers such as ``vmap(name)``.

    Raises:
      ValueError: nothing matches; the message lists targets and scopes.
    """
    return [i.name for i in self._select(selector)]

  def _select(self, selector: Selector) -> list[_hlo_parse.Instruction]:
    found = [
      i
      for i in self._instructions()
      if i.target == selector
      or (i.opcode not in _BOOKKEEPING and selector in _scopes(i.op_name))
    ]
    if not found:
      targets = sorted({i.target for i in self._instructions() if i.target})
      scopes = sorted(
        {
          s
          for i in self._instructions()
          if i.opcode not in _BOOKKEEPING
          for s in _scopes(i.op_name)
          if s
        }
      )
      raise ValueError(
        f"selector {selector!r} matches no op of the compiled module. "
        f"Custom-call targets: {targets}. Scopes in op_name: {scopes}."
      )
    return found

  def _instructions(self) -> Iterable[_hlo_parse.Instruction]:
    return self._by_name.values()

  # Questions ----------------------------------------------------------------

  def happens_before(self, before: Selector, after: Selector) -> bool:
    """True iff every op `before` selects precedes every op `after` selects."""
    firsts, seconds = self._select(before), self._select(after)
    return all(self._precedes(a, b) for a in firsts for b in seconds)

  def races(
    self, among: Sequence[Selector] | None = None
  ) -> list[tuple[str, str]]:
    """Pairs of selected ops ordered neither way, as instruction names.

    By default the selected ops are the custom calls that can touch hidden
    state: side-effecting ones, and ones that write into an operand's buffer
    (output-to-operand aliasing), except entangle's own no-op.
    """
    if among is None:
      ops = [i for i in self._instructions() if _touches_state(i)]
    else:
      # Each op once, in selector order, however many selectors match it.
      ops = list(dict.fromkeys(i for s in among for i in self._select(s)))
    return [
      (a.name, b.name)
      for a, b in itertools.combinations(ops, 2)
      if not self._precedes(a, b) and not self._precedes(b, a)
    ]

  # Reachability -------------------------------------------------------------

  def _precedes(self, a, b) -> bool:
    paths_a, paths_b = self._call_paths(a), self._call_paths(b)
    if not paths_a or not paths_b:
      return False  # Too many call sites to conclude anything.
    return all(self._path_precedes(pa, pb) for pa in paths_a for pb in paths_b)

  def _path_precedes(self, pa, pb) -> bool:
    for x, y in zip(pa, pb, strict=False):
      if x.computation != y.computation:
        return False  # Different computations of one caller.
      if x.name != y.name:
        return self._reaches(x.computation, x.name, y.name)
    return False  # One contains the other, or they are the same op.

  def _find_callers(self) -> dict[str, list[_hlo_parse.Instruction]]:
    callers: dict[str, list[_hlo_parse.Instruction]] = {}
    for instruction in self._instructions():
      for callee in instruction.callees:
        callers.setdefault(callee, []).append(instruction)
    return callers

  def _call_paths(self, op) -> list[tuple[_hlo_parse.Instruction, ...]]:
    """Chains of call sites from the entry computation down to `op`."""
    return [(*path, op) for path in self._site_paths(op.computation)]

  def _site_paths(self, computation: str):
    if computation not in self._site_paths_cache:
      self._site_paths_cache[computation] = self._find_site_paths(computation)
    return self._site_paths_cache[computation]

  def _find_site_paths(self, computation: str):
    if computation == self._module.entry:
      return [()]
    paths = []
    for site in self._callers.get(computation, []):
      paths.extend((*path, site) for path in self._site_paths(site.computation))
      if len(paths) > _PATH_LIMIT:
        return []
    return paths

  def _reaches(self, computation: str, source: str, target: str) -> bool:
    index, closure = self._closure(computation)
    return bool(closure[index[source]] >> index[target] & 1)

  def _closure(self, computation: str):
    if computation not in self._closures:
      self._closures[computation] = self._find_closure(computation)
    return self._closures[computation]

  def _find_closure(self, computation: str):
    """Per instruction, the bitset of instructions that depend on it."""
    instructions = self._module.computations[computation]
    index = {i.name: n for n, i in enumerate(instructions)}
    users: list[list[int]] = [[] for _ in instructions]
    for n, i in enumerate(instructions):
      for producer in (*i.operands, *i.control_predecessors):
        users[index[producer]].append(n)
    reach = [0] * len(instructions)
    for n in reversed(_topological_order(users)):
      bits = 0
      for user in users[n]:
        bits |= (1 << user) | reach[user]
      reach[n] = bits
    return index, reach


def module_text(compiled: jax.stages.Compiled | str) -> str:
  """The optimized HLO text of `compiled` (or `compiled` itself, if text)."""
  if isinstance(compiled, str):
    return compiled
  text = compiled.as_text()
  if text is None:
    raise ValueError(f"{compiled!r} has no HLO text to analyse")
  return text


def _topological_order(users: list[list[int]]) -> list[int]:
  indegree = [0] * len(users)
  for targets in users:
    for t in targets:
      indegree[t] += 1
  ready = [n for n, d in enumerate(indegree) if d == 0]
  order = []
  while ready:
    n = ready.pop()
    order.append(n)
    for t in users[n]:
      indegree[t] -= 1
      if indegree[t] == 0:
        ready.append(t)
  return order


def _scopes(op_name: str) -> set[str]:
  scopes = set()
  for component in op_name.split("/"):
    scopes.add(component)
    while match := _TRANSFORM.match(component):
      component = match.group(1)
      scopes.add(component)
  return scopes


def _touches_state(instruction: _hlo_parse.Instruction) -> bool:
  if instruction.opcode != "custom-call":
    return False
  if instruction.target == _native_loader.ENTANGLE_TARGET:
    return False
  return instruction.side_effect or instruction.aliases_operands


def happens_before(
  compiled: jax.stages.Compiled | str, before: Selector, after: Selector
) -> bool:
  """Whether every op `before` selects precedes every op `after` selects.

  Precedence means a chain of dependency edges (operands and control
  predecessors) in the compiled, optimized module, following nested
  computations through the instructions that call them (see the module
  docstring of ``entangle_jax._hlo_order`` for exactly what is concluded).

  Args:
    compiled: a ``jax.stages.Compiled`` (``jax.jit(f).lower(*a).compile()``)
      or its HLO text.
    before, after: selectors. A selector matches custom calls whose target
      equals it and ops whose ``op_name`` has it as a scope component, which
      is what ``with jax.named_scope(name):`` produces.

  Raises:
    ValueError: a selector matches nothing; the message lists what exists.
  """
  return OrderAnalysis(compiled).happens_before(before, after)


def races(
  compiled: jax.stages.Compiled | str, among: Sequence[Selector] | None = None
) -> list[tuple[str, str]]:
  """Pairs of ops that no dependency chain orders, either way.

  Args:
    compiled: a ``jax.stages.Compiled`` or HLO text.
    among: selectors choosing the ops to consider. By default, every custom
      call that is side-effecting or writes into an operand's buffer, except
      entangle's own no-op.

  Returns:
    ``(first, second)`` instruction-name pairs, in module text order; map
    selectors to instruction names with ``OrderAnalysis(compiled).select``.
  """
  return OrderAnalysis(compiled).races(among)
