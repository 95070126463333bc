"""Which sends meet which receives in the cross-rank check's simulation
(`entangle_jax.testing._ways_in.across_ranks`): by peer and tag, a value
at or below ``ANY`` (MPI's ``ANY_SOURCE``, ``ANY_TAG``) meeting any."""

from __future__ import annotations

from entangle_jax._src.targets.communication import ANY
from entangle_jax.testing._analysis.ranks import Call, Item


def kind(item: Item | None) -> str | None:
  """A call's kind; None for a loop, a conditional or nothing."""
  return item.kind if isinstance(item, Call) else None


def matches(value: int | None, wanted: int | None) -> bool:
  value = 0 if value is None else value
  wanted = 0 if wanted is None else wanted
  return value == wanted or value <= ANY or wanted <= ANY


def receives_from(item: Item | None, rank: int, tag: int | None) -> bool:
  if not isinstance(item, Call):
    return False
  if item.kind == "recv":
    return matches(item.peer, rank) and matches(item.tag, tag)
  if item.kind == "sendrecv":
    return matches(item.source, rank) and matches(item.source_tag, tag)
  return False


def sends_to(item: Item | None, rank: int, tag: int | None) -> bool:
  if not isinstance(item, Call):
    return False
  if item.kind in ("send", "sendrecv"):
    return item.peer == rank and matches(item.tag, tag)
  return False
