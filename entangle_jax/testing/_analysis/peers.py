"""Which sends meet which receives in the cross-rank check's simulation
(`entangle_jax.testing._analysis.across_ranks`): by peer and tag. A
receive's source of -1 or -2 is MPI's ``ANY_SOURCE`` (-1 in Open MPI,
-2 in MPICH; each library's other value is its PROC_NULL, whose calls
the check leaves out before), meeting any; of the tags, only a
receive's ``ANY_TAG`` (-1 in both) meets any. Another peer or tag below
0 is an error that aborts the call (`bad_peer`, `bad_tag`)."""

from __future__ import annotations

from entangle_jax._src.targets.communication import ANY
from entangle_jax.testing._analysis.ranks import Call, Item

ANY_TAG = ANY
"""MPI's ``ANY_TAG``, the one negative tag a receive may pass."""
_POINT_TO_POINT = ("send", "recv", "sendrecv")


def kind(item: Item | None) -> str | None:
  """A call's kind; None for a loop, a conditional or nothing."""
  return item.kind if isinstance(item, Call) else None


ANY_SOURCES = (-1, -2)
"""The values of MPI's ``ANY_SOURCE``: Open MPI's, then MPICH's."""


def any_source(peer: int | None) -> bool:
  """Whether a receive's source `peer` is ``ANY_SOURCE``."""
  return peer in ANY_SOURCES


def matches(value: int | None, wanted: int | None) -> bool:
  """Whether a peer `value` is `wanted`, either being any source."""
  value = 0 if value is None else value
  wanted = 0 if wanted is None else wanted
  return value == wanted or any_source(value) or any_source(wanted)


def bad_peer(item: Item | None) -> str | None:
  """Why MPI rejects `item`'s peer (``MPI_ERR_RANK``, which aborts the
  program), in words; None where its peers are valid. A send's peer is a
  rank (PROC_NULL left out before); a receive's too, or ``ANY_SOURCE``.
  (A rank beyond the communicator is left to the simulation: it meets
  nothing.)"""
  if not isinstance(item, Call) or item.kind not in _POINT_TO_POINT:
    return None
  dest = item.peer if item.kind in ("send", "sendrecv") else None
  source = {"recv": item.peer, "sendrecv": item.source}.get(item.kind)
  if dest is not None and dest < 0:
    return f"sends to rank {dest}, below 0"
  if source is not None and source < 0 and not any_source(source):
    return f"receives from rank {source}, below 0 and not ANY_SOURCE"
  return None


def tag_accepts(wanted: int | None, tag: int | None) -> bool:
  """Whether a receive of tag `wanted` takes a message sent with `tag`:
  the same tag, or ``ANY_TAG``. Another negative tag is no wildcard: MPI
  rejects it (`bad_tag`)."""
  wanted = 0 if wanted is None else wanted
  tag = 0 if tag is None else tag
  return wanted in (tag, ANY_TAG)


def bad_tag(item: Item | None) -> str | None:
  """Why MPI rejects `item`'s tag (``MPI_ERR_TAG``, which aborts the
  program), in words; None where its tags are valid. A send's tag is 0
  or more; a receive's too, or ``ANY_TAG``."""
  if not isinstance(item, Call) or item.kind not in _POINT_TO_POINT:
    return None
  sent = item.tag if item.kind in ("send", "sendrecv") else None
  received = {"recv": item.tag, "sendrecv": item.source_tag}.get(item.kind)
  if sent is not None and sent < 0:
    return f"sends with tag {sent}, below 0"
  if received is not None and received < 0 and received != ANY_TAG:
    return f"receives with tag {received}, below 0 and not ANY_TAG ({ANY_TAG})"
  return None


def receives_from(item: Item | None, rank: int, tag: int | None) -> bool:
  if not isinstance(item, Call):
    return False
  if item.kind == "recv":
    return matches(item.peer, rank) and tag_accepts(item.tag, tag)
  if item.kind == "sendrecv":
    return matches(item.source, rank) and tag_accepts(item.source_tag, tag)
  return False


def sends_to(item: Item | None, rank: int, tag: int | None) -> bool:
  if not isinstance(item, Call):
    return False
  if item.kind in ("send", "sendrecv"):
    return item.peer == rank and tag_accepts(tag, item.tag)
  return False
