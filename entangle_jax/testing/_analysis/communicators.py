"""Which communicators a rank's native calls use, as far as its module
shows them (issue 77).

A native call's communicator (``comm=`` of an mpi4jax call, the place a
declaration's ``communicator`` names) is an MPI handle: the module holds
its value in this process, not which ranks it spans, and each process's
handle has its own value. The cross-rank check compares communicators up
to a consistent renaming, which is sound only where each rank uses one:

* two communicators may be one spanning all ranks and one a subset
  (``MPI.COMM_WORLD.Split``); a result reduced over the subset is the same
  only on the ranks it spans, and a decision on it may differ outside;
* even two that span all ranks cannot be told apart across processes:
  rank 1 making its two calls on them the other way round (each rank then
  waits in a communicator the other is not in, and both hang) renames as
  consistently as the right order;
* a communicator that is not a constant in the module cannot be compared
  at all.

So where a rank's calls use two or more communicators, or one the module
does not show, nothing is proved (`unseen`).

One communicator a rank must be known to span every rank: its
*layout*, which world rank each of its ranks is (`Layout`), recorded at
run time (`record_executions`, with mpi4py) or given to
``races_across``. A module holds the handle only, and one rank on
``COMM_SELF`` (or a ``Split`` of some ranks) makes the same calls as the
others on ``COMM_WORLD`` and never meets them (skeptic pass 77c, N6).
A send's or a receive's peer is a rank *of the communicator*: on one
that ``Split`` numbered the other way round (``Split(0, size - 1 -
rank)``) "to rank 1" from world rank 0 is a message to itself. Where the
layout spans every rank in another order, the peers are translated to
world ranks (`translated`) before the ranks' calls are matched (issue
77; skeptic pass 77b had them not proved). Two things stay not proved
there: a message a rank sends to itself (right if meant, but the mark
of a peer numbered in the world's order on a communicator that numbers
the ranks otherwise: "the other rank" ``1 - rank`` on the reversed one
gives each rank its own data back), and a rooted call (a broadcast's
root is a rank of the communicator too, and which rank's data every rank
gets is followed in the world's numbering). The ranks' layouts of their
one communicator must be one layout: two that differ are two
communicators, whose calls never meet. Two communicators that each span
every rank in one order, one used by some ranks and the other by the
rest, are still taken for one: nothing in a process tells them apart.

Communicators of some ranks that split the ranks into groups (`groups`:
``Split(rank % 2, rank)``) are checked a group at a time
(`entangle_jax.testing._analysis.rank_groups`); any other communicator of
some ranks proves nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable, Mapping, Sequence

from entangle_jax.testing._analysis.call_attributes import as_int
from entangle_jax.testing._analysis.ranks import Branch, Call, Item, Loop

Layout = tuple[int, ...]
"""A communicator's layout: the world rank (``MPI.COMM_WORLD``'s) of each
of its ranks, in its own order; ``(0, 1, ..., n - 1)`` for one that spans
all n ranks numbered as the world numbers them."""

_NUMBERED = frozenset({"send", "recv", "sendrecv"})
"""Kinds whose peers are ranks of the communicator."""


def unseen(
  sequences: Sequence[Iterable[Call]],
  layouts: Sequence[Mapping[int, Layout]] | None = None,
) -> tuple[str, ...]:
  """Why the ranks' communicators cannot be matched, a sentence a rank
  (none where each rank's calls use one communicator whose layout is
  known to span every rank, the same on each, its peers translated to
  world ranks (`translated`) where needed; or none at all):
  `sequences` holds each rank's communicating calls, `layouts` each
  rank's known layouts by handle value (None: none known)."""
  said: list[str] = []
  sequences = [tuple(calls) for calls in sequences]
  used: dict[int, Layout] = {}  # Each rank's one communicator's layout.
  for rank, calls in enumerate(sequences):
    handles: dict[object, Call] = {}
    hidden: list[Call] = []
    for call in calls:
      if call.communication.communicator is None:
        # XLA's collectives (replica groups), or a binding of one
        # communicator: on every rank, in the world's numbering.
        continue
      value = dict(call.renamed).get("communicator")
      if value is None:
        hidden.append(call)
      else:
        handles.setdefault(value, call)
    if hidden:
      said.append(
        f"rank {rank}: the communicator of {hidden[0].label()} is not a "
        "constant in the module, so which ranks it spans, and which calls "
        "share it, is unknown"
      )
    if len(handles) > 1:
      first = "; ".join(call.label() for call in handles.values())
      said.append(
        f"rank {rank}: its calls use {len(handles)} communicators (first "
        f"calls: {first}). Which ranks each spans is not in the module "
        "(one may be a subset, as MPI.COMM_WORLD.Split makes), and a "
        "handle's value differs in each process, so a rank that makes "
        "its calls on them in another order is not seen"
      )
    if len(handles) == 1 and not hidden:
      ((handle, first),) = handles.items()
      known = layouts[rank] if layouts is not None else {}
      layout = known.get(as_int(handle))
      sentence = _layout_unproved(rank, len(sequences), first, layout)
      if sentence is None and layout is not None:
        used[rank] = layout
        sentence = _translation_unproved(rank, calls, layout)
      if sentence:
        said.append(sentence)
  if len(set(used.values())) > 1:
    each = "; ".join(f"rank {r}: {list(x)}" for r, x in used.items())
    said.append(
      "the ranks' communicators have different layouts (the world rank of "
      f"each of its ranks: {each}), so they are different communicators, "
      "and calls on one never meet calls on another"
    )
  return tuple(said)


