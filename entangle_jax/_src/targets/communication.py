"""What a communicating call is: `Communication`, the part of a target's
declaration that says it talks to other processes (ranks), and XLA's own
collectives, which need no declaration.

The cross-rank check (`entangle_jax.testing.races_across`) reads it: every
rank must make its communicating calls in a compatible order, with
matching fingerprints (kind, shapes, reduction, communicator up to a
consistent renaming); a blocking send waits for its receive; and a
collective must not sit under a branch or loop whose decision differs
between ranks. Results declared `Communication.same_result` are the same
on every rank, so a decision taken from them is too.

A *place* names where a call keeps one of its parameters: an int is an
operand index, a str the name of an attribute (an ``ffi_call`` keyword,
which XLA prints in the call's ``backend_config``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

CommunicationKind = Literal["collective", "send", "recv", "sendrecv"]
KINDS: tuple[CommunicationKind, ...] = (
  "collective",
  "send",
  "recv",
  "sendrecv",
)

Place = int | str
"""An operand index (int) or an attribute name (str)."""

ANY = -1
"""A peer or tag below 0 (MPI's ``ANY_SOURCE``, ``ANY_TAG`` in Open MPI and
MPICH) matches any."""


@dataclasses.dataclass(frozen=True)
class Communication:
  """How calls of a target communicate with other ranks.

  Attributes:
    kind: ``"collective"`` (every rank of the communicator takes part and
      waits for the others), ``"send"``, ``"recv"`` (blocking, one peer
      each) or ``"sendrecv"`` (sends to `peer`, receives from `source`, in
      one call that does not wait on itself).
    communicator: the place (operand index or attribute name) of the
      communicator; compared across ranks up to a consistent renaming (a
      handle's address differs in each process). None: one communicator.
    peer: where a send goes or a receive comes from (a rank number): a
      place, or None (for a collective).
    tag: the message tag's place, or None (tag 0).
    source: for ``"sendrecv"``: the place of the rank it receives from.
    source_tag: for ``"sendrecv"``: the place of the tag it receives.
    op: the place of the reduction operation (``MPI.SUM``'s handle);
      compared up to a consistent renaming.
    match: more places whose values must be equal on every rank (a
      broadcast's root, an item count).
    same_result: the result is the same on every rank (an allreduce, an
      allgather, a broadcast): a decision computed from it is not
      rank-local.
    root: the place of the root's rank, for a rooted collective; it must
      be equal on every rank. With `same_result` (a broadcast), every
      rank's result is the root's data operand, so on the root that
      operand is the same on every rank too (mpi4jax's ``bcast`` hands
      the root its own input back, not the call's result).
    matched_by: what MPI matches a native collective by, as element types
      and counts: ``"operands"`` (its data operands, the default) or
      ``"results"`` (a scatter: the root's operand holds every rank's
      block, and each rank, the root too, receives one block as its
      result).
  """

  kind: Literal["collective", "send", "recv", "sendrecv"] = "collective"
  communicator: int | str | None = None
  peer: int | str | None = None
  tag: int | str | None = None
  source: int | str | None = None
  source_tag: int | str | None = None
  op: int | str | None = None
  match: tuple[int | str, ...] = ()
  same_result: bool = False
  root: int | str | None = None
  matched_by: Literal["operands", "results"] = "operands"

  def __post_init__(self):
    check(self, "communicates")

  def __str__(self) -> str:
    parts = [self.kind]
    for name in PLACE_KEYS:
      value = getattr(self, name)
      if value is not None:
        parts.append(f"{name} {_place(value)}")
    if self.match:
      parts.append(f"match {', '.join(_place(p) for p in self.match)}")
    if self.same_result:
      parts.append("same result on every rank")
    if self.matched_by != "operands":
      parts.append(f"matched by its {self.matched_by}")
    return ", ".join(parts)


def _place(place: Place) -> str:
  return f"operand {place}" if isinstance(place, int) else f"`{place}`"


def _is_place(value: object) -> bool:
  if isinstance(value, bool):
    return False
  if isinstance(value, int):
    return value >= 0
  return isinstance(value, str) and bool(value)


PLACE_KEYS = (
  "communicator",
  "peer",
  "tag",
  "source",
  "source_tag",
  "op",
  "root",
)
KEYS = frozenset({"kind", *PLACE_KEYS, "match", "same_result", "matched_by"})
MATCHED_BY = ("operands", "results")


def check(c: Communication, where: str) -> None:
  """Raises for a field of `c` of the wrong type or value, naming it."""
  if c.kind not in KINDS:
    raise ValueError(f"{where}: kind must be one of {KINDS}, not {c.kind!r}")
  for name in PLACE_KEYS:
    value = getattr(c, name)
    if value is not None and not _is_place(value):
      raise ValueError(
        f"{where}: {name} must be an operand index (an int >= 0) or an "
        f"attribute name, not {value!r}"
      )
  if not isinstance(c.match, tuple) or not all(_is_place(p) for p in c.match):
    raise ValueError(
      f"{where}: match must be a list of operand indices or attribute "
      f"names, not {c.match!r}"
    )
  if not isinstance(c.same_result, bool):
    raise TypeError(f"{where}: same_result must be true or false")
  if c.matched_by not in MATCHED_BY:
    raise ValueError(
      f"{where}: matched_by must be one of {MATCHED_BY}, not {c.matched_by!r}"
    )
  if c.kind != "collective" and (
    c.root is not None or c.matched_by != "operands"
  ):
    raise ValueError(f"{where}: root and matched_by are for a collective")
  if c.kind in ("send", "recv", "sendrecv") and c.peer is None:
    raise ValueError(f"{where}: a {c.kind} needs its peer's place")
  if c.kind == "sendrecv" and c.source is None:
    raise ValueError(f"{where}: a sendrecv needs its source's place")
  two_way = c.source is not None or c.source_tag is not None
  if c.kind != "sendrecv" and two_way:
    raise ValueError(f"{where}: source and source_tag are for a sendrecv")
  if c.kind == "collective" and (c.peer is not None or c.tag is not None):
    raise ValueError(f"{where}: a collective has no peer or tag")


def from_keys(value: object, where: str) -> Communication | None:
  """The `Communication` a ``communicates`` table (or one already made)
  gives; None for none."""
  if value is None or isinstance(value, Communication):
    return value
  if not isinstance(value, Mapping):
    raise TypeError(
      f"{where}: communicates must be a table of {sorted(KEYS)}, not {value!r}"
    )
  unknown = set(value) - KEYS
  if unknown:
    raise ValueError(
      f"{where}: communicates has unknown keys {sorted(unknown)}; it takes "
      f"{sorted(KEYS)}"
    )
  keys: dict[str, Any] = dict(value)
  match = keys.get("match", ())
  if isinstance(match, str | int):
    raise TypeError(f"{where}: communicates.match must be a list")
  keys["match"] = tuple(match)
  try:
    return Communication(**keys)
  except (TypeError, ValueError) as error:
    said = str(error).removeprefix("communicates: ")
    raise type(error)(f"{where}: communicates: {said}") from None


# XLA's own collectives: read from the opcode, no declaration needed. The
# ``-start`` of an async pair stands for the pair; its ``-done`` is not a
# call of its own.
XLA_COLLECTIVES: Mapping[str, Communication] = {
  "all-reduce": Communication(same_result=True),
  "all-reduce-start": Communication(same_result=True),
  "all-gather": Communication(same_result=True),
  "all-gather-start": Communication(same_result=True),
  "collective-broadcast": Communication(same_result=True),
  "all-to-all": Communication(),
  "ragged-all-to-all": Communication(),
  "reduce-scatter": Communication(),
  "collective-permute": Communication(),
  "collective-permute-start": Communication(),
}
"""XLA's collective opcodes, each a collective; all-reduce, all-gather and
collective-broadcast give every participant the same result."""

XLA_DONE = frozenset(
  {"all-reduce-done", "all-gather-done", "collective-permute-done"}
)
"""The second halves of XLA's async collectives: their result is the
start's (the same on every rank where the start's is)."""
