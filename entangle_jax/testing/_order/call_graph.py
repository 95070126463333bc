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
  return frozenset(callers_first(module))


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