def _translation_unproved(
  rank: int, calls: Sequence[Call], layout: Layout
) -> str | None:
  """Why rank `rank`'s calls on a communicator of every rank, numbered
  by `layout` otherwise than the world, prove nothing once their peers
  are translated (`translated`); None where they do."""
  if layout == tuple(range(len(layout))):
    return None
  where = (
    f"rank {rank}: its communicator numbers the ranks otherwise than the "
    f"world does (its rank k is world rank {list(layout)}[k])"
  )
  for call in calls:
    if call.communication.communicator is None:
      continue  # On no declared communicator: in the world's numbering.
    if call.communication.root is not None:
      return (
        f"{where}, and {call.label()} names a root, a rank of it, which "
        "the check follows in the world's numbering"
      )
    peers = [call.peer] if call.kind in ("send", "recv") else []
    if call.kind == "sendrecv":
      peers = [call.peer, call.source]
    if any(_world(p, layout) == rank for p in peers):
      return (
        f"{where}, and {call.label()} is a message to itself (world rank "
        f"{rank}): right if meant, but a peer numbered in the world's "
        'order on this communicator ("the other rank" 1 - rank) gives '
        "each rank its own data back"
      )
  return None


def _world(peer: int | None, layout: Layout) -> int | None:
  """The world rank of `peer`, a rank of a communicator of `layout`; a
  peer that is no rank of it (``ANY_SOURCE``, one beyond it) as it is."""
  if peer is None or not 0 <= peer < len(layout):
    return peer
  return layout[peer]


def translated(
  sequences: Sequence[tuple[Item, ...]],
  layouts: Sequence[Mapping[int, Layout]] | None,
) -> list[tuple[Item, ...]]:
  """Each rank's items, the peers of its calls on a communicator whose
  layout spans every rank (in another order than the world's) given as
  world ranks: the ranks the simulation numbers."""
  count = len(sequences)
  out = []
  for rank, items in enumerate(sequences):
    known = {
      handle: layout
      for handle, layout in (layouts[rank] if layouts else {}).items()
      if sorted(layout) == list(range(count)) and layout != tuple(range(count))
    }
    out.append(_Translator(known).items(items) if known else tuple(items))
  return out


