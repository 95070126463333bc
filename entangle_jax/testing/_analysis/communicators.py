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
Where the ranks' numbering matters, the layout must also be the world's
order (issue 77, skeptic pass 77b): a send's or a receive's peer is a
rank *of the communicator*, so on one that ``Split`` numbered the other
way round (``Split(0, size - 1 - rank)``) "to rank 1" is a message to
oneself; and where a rank also makes calls on no declared communicator
(XLA's collectives, an undeclared native call), a result reduced over a
communicator of some ranks is not the same on the others. Collectives
alone take part in any order of the ranks. Two communicators that each
span every rank, one used by some ranks and the other by the rest, are
still taken for one: nothing in a process tells them apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from entangle_jax.testing._analysis.call_attributes import as_int
from entangle_jax.testing._analysis.ranks import Call

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
  known to be the world's or does not matter, or none at all):
  `sequences` holds each rank's communicating calls, `layouts` each
  rank's known layouts by handle value (None: none known)."""
  said: list[str] = []
  sequences = [tuple(calls) for calls in sequences]
  for rank, calls in enumerate(sequences):
    handles: dict[object, Call] = {}
    hidden: list[Call] = []
    numbered: list[Call] = []
    plain: list[Call] = []
    for call in calls:
      if call.communication.communicator is None:
        # XLA's collectives (replica groups), or a binding of one
        # communicator: on every rank, in the world's numbering.
        plain.append(call)
        continue
      value = dict(call.renamed).get("communicator")
      if value is None:
        hidden.append(call)
      else:
        handles.setdefault(value, call)
        if call.kind in _NUMBERED:
          numbered.append(call)
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
      because = None
      if numbered:
        because = f"the peers of {numbered[0].label()} are ranks of it"
      elif plain:
        because = (
          f"the rank also makes {plain[0].label()}, which spans every "
          "rank, and a result reduced over a communicator of some ranks "
          "is not the same on the others"
        )
      sentence = _layout_unproved(
        rank, len(sequences), first, known.get(as_int(handle)), because
      )
      if sentence:
        said.append(sentence)
  return tuple(said)


def _layout_unproved(
  rank: int,
  ranks: int,
  first: Call,
  layout: Layout | None,
  numbering: str | None,
) -> str | None:
  """Why rank `rank`'s one communicator (its first call `first`) proves
  nothing: its layout unknown, or of some ranks only, or (where the
  numbering matters: `numbering` says why) not the world's order; None
  where it spans every rank as it must."""
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
  if numbering is None:
    return None  # Collectives alone: every rank takes part, in any order.
  return (
    f"{where} numbers the ranks otherwise than the world does: its rank "
    f"k is world rank {list(layout)}[k], and {numbering}, so which "
    "processes meet is not what the world's numbers say"
  )


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
