"""Where each computation is called from: chains of call sites from the
entry computation."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from entangle_jax.testing._hlo import depth_first
from entangle_jax.testing._hlo.parser import Module

PATH_LIMIT = 64
"""Chains to one computation beyond which nothing is concluded about its ops
(a computation shared by very many call sites)."""

Site = tuple[str, int]
"""A call site: (computation, position of the calling instruction)."""
Chain = tuple[Site, ...]


def call_chains(module: Module) -> dict[str, list[Chain]]:
  """For each computation reachable from the entry, the chains of call sites
  that lead to it from there (``[()]`` for the entry; ``[]`` when there are
  more than `PATH_LIMIT`). Computations no chain reaches are left out."""
  callers: dict[str, list[Site]] = {}
  for name, instructions in module.computations.items():
    for position, i in enumerate(instructions):
      for callee in i.callees:
        callers.setdefault(callee, []).append((name, position))
  chains: dict[str, list[Chain]] = {module.entry: [()]}
  for name in callers_first(module):
    if name == module.entry:
      continue
    found: list[Chain] = []
    for caller, position in callers.get(name, []):
      if caller not in chains:
        continue  # A caller no chain reaches.
      if not chains[caller]:  # Too many chains to the caller already.
        found = []
        break
      found += [(*chain, (caller, position)) for chain in chains[caller]]
      if len(found) > PATH_LIMIT:
        found = []
        break
    chains[name] = found
  return chains


def reachable(module: Module) -> frozenset[str]:
  """The computations the entry runs, itself included. No other ever runs
  (and XLA's optimizer deletes them; only hand-written text has them)."""
  order = post_order(module.entry, lambda name: _run_callees(module, name))
  return frozenset(order)


def _run_callees(module: Module, name: str) -> Iterable[str]:
  """The computations that `name`'s instructions may run: a conditional
  whose index or predicate is a constant of `name` runs only the branch it
  picks (XLA keeps such a conditional until its simplifier runs)."""
  constants = {
    i.name: i.literal
    for i in module.computations[name]
    if i.opcode == "constant"
  }
  for i in module.computations[name]:
    picked = None
    if i.opcode == "conditional" and i.branches and i.operands:
      picked = _picked_branch(constants.get(i.operands[0]), len(i.branches))
    if picked is None:
      yield from i.callees
    else:
      yield i.branches[picked]


def _picked_branch(literal: str | None, branches: int) -> int | None:
  """The branch a constant predicate (``true``: branch 0) or index picks;
  None for no constant."""
  if literal is None:
    return None
  text = literal.strip()
  if text in ("true", "false"):
    return 0 if text == "true" else 1
  try:
    index = int(text)
  except ValueError:
    return None
  return index if 0 <= index < branches else branches - 1


def callers_first(module: Module) -> list[str]:
  """Computations reachable from the entry, each after all its callers."""
  order = post_order(
    module.entry,
    lambda name: (c for i in module.computations[name] for c in i.callees),
  )
  order.reverse()
  return order


def post_order(
  start: str, callees: Callable[[str], Iterable[str]]
) -> list[str]:
  """`start` and every computation reachable through `callees`, each after
  all those it reaches (`depth_first.post_order`)."""
  return depth_first.post_order(
    [start], lambda name: ((c, None) for c in callees(name))
  )