class _Translator:
  """A rank's items, each point-to-point call's peers on a communicator
  of `known` (by handle) translated to world ranks."""

  def __init__(self, known: Mapping[int, Layout]):
    self.known = known

  def items(self, items: tuple[Item, ...]) -> tuple[Item, ...]:
    out: list[Item] = []
    for item in items:
      if isinstance(item, Call):
        item = self.call(item)
      elif isinstance(item, Loop):
        item = dataclasses.replace(item, body=self.items(item.body))
      elif isinstance(item, Branch):
        item = dataclasses.replace(
          item, branches=tuple(self.items(b) for b in item.branches)
        )
      out.append(item)
    return tuple(out)

  def call(self, call: Call) -> Call:
    if call.kind not in _NUMBERED or call.communication.communicator is None:
      return call
    handle = as_int(dict(call.renamed).get("communicator"))
    layout = None if handle is None else self.known.get(handle)
    if layout is None:
      return call
    peer, source = _world(call.peer, layout), _world(call.source, layout)
    pairs = dict.fromkeys([(call.peer, peer), (call.source, source)])
    written = "; ".join(
      f"its communicator's rank {mine} is world rank {world}"
      for mine, world in pairs
      if mine is not None and mine != world
    )
    fields = {f.name: getattr(call, f.name) for f in dataclasses.fields(call)}
    fields.update(peer=peer, source=source, written=written)
    return _translated_type(type(call))(**fields)


@functools.cache
def _translated_type(base: type[Call]) -> type[Call]:
  """`base` (a `Call`, or a rank sequence's kind of one) whose peers were
  translated to world ranks, its label saying so: the peers it reports
  are not the numbers the program wrote."""

  def label(self) -> str:
    text = base.label(self)
    return f"{text} [{self.written}]" if self.written else text

  made = dataclasses.make_dataclass(
    f"Translated{base.__name__}",
    [("written", str, dataclasses.field(default=""))],
    bases=(base,),
    frozen=True,
    namespace={"label": label, "__module__": __name__},
  )
  return typing.cast("type[Call]", made)


def _layout_unproved(
  rank: int,
  ranks: int,
  first: Call,
  layout: Layout | None,
) -> str | None:
  """Why rank `rank`'s one communicator (its first call `first`) proves
  nothing: its layout unknown, or of some ranks only; None where it spans
  every rank as it must (in any order: `translated`)."""
  if layout == tuple(range(ranks)):
    return None
  where = f"rank {rank}: the communicator of {first.label()}"
  if layout is None:
    return (
      f"{where} may span only some of the ranks (COMM_SELF, a Split), or "
      "number them otherwise than the world does, and its layout is not "
      "recorded: ranks on communicators of different ranks do not meet. "
      "Run the program under record_executions(DIR) or pytest "
      "--entangle-ranks with mpi4py, which record each communicator's "
      "ranks, or give races_across its layout (communicators=)"
    )
  if sorted(layout) != list(range(ranks)):
    return (
      f"{where} spans world ranks {sorted(layout)} of the {ranks} given: "
      "the others are not in it, and each rank's calls are compared as "
      "if every rank took part"
    )
  return None


def handles(calls: Iterable[Call]) -> frozenset[int]:
  """The values of the communicators that `calls` name, as ints (the
  handles a layout is recorded for)."""
  found = set()
  for call in calls:
    if call.communication.communicator is None:
      continue
    value = as_int(dict(call.renamed).get("communicator"))
    if value is not None:
      found.add(value)
  return frozenset(found)


def groups(
  sequences: Sequence[Iterable[Call]],
  layouts: Sequence[Mapping[int, Layout]] | None,
) -> tuple[Layout, ...] | None:
  """The communicators of some ranks that split the ranks into groups,
  each simulated alone (`rank_groups`): their layouts, each once; None
  unless every rank makes all its calls (one at least) on one
  communicator of known layout that holds the rank, every rank of a
  layout has that layout too, and there are two or more (one layout of
  every rank is the plain check's). No call may name a root: a root is
  a rank of the communicator, which the decisions' analysis reads in
  the world's numbering (`_translation_unproved`)."""
  if layouts is None:
    return None
  found: list[Layout] = []
  for rank, calls in enumerate(sequences):
    seen: set[int | None] = set()
    for call in calls:
      if call.communication.communicator is None:
        return None  # XLA's collectives, or another binding's: every rank.
      if call.communication.root is not None:
        return None
      seen.add(as_int(dict(call.renamed).get("communicator")))
    (handle,) = seen if len(seen) == 1 else (None,)
    if handle is None:
      return None
    layout = layouts[rank].get(handle)
    if layout is None or rank not in layout:
      return None
    found.append(layout)
  for layout in found:
    # Each member holds the same layout, so the groups split the ranks.
    if any(m >= len(found) or found[m] != layout for m in layout):
      return None
  distinct = tuple(dict.fromkeys(found))
  return distinct if len(distinct) > 1 else None
