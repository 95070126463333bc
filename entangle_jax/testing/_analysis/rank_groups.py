"""The cross-rank check where the ranks split into groups, each on a
communicator of its own (issue 77).

``COMM_WORLD.Split(rank % 2, rank)`` gives the even ranks one
communicator and the odd ranks another: each group's calls meet only
its own ranks', and the groups may make different calls, as many as
each likes. Checked as one set of ranks, a group that makes one more
allreduce than the other is a deadlock that MPI never has. Where every
rank makes all its calls on one communicator whose recorded layout the
other ranks of it share (`communicators.groups`), each group is checked
alone (`check_groups`): its ranks numbered from 0 as the communicator
numbers them, which its peers already are, and the findings named by
world ranks again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from entangle_jax.testing._analysis import communicators
from entangle_jax.testing._analysis.communicators import Layout
from entangle_jax.testing._analysis.rank_matching import (
  Deadlock,
  MatchedStep,
  RankCall,
  RankItems,
)
from entangle_jax.testing._analysis.ranks import calls_of


def check_groups(
  programs: Sequence[RankItems],
  layouts: Sequence[Layout],
  check: Callable[[Sequence[RankItems], Sequence[Mapping[int, Layout]]], Any],
) -> dict[str, Any]:
  """The fields of the `CrossRankResult` of `programs` (one per world
  rank) split into the groups of `layouts` (each once: the world rank of
  each of a communicator's ranks): `check` (`check_programs`) of each
  group alone, its findings' ranks made world ranks, joined. The verdict
  is left to the caller, as `check_programs` decides it."""
  count = len(programs)
  fields: dict[str, Any] = {
    "matched": (),
    "mismatch": None,
    "deadlock": None,
    "rank_dependent": (),
    "unordered": (),
    "by_type_only": (),
    "communicators": (),
  }
  for layout in layouts:
    members = [programs[world] for world in layout]
    # The group's own numbering: its peers are ranks of the communicator.
    mine = tuple(range(len(layout)))
    result = check(
      members,
      [
        dict.fromkeys(communicators.handles(calls_of(p.items)), mine)
        for p in members
      ],
    )
    world = _World(layout, count)
    said = (
      f"(the group of world ranks {list(layout)}, a communicator of its "
      "own, numbered from 0 as it numbers them)"
    )
    fields["matched"] += tuple(world.step(s) for s in result.matched)
    if fields["mismatch"] is None and result.mismatch is not None:
      fields["mismatch"] = dataclasses.replace(
        result.mismatch,
        calls=world.spread(result.mismatch.calls),
        differs=f"{result.mismatch.differs} {said}",
      )
    if fields["deadlock"] is None and result.deadlock is not None:
      deadlock = world.deadlock(result.deadlock)
      if deadlock.matching:  # It names the group's ranks.
        deadlock = dataclasses.replace(
          deadlock, matching=f"{deadlock.matching} {said}"
        )
      fields["deadlock"] = deadlock
    fields["rank_dependent"] += tuple(
      dataclasses.replace(r, ranks=tuple(layout[k] for k in r.ranks))
      for r in result.rank_dependent
    )
    fields["unordered"] += tuple(
      dataclasses.replace(u, rank=layout[u.rank]) for u in result.unordered
    )
    fields["by_type_only"] += tuple(f"{s} {said}" for s in result.by_type_only)
    fields["communicators"] += tuple(
      f"{s} {said}" for s in result.communicators
    )
  return fields


@dataclasses.dataclass(frozen=True)
class _World:
  """A group's findings named by world ranks: its rank k is world rank
  ``layout[k]``, of `count` ranks."""

  layout: Layout
  count: int

  def call(self, call: RankCall | None) -> RankCall | None:
    if call is None:
      return None
    label = call.label
    if " to rank " in label or " from rank " in label:
      # Its peers are the group's numbers, not the world's.
      label = (
        f"{label} [peers as its communicator numbers them: world ranks "
        f"{list(self.layout)}]"
      )
    return dataclasses.replace(call, rank=self.layout[call.rank], label=label)

  def step(self, step: MatchedStep) -> MatchedStep:
    return MatchedStep(tuple(c for c in map(self.call, step.calls) if c))

  def spread(
    self, calls: tuple[RankCall | None, ...]
  ) -> tuple[RankCall | None, ...]:
    """A tuple of the group's ranks' calls (by its numbering) as one of
    every world rank's, None for the ranks outside the group."""
    out: list[RankCall | None] = [None] * self.count
    for k, call in enumerate(calls):
      out[self.layout[k]] = self.call(call)
    return tuple(out)

  def deadlock(self, deadlock: Deadlock) -> Deadlock:
    return dataclasses.replace(deadlock, blocked=self.spread(deadlock.blocked))
