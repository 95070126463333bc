"""Happens-before among selected ops, as bit masks, in near-linear time.

An op in a nested computation runs once per execution of each chain of
call sites that leads to it from the entry computation: each chain is an
*instance* of the op. Two instances are related at the first computation
where their chains part, by the edges inside it (`edges`):

* through two different instructions of it: one instance happens before
  the other when a chain of edges leads from the end of the first
  instruction's work (an async pair's done) to the start of the second's;
* in two different computations that one instruction calls: in two
  branches of a ``conditional`` they are *exclusive* (one execution runs
  one branch); in a ``while``'s condition and body they are *sequenced*
  (the loop runs one, then the other, never both at once); under any other
  instruction they may overlap;
* one inside the computation that the other calls: they may overlap.

Two ops of one computation are related within one execution of it (one
loop iteration); two iterations are not compared.

Every instance gets a bit, in an order that extends happens-before (by the
topological positions of its call sites, outermost first). For each
computation that holds two or more selected call sites, one pass forward
and one backward over its edges give each site the mask of the instances
whose work ends before it begins, and of those that begin after it ends.
An instance's masks are the unions over its call sites. The cost is one
big-integer OR per edge and pass: time linear in the module's size, each
OR as wide as the number of selected instances.
"""

from __future__ import annotations

from entangle_jax.testing._order import bitsets, call_graph, rules
from entangle_jax.testing._order.dataflow import Dataflow
from entangle_jax.testing._order.edges import ComputationGraph
from entangle_jax.testing._order.rules import Callees

Site = call_graph.Site


class Reach:
  """Per instance, the masks of instances it is ordered with or never meets.

  Args:
    dataflow: the module's computation graphs.
    ops: ``(computation, position)`` of each selected op; the position is
      the op's first instruction (an async pair's start).

  Attributes:
    instances: per op, the bits of its instances. An op in a computation
      with more than `call_graph.PATH_LIMIT` call chains gets one bit that
      nothing is ordered with.
    op_of: per instance bit, its op.
    after, before, exclusive, sequenced: per instance bit, the mask of the
      instances that begin after it ends, that end before it begins, that
      lie in another branch of a conditional around it, or in the other
      computation of a loop around it.
  """

  def __init__(self, dataflow: Dataflow, ops: list[Site]):
    self._dataflow = dataflow
    chains = call_graph.call_chains(dataflow.module)
    placed: list[tuple[tuple[int, ...], int, tuple[Site, ...]]] = []
    unplaced: list[int] = []
    for k, (computation, position) in enumerate(ops):
      if not chains.get(computation):
        unplaced.append(k)
        continue
      for chain in chains[computation]:
        levels = (*chain, (computation, position))
        placed.append((self._rank(levels), k, levels))
    placed.sort(key=lambda item: item[0])
    self.op_of = [k for _, k, _ in placed] + unplaced
    self._levels = [levels for _, _, levels in placed]
    self.instances: list[list[int]] = [[] for _ in ops]
    for bit, k in enumerate(self.op_of):
      self.instances[k].append(bit)
    count = len(self.op_of)
    self.after = [0] * count
    self.before = [0] * count
    self.exclusive = [0] * count
    self.sequenced = [0] * count
    self._relate()

  def _rank(self, levels: tuple[Site, ...]) -> tuple[int, ...]:
    return tuple(self._dataflow[c].rank[p] for c, p in levels)

  def _relate(self) -> None:
    # Instances under each site of each computation instance, keyed by the
    # chain down to the site; and under each computation a site calls.
    sites: dict[tuple[Site, ...], dict[int, list[int]]] = {}
    callees: dict[tuple[Site, ...], dict[str, list[int]]] = {}
    for bit, levels in enumerate(self._levels):
      for depth, (computation, position) in enumerate(levels):
        place = (*levels[:depth], (computation, -1))
        sites.setdefault(place, {}).setdefault(position, []).append(bit)
        if depth + 1 < len(levels):
          callees.setdefault(levels[: depth + 1], {}).setdefault(
            levels[depth + 1][0], []
          ).append(bit)
    local_after: dict[tuple[Site, ...], int] = {}
    local_before: dict[tuple[Site, ...], int] = {}
    for place, members in sites.items():
      if len(members) < 2:
        continue
      computation = place[-1][0]
      masks = {p: bitsets.mask_of(bits) for p, bits in members.items()}
      after, before = _propagate(self._dataflow[computation], masks)
      for position in members:
        key = (*place[:-1], (computation, position))
        local_after[key] = after[position]
        local_before[key] = before[position]
    apart = {
      key: {c: bitsets.mask_of(bits) for c, bits in split.items()}
      for key, split in callees.items()
      if len(split) > 1
    }
    for bit, levels in enumerate(self._levels):
      self._combine(bit, levels, local_after, local_before, apart)

  def _combine(self, bit, levels, local_after, local_before, apart) -> None:
    after = before = exclusive = sequenced = 0
    for depth in range(len(levels)):
      key = levels[: depth + 1]
      after |= local_after.get(key, 0)
      before |= local_before.get(key, 0)
      split = apart.get(key)
      if split is None or depth + 1 == len(levels):
        # The op is this call site itself (a selected conditional or
        # loop): the instances in the computations it calls run inside
        # its work, so they may overlap it; neither exclusive nor
        # sequenced.
        continue
      inside = split[levels[depth + 1][0]]
      others = 0
      for mask in split.values():
        others |= mask
      others &= ~inside
      computation, position = levels[depth]
      opcode = self._dataflow[computation].instructions[position].opcode
      callees = rules.rule_for(opcode).callees  # Rule 4.
      if callees is Callees.EXCLUSIVE:
        exclusive |= others
      elif callees is Callees.SEQUENCED:
        sequenced |= others
    self.after[bit] = after
    self.before[bit] = before
    self.exclusive[bit] = exclusive
    self.sequenced[bit] = sequenced


def _propagate(
  graph: ComputationGraph, masks: dict[int, int]
) -> tuple[dict[int, int], dict[int, int]]:
  """Per site position: the instances that begin after its work ends, and
  those that end before it begins (one pass each way over the edges)."""
  span = graph.span
  ends = {span[p][1]: m for p, m in masks.items()}
  starts = {span[p][0]: m for p, m in masks.items()}
  reached = [0] * len(graph.deps)
  for v in graph.order:
    acc = 0
    for p in graph.deps[v]:
      acc |= reached[p] | ends.get(p, 0)
    reached[v] = acc
  before = {p: reached[span[p][0]] for p in masks}
  dependents = graph.dependents()
  reached = [0] * len(graph.deps)
  for v in reversed(graph.order):
    acc = 0
    for u in dependents[v]:
      acc |= reached[u] | starts.get(u, 0)
    reached[v] = acc
  after = {p: reached[span[p][1]] for p in masks}
  return after, before
