"""The matchings of wildcard receives, for the cross-rank check to try
each one (issue 77).

A receive from any source (MPI's ``ANY_SOURCE``, `peers.any_source`) meets
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

Each receive is one place in its rank's sequence (`Matching.fixed` holds
the very calls given a sender), never an instruction name: a jitted
helper run twice makes two receives of one name, and mpi4jax names the
receive of every module alike (skeptic pass 77c, N3).

A receive inside a loop is one place for every iteration, but MPI matches
each iteration's receive on its own: a master whose ``fori_loop`` receives
from any rank twice meets one worker, then the other. So where the
simulation runs a loop's body over and over (a loop that XLA knows the
trips of, met by calls or by other loops), that loop is first replaced by
its body that many times (`unrolled`), and each iteration's receive gets
its own sender (issue 77).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools

from entangle_jax._src.targets.communication import ANY
from entangle_jax.testing._analysis import peers
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


def is_wildcard(call: Call) -> bool:
  """Whether `call` receives from any source: a receive, or the receiving
  side of a sendrecv."""
  source = _source(call)
  return peers.any_source(source)


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
  fixed: tuple[tuple[int, Call], ...]
  """(rank, call) of each receive given a sender: the calls of
  `sequences` themselves, told apart by identity (`is_fixed`)."""
  said: str
  """The choice, in words ("" when there is no wildcard receive)."""
  places: tuple[int, ...] = ()
  """Each `fixed` call's place among its rank's calls (`calls_of`'s
  order), in `fixed`'s order: where `unrolled` finds its loop."""

  def place_of(self) -> dict[int, tuple[int, int]]:
    """(rank, place) of each fixed receive, by the identity of its call:
    for the simulation to say which loops hold one (`unrolled`)."""
    return {
      id(call): (rank, place)
      for (rank, call), place in zip(self.fixed, self.places, strict=True)
    }

  def is_fixed(self, rank: int, item: Item | None) -> bool:
    """Whether `item`, where `rank` stopped, is a receive given a
    sender."""
    return any(r == rank and c is item for r, c in self.fixed)


def matchings(sequences: list[tuple[Item, ...]]) -> list[Matching]:
  """Every way of fixing the wildcard receives' senders (one, unchanged,
  when there are none).

  Raises:
    BeyondTheModel: more than `LIMIT` matchings.
  """
  choices: list[tuple[int, int, Call, list[int]]] = []
  for rank, items in enumerate(sequences):
    for place, call in enumerate(calls_of(items)):
      if not is_wildcard(call):
        continue
      senders = [
        other
        for other, theirs in enumerate(sequences)
        if other != rank
        and any(
          c.kind in ("send", "sendrecv")
          and c.peer == rank
          and peers.tag_accepts(_receive_tag(call), c.tag)
          for c in calls_of(theirs)
        )
      ]
      choices.append((rank, place, call, senders or [_source(call) or ANY]))
  if not choices:
    return [Matching(sequences, (), "")]
  # A loop unrolled (`unrolled`) repeats one receive: each is named with
  # its iteration.
  times = collections.Counter((rank, id(call)) for rank, _, call, _ in choices)
  seen: collections.Counter[tuple[int, int]] = collections.Counter()
  where = []
  for rank, _, call, _ in choices:
    seen[(rank, id(call))] += 1
    k = seen[(rank, id(call))]
    repeated = times[(rank, id(call))] > 1
    where.append(_where(call) + (f", iteration {k}" if repeated else ""))
  count = 1
  for *_, senders in choices:
    count *= len(senders)
  if count > LIMIT:
    raise BeyondTheModel(
      f"{len(choices)} receives from any source have {count} matchings to "
      f"try, more than {LIMIT}: the cross-rank check cannot answer"
    )
  found = []
  for picked in itertools.product(*(senders for *_, senders in choices)):
    chosen = {
      (rank, place): sender
      for (rank, place, _, _), sender in zip(choices, picked, strict=True)
    }
    said = "; ".join(
      f"rank {rank}'s receive from any rank ({at}) meets rank {sender}'s send"
      for (rank, *_), at, sender in zip(choices, where, picked, strict=True)
    )
    restricted = [
      _Fixer({p: s for (r, p), s in chosen.items() if r == rank}).items(items)
      for rank, items in enumerate(sequences)
    ]
    fixed = [
      (rank, place, call)
      for rank, items in enumerate(restricted)
      for place, call in enumerate(calls_of(items))
      if (rank, place) in chosen
    ]
    found.append(
      Matching(
        restricted,
        tuple((rank, call) for rank, _, call in fixed),
        said,
        tuple(place for _, place, _ in fixed),
      )
    )
  return found


def _where(call: Call) -> str:
  """Where a receive is, for people: its line, and its execution when the
  sequence is a rank's executions (one line runs in each)."""
  where = call.op.location or f"%{call.op.name}"
  execution = getattr(call, "execution", None)
  return f"{where}, execution {execution}" if execution else where


class _Fixer:
  """A rank's items, each receive at a place (its index among the rank's
  calls, `calls_of`'s order) in `given` receiving from its sender."""

  def __init__(self, given: dict[int, int]):
    self.given = given
    self.place = 0

  def items(self, items: tuple[Item, ...]) -> tuple[Item, ...]:
    out: list[Item] = []
    for item in items:
      if isinstance(item, Call):
        sender = self.given.get(self.place)
        self.place += 1
        if sender is not None:
          side = "source" if item.kind == "sendrecv" else "peer"
          item = dataclasses.replace(item, **{side: sender})
      elif isinstance(item, Loop):
        item = dataclasses.replace(item, body=self.items(item.body))
      elif isinstance(item, Branch):
        item = dataclasses.replace(
          item, branches=tuple(self.items(b) for b in item.branches)
        )
      out.append(item)
    return tuple(out)


def unrolled(
  sequences: list[tuple[Item, ...]], wanted: set[tuple[int, int]]
) -> list[tuple[Item, ...]]:
  """`sequences`, each loop that holds a receive at a (rank, place) of
  `wanted` (places among the rank's calls, `calls_of`'s order) and whose
  trips XLA knows replaced by its body that many times: each iteration's
  receive is then a place of its own, and may meet another sender."""
  out = []
  for rank, items in enumerate(sequences):
    places = {p for r, p in wanted if r == rank}
    out.append(_Unroller(places).items(items) if places else items)
  return out


class _Unroller:
  """A rank's items, each loop holding a place of `places` unrolled."""

  def __init__(self, places: set[int]):
    self.places = places
    self.place = 0

  def items(self, items: tuple[Item, ...]) -> tuple[Item, ...]:
    out: list[Item] = []
    for item in items:
      if isinstance(item, Call):
        self.place += 1
      elif isinstance(item, Loop):
        start = self.place
        body = self.items(item.body)
        held = any(start <= p < self.place for p in self.places)
        if held and item.trips is not None:
          out.extend(body * item.trips)
          continue
        item = dataclasses.replace(item, body=body)
      elif isinstance(item, Branch):
        item = dataclasses.replace(
          item, branches=tuple(self.items(b) for b in item.branches)
        )
      out.append(item)
    return tuple(out)
