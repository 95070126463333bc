"""Order relations among a list of ops, answered from `reach`'s masks.

An op is named by its site, ``(computation, position)`` of its first
instruction: the relations are a function of the module and the sites
alone (what the ops access is passed to `OpOrder.races`). An op may have
several instances (one per chain of call sites, rule 4). It precedes
another when every instance of it precedes every instance of the other;
two ops are exclusive or sequenced when every pair of their instances is;
they race when they may conflict and some pair of their instances may run
at the same time.
"""

from __future__ import annotations

from collections.abc import Sequence

from entangle_jax.testing._order import access, bitsets
from entangle_jax.testing._order.call_graph import Site
from entangle_jax.testing._order.dataflow import Dataflow
from entangle_jax.testing._order.reach import Reach


class OpOrder:
  """Order relations among the ops at `sites` (and only those).

  Args:
    dataflow: the module's computation graphs.
    sites: the ops to relate, each by its first instruction's site.
  """

  def __init__(self, dataflow: Dataflow, sites: Sequence[Site]):
    self.sites = list(sites)
    self.index = {site: k for k, site in enumerate(self.sites)}
    self._reach = Reach(dataflow, self.sites)
    self._masks = [bitsets.mask_of(bits) for bits in self._reach.instances]

  def covers(self, sites: Sequence[Site]) -> bool:
    """Whether every one of `sites` is related here."""
    return all(site in self.index for site in sites)

  def _after_all(self, k: int) -> int:
    """Instances that every instance of op `k` precedes."""
    bits = self._reach.instances[k]
    if not bits:
      return 0
    mask = self._reach.after[bits[0]]
    for bit in bits[1:]:
      mask &= self._reach.after[bit]
    return mask

  def _apart(self, bit: int) -> int:
    """Instances that never run at the same time as instance `bit`."""
    r = self._reach
    return r.after[bit] | r.before[bit] | r.exclusive[bit] | r.sequenced[bit]

  def precedes(self, a: Site, b: Site) -> bool:
    """Whether every instance of `a` ends before every instance of `b`
    begins."""
    ka, kb = self.index[a], self.index[b]
    mask = self._masks[kb]
    return ka != kb and mask & ~self._after_all(ka) == 0

  def exclusive(self, a: Site, b: Site) -> bool:
    """Whether every pair of instances of `a` and `b` lies in two branches
    of one conditional (rule 14)."""
    return self._every_pair(a, b, self._reach.exclusive)

  def sequenced(self, a: Site, b: Site) -> bool:
    """Whether every pair of instances of `a` and `b` lies in the condition
    and the body of one loop (rule 13)."""
    return self._every_pair(a, b, self._reach.sequenced)

  def _every_pair(self, a: Site, b: Site, related: list[int]) -> bool:
    """Whether every instance of `b` is in `related`'s mask of every
    instance of `a`."""
    mask = self._masks[self.index[b]]
    bits = self._reach.instances[self.index[a]]
    return a != b and all(mask & ~related[bit] == 0 for bit in bits)

  def may_overlap(self, a: Site, b: Site) -> bool:
    """Whether some instances of `a` and `b` may run at the same time."""
    if a == b:
      return False
    mask = self._masks[self.index[b]]
    bits = self._reach.instances[self.index[a]]
    return any(mask & ~self._apart(bit) for bit in bits)

  def unordered(
    self, firsts: Sequence[Site], seconds: Sequence[Site]
  ) -> list[tuple[int, int]]:
    """The index pairs ``(i, j)`` into `firsts` and `seconds` where
    ``firsts[i]`` does not precede ``seconds[j]``, in that order."""
    wanted = 0
    for b in seconds:
      wanted |= self._masks[self.index[b]]
    pairs = []
    for i, a in enumerate(firsts):
      late = {
        self._reach.op_of[bit]
        for bit in bitsets.positions(wanted & ~self._after_all(self.index[a]))
      }
      pairs += [(i, j) for j, b in enumerate(seconds) if self.index[b] in late]
    return pairs

  def races(
    self,
    sites: Sequence[Site],
    accesses: Sequence[tuple[access.Access, ...]],
  ) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)``, ``i < j``, of `sites` whose ops, accessing
    `accesses` (one entry per site), may conflict and may run at the same
    time, sorted. Time: linear in the instances and the pairs found, plus a
    few mask operations per instance."""
    order = {self.index[site]: n for n, site in enumerate(sites)}
    chosen = 0
    for site in sites:
      chosen |= self._masks[self.index[site]]
    # Ops not asked about access nothing: they are not chosen anyway.
    by_op: list[tuple[access.Access, ...]] = [()] * len(self.sites)
    for site, accessed in zip(sites, accesses, strict=True):
      by_op[self.index[site]] = accessed
    conflicts = access.ConflictMasks(by_op, self._reach.instances)
    found: set[tuple[int, int]] = set()
    for bit, k in enumerate(self._reach.op_of):
      if k not in order:
        continue
      candidates = conflicts.of(k) & chosen & ~self._apart(bit)
      for other in bitsets.positions(candidates & ~self._masks[k]):
        pair = (order[k], order[self._reach.op_of[other]])
        found.add((min(pair), max(pair)))
    return sorted(found)

  def hasse(
    self, ops: Sequence[Site]
  ) -> tuple[list[int], list[tuple[int, int]]]:
    """The indices of `ops` in an order that extends happens-before, and
    the pairs (indices into that order) of an op and an op right after it:
    the first precedes the second and no other of `ops` lies between
    them."""
    if any(len(self._reach.instances[self.index[op]]) != 1 for op in ops):
      return self._hasse_by_pairs(ops)
    bits = [self._reach.instances[self.index[op]][0] for op in ops]
    order = sorted(range(len(ops)), key=bits.__getitem__)
    node = {bits[n]: place for place, n in enumerate(order)}
    chosen = bitsets.mask_of(bits)
    after = {bit: self._reach.after[bit] & chosen for bit in bits}
    arrows = []
    for place, n in enumerate(order):
      # Bits extend happens-before, so the lowest bit after this op is right
      # after it; so is the lowest that none of those precedes, and so on.
      remaining = after[bits[n]]
      while remaining:
        low = remaining & -remaining
        successor = low.bit_length() - 1
        arrows.append((place, node[successor]))
        remaining &= ~low & ~after[successor]
    return order, arrows

  def _hasse_by_pairs(
    self, ops: Sequence[Site]
  ) -> tuple[list[int], list[tuple[int, int]]]:
    """`hasse` for ops with several instances, one pair at a time."""
    count = len(ops)
    later = [
      {b for b in range(count) if self.precedes(ops[a], ops[b])}
      for a in range(count)
    ]
    waiting = [sum(a in later[b] for b in range(count)) for a in range(count)]
    placed: list[int] = []
    while len(placed) < count:
      a = next(a for a in range(count) if waiting[a] == 0 and a not in placed)
      placed.append(a)
      for b in later[a]:
        waiting[b] -= 1
    place = {a: p for p, a in enumerate(placed)}
    arrows = []
    for a in placed:
      covered: set[int] = set()
      for b in sorted(later[a], key=place.__getitem__):
        if b not in covered:
          arrows.append((place[a], place[b]))
          covered |= later[b]
    return placed, sorted(arrows)
