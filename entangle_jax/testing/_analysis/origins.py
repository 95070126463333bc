"""Which matched calls of one type the ranks' operand origins cannot tell
apart (issue 77).

MPI matches two collectives by count and type. Two allreduces of one size
swapped on one rank run, and each rank gets the other's data. The
cross-rank check gives each call the origin of its operands
(`Call.origin`: the expression that computes them, names left out); two
matched steps of one type are told apart when each step's origin is the
same on every rank, and the two steps' origins are not one expression
computed in two executions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from entangle_jax.testing._analysis.ranks import Call


def undistinguished(
  steps: Sequence[tuple[Call, ...]],
) -> Iterator[tuple[int, int, int | None]]:
  """Each pair of `steps` (each every rank's call, rank order) of one type
  (rank 0's fingerprint, communicator and reduction) whose origins do
  not tell them apart: ``(i, j, crossed)``, where `crossed` is a rank
  whose two origins are rank 0's the other way round (a swap), or None
  where they differ otherwise (nothing tells the calls apart)."""
  groups: dict[object, list[int]] = {}
  for k, calls in enumerate(steps):
    groups.setdefault((calls[0].fingerprint, calls[0].renamed), []).append(k)
  for members in groups.values():
    for a, i in enumerate(members):
      for j in members[a + 1 :]:
        first, second = steps[i], steps[j]
        if (
          all(c.origin == first[0].origin for c in first)
          and all(c.origin == second[0].origin for c in second)
          and not _one_expression_twice(first, second)
        ):
          continue
        crossed = next(
          (
            r
            for r in range(1, len(first))
            if first[r].origin == second[0].origin
            and second[r].origin == first[0].origin
            and first[0].origin != second[0].origin
          ),
          None,
        )
        yield i, j, crossed


def _one_expression_twice(first: tuple[Call, ...], second: tuple[Call, ...]):
  """Whether two steps' operands are one expression computed in two
  executions (a jitted helper called twice, or eager calls), on some
  rank: their inputs are each execution's own, so equal origins do not
  tell the steps apart. Within one execution, equal origins are one
  value, and a swap of them changes nothing."""
  if first[0].origin != second[0].origin:
    return False
  return any(
    getattr(a, "execution", None) != getattr(b, "execution", None)
    for a, b in zip(first, second, strict=True)
  )
