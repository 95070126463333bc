"""Which matched calls of one type the ranks' operand origins cannot tell
apart (issue 77).

MPI matches two collectives by count and type. Two allreduces of one size
swapped on one rank run, and each rank gets the other's data. The
cross-rank check gives each call the origin of its operands
(`Call.origin`: the expression that computes them, names left out); two
matched steps of one type are told apart when each step's origin is the
same on every rank, and the two steps' origins are not one expression
computed in two executions.

Point-to-point steps are told apart alike (`message_type`): two steps
of one type between the same ranks, a rank's two sends swapped, give the
receiver each other's data. Their origins are those of what the step's
ranks send; a message with one sender (a send and its receive) has no
other rank's origin to agree with, so only the same expression, in one
execution, tells two such steps apart (the swap changes nothing).

Origins name entry parameters by their number, but a caller may pass two
arguments of one type the other way round on one rank: the rank compiles
the same module, and its two calls swap their data. Two operands of
matched calls of one type (or of one call) that read different entry
parameters of one type are told apart by nothing (`argument_swaps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from entangle_jax.testing._analysis.ranks import Call, EntryParameter


def undistinguished(
  steps: Sequence[tuple[Call, ...]],
  types: Sequence[object] | None = None,
  alone: bool = True,
) -> Iterator[tuple[int, int, int | None]]:
  """Each pair of `steps` (each every rank's call, rank order; or a
  point-to-point step's sending calls) of one type (`types`; where None,
  rank 0's fingerprint, communicator and reduction) whose origins do
  not tell them apart: ``(i, j, crossed)``, where `crossed` is the place
  in the step of a call whose two origins are the first call's the other
  way round (a swap), or None where they differ otherwise (nothing tells
  the calls apart). With `alone` False, a step of one call is told from
  another by an equal origin only (nothing else says what it sends)."""
  groups: dict[object, list[int]] = {}
  for k in range(len(steps)):
    groups.setdefault(_type(steps, types, k), []).append(k)
  for members in groups.values():
    for a, i in enumerate(members):
      for j in members[a + 1 :]:
        first, second = steps[i], steps[j]
        if (
          all(c.origin == first[0].origin for c in first)
          and all(c.origin == second[0].origin for c in second)
          and not _one_expression_twice(first, second)
          and (alone or len(first) > 1 or first[0].origin == second[0].origin)
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


def _type(
  steps: Sequence[tuple[Call, ...]], types: Sequence[object] | None, k: int
) -> object:
  if types is not None:
    return types[k]
  return (steps[k][0].fingerprint, steps[k][0].renamed)


def message_type(ranks: Sequence[int], calls: Sequence[Call]) -> object:
  """The type of a point-to-point step, `ranks`' `calls`: each one's
  rank, kind, peers, what it sends and receives, its communicator, and
  the tag it receives with. A sender's tag is left out: a receive of
  ``ANY_TAG`` takes either message, and one of a given tag already
  matched only its own."""
  return (
    "message",
    tuple(
      (
        rank,
        call.kind,
        call.peer,
        call.source,
        call.sent,
        call.received,
        call.renamed,
        call.source_tag if call.kind == "sendrecv" else None,
        call.tag if call.kind == "recv" else None,
      )
      for rank, call in zip(ranks, calls, strict=True)
    ),
  )


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


@dataclasses.dataclass(frozen=True)
class ArgumentSwap:
  """Two data operands, of matched steps of one type or of one step, that
  a caller's swap of two entry parameters of one type on one rank would
  exchange: operand `k` of step `i` reads `first`, operand `m` of step
  `j` reads `second`."""

  i: int
  k: int
  j: int
  m: int
  first: EntryParameter
  second: EntryParameter


def argument_swaps(
  steps: Sequence[tuple[Call, ...]],
  told: set[tuple[int, int]],
  types: Sequence[object] | None = None,
) -> Iterator[ArgumentSwap]:
  """Each pair of data operands, of one step or of two steps of one type
  (`types`, as `undistinguished` reads them) that one execution
  made and that `told` (pairs already reported) leaves out, whose entry
  parameters differ (`Call.reads`) by two of one type: a caller that
  passes those two the other way round on one rank sends each operand's
  data in the other's place, and the modules cannot show it. One
  parameter read by both, or parameters of different types, are not
  swapped so."""
  groups: dict[object, list[int]] = {}
  for n in range(len(steps)):
    groups.setdefault(_type(steps, types, n), []).append(n)
  seen: set[tuple[int, int, int, int]] = set()
  for members in groups.values():
    for a, i in enumerate(members):
      for j in members[a:]:
        if i != j and (i, j) in told:
          continue
        for rank in range(len(steps[i])):
          first, second = steps[i][rank], steps[j][rank]
          if _execution(first) != _execution(second):
            continue
          for k, m, p, q in _crossing(first, second, i == j):
            if (i, k, j, m) not in seen:
              seen.add((i, k, j, m))
              yield ArgumentSwap(i, k, j, m, p, q)


def _execution(call: Call) -> object:
  return getattr(call, "execution", None)


def _crossing(first: Call, second: Call, one_call: bool):
  """(k, m, p, q) for operand k of `first` and m of `second` (k < m
  within one call) whose reads differ, p read by k and q by m, two entry
  parameters of one type."""
  for k, these in enumerate(first.reads):
    for m, those in enumerate(second.reads):
      if (one_call and m <= k) or these == those:
        continue
      pair = next(
        (
          (p, q)
          for p in sorted(these)
          for q in sorted(those)
          if p.number != q.number and p.type == q.type
        ),
        None,
      )
      if pair is not None:
        yield k, m, *pair
