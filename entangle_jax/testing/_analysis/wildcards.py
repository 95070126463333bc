"""The matchings of wildcard receives, for the cross-rank check to try
each one (issue 77).

A receive from any source (MPI's ``ANY_SOURCE``: a peer below 0) meets
whichever matching send arrives first, and which one does may change from
run to run. Three ranks where rank 0 receives from any rank, then from
rank 2, while ranks 1 and 2 each send to it once: when the first receive
meets rank 2's send, the second waits for ever. A simulation that meets
the first sender it finds proves that program.

`matchings` gives every way of fixing each wildcard receive's sender: for
each, every rank other than the receiver that holds a send (or sendrecv)
to it with a tag the receive accepts, anywhere in its sequence. The
cross-rank check simulates each. A matching in which a fixed receive is
never met did not happen that way (its sender never reached that send
first) and is set aside; any other that ends in a deadlock or mismatch is
reported, with the matching that led there.
"""

from __future__ import annotations

import dataclasses
import itertools

from entangle_jax._src.targets.communication import ANY
from entangle_jax.testing._analysis.ranks import (
  BeyondTheModel,
  Branch,
  Call,
  Item,
  Loop,
  calls_of,
)

LIMIT = 256
"""The most matchings tried; more is an error (the check cannot
answer)."""


def _accepts(wanted: int | None, tag: int | None) -> bool:
  wanted = 0 if wanted is None else wanted
  tag = 0 if tag is None else tag
  return wanted <= ANY or tag <= ANY or wanted == tag


def is_wildcard(call: Call) -> bool:
  """Whether `call` receives from any source: a receive, or the receiving
  side of a sendrecv."""
  source = _source(call)
  return source is not None and source <= ANY


def _source(call: Call) -> int | None:
  """Where `call` receives from; None for a call that receives nothing."""
  if call.kind == "recv":
    return call.peer
  return call.source if call.kind == "sendrecv" else None


def _receive_tag(call: Call) -> int | None:
  return call.source_tag if call.kind == "sendrecv" else call.tag


@dataclasses.dataclass(frozen=True)
class Matching:
  """One way of fixing the wildcard receives' senders."""

  sequences: list[tuple[Item, ...]]
  """Each rank's items, each wildcard receive given its sender."""
  fixed: frozenset[tuple[int, str]]
  """(rank, instruction name) of each receive given a sender."""
  said: str
  """The choice, in words ("" when there is no wildcard receive)."""


def matchings(sequences: list[tuple[Item, ...]]) -> list[Matching]:
  """Every way of fixing the wildcard receives' senders (one, unchanged,
  when there are none).

  Raises:
    BeyondTheModel: more than `LIMIT` matchings.
  """
  choices: list[tuple[int, Call, list[int]]] = []
  for rank, items in enumerate(sequences):
    for call in calls_of(items):
      if not is_wildcard(call):
        continue
      senders = [
        other
        for other, theirs in enumerate(sequences)
        if other != rank
        and any(
          c.kind in ("send", "sendrecv")
          and c.peer == rank
          and _accepts(_receive_tag(call), c.tag)
          for c in calls_of(theirs)
        )
      ]
      choices.append((rank, call, senders or [_source(call) or ANY]))
  if not choices:
    return [Matching(sequences, frozenset(), "")]
  count = 1
  for _, _, senders in choices:
    count *= len(senders)
  if count > LIMIT:
    raise BeyondTheModel(
      f"{len(choices)} receives from any source have {count} matchings to "
      f"try, more than {LIMIT}: the cross-rank check cannot answer"
    )
  found = []
  for picked in itertools.product(*(senders for _, _, senders in choices)):
    chosen = {
      (rank, call.op.name): sender
      for (rank, call, _), sender in zip(choices, picked, strict=True)
    }
    said = "; ".join(
      f"rank {rank}'s receive from any rank ({call.op.location or call.op.name}"
      f") meets rank {sender}'s send"
      for (rank, call, _), sender in zip(choices, picked, strict=True)
    )
    restricted = [
      _fixed(items, rank, chosen) for rank, items in enumerate(sequences)
    ]
    found.append(Matching(restricted, frozenset(chosen), said))
  return found


def _fixed(
  items: tuple[Item, ...], rank: int, chosen: dict[tuple[int, str], int]
) -> tuple[Item, ...]:
  out: list[Item] = []
  for item in items:
    if isinstance(item, Call):
      sender = chosen.get((rank, item.op.name))
      if sender is not None and is_wildcard(item):
        side = "source" if item.kind == "sendrecv" else "peer"
        item = dataclasses.replace(item, **{side: sender})
    elif isinstance(item, Loop):
      item = dataclasses.replace(item, body=_fixed(item.body, rank, chosen))
    elif isinstance(item, Branch):
      item = dataclasses.replace(
        item, branches=tuple(_fixed(b, rank, chosen) for b in item.branches)
      )
    out.append(item)
  return tuple(out)
