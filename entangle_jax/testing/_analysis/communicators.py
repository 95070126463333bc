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
does not show, nothing is proved (`unseen`). One communicator a rank is
taken to span all the ranks given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from entangle_jax.testing._analysis.ranks import Call


def unseen(sequences: Sequence[Iterable[Call]]) -> tuple[str, ...]:
  """Why the ranks' communicators cannot be matched, a sentence a rank
  (none where each rank's calls use one communicator, or none at all):
  `sequences` holds each rank's communicating calls."""
  said: list[str] = []
  for rank, calls in enumerate(sequences):
    handles: dict[object, Call] = {}
    hidden: list[Call] = []
    for call in calls:
      if call.communication.communicator is None:
        continue  # XLA's collectives (replica groups), or one communicator.
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
  return tuple(said)
