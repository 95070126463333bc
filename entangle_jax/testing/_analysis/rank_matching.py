"""Matching the ranks' communicating calls: the lock-step simulation that
`races_across` (`entangle_jax.testing._analysis.across_ranks`) runs over
each rank's `RankProgram` items, and the records of what it finds.

A collective completes when every rank is at one and their fingerprints
are equal (`Call.fingerprint`; the renamed values up to a consistent
renaming); a blocking send completes with the receive it meets on its
peer, and a sendrecv when its peer receives and its source sends at once.
When no rank can go on and some have calls left, it is a `Deadlock`. A
loop (or a conditional) is one step: the ranks' bodies (each branch) are
simulated together, their decisions compared first (`RankDependent`).
Every matching of the receives from any source is tried (`simulate`), and
matched collectives of one type are told apart by their operands'
origins (`swaps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, Protocol

from entangle_jax.testing._analysis import (
  origins,
  peers,
  rank_values,
  wildcards,
)
from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._analysis.ranks import (
  BeyondTheModel,
  Branch,
  Call,
  Item,
  Loop,
  Unordered,
  calls_of,
)
from entangle_jax.testing._analysis.same_module import ModuleIdentity


class RankItems(Protocol):
  """What the check reads of a rank: a `RankProgram`, or a rank's
  executions concatenated (`rank_sequences`)."""

  @property
  def items(self) -> tuple[Item, ...]: ...
  @property
  def unordered(self) -> Sequence[Unordered]: ...


@dataclasses.dataclass(frozen=True)
class RankCall:
  """One rank's communicating call (or loop or conditional that holds
  some), as a report names it."""

  rank: int
  index: int
  """Its position among the rank's communicating calls, from 1 (a loop's
  calls counted once)."""
  label: str
  """Kind, target or opcode, peer, shapes, and ``file:line``."""
  location: str | None
  """The user's ``file:line`` that made it, if the module records it."""

  def __str__(self) -> str:
    return f"rank {self.rank}: call {self.index}: {self.label}"


@dataclasses.dataclass(frozen=True)
class MatchedStep:
  """One step of the sequence every rank agrees on: a collective made by
  every rank, or a send and the receive it met."""

  calls: tuple[RankCall, ...]


@dataclasses.dataclass(frozen=True)
class Mismatch:
  """The ranks reach different communicating calls at one step."""

  calls: tuple[RankCall | None, ...]
  """Each rank's call at that step, or None where the rank has made all
  its calls."""
  differs: str
  """What differs, in words."""


@dataclasses.dataclass(frozen=True)
class Deadlock:
  """No rank can go on, and some have calls left."""

  blocked: tuple[RankCall | None, ...]
  """Each rank's blocked call, or None where the rank has made all its
  calls."""
  matching: str = ""
  """Which sender each receive from any source met on the way here."""


@dataclasses.dataclass(frozen=True)
class RankDependent:
  """A loop or conditional that holds communicating calls and decides on a
  value that may differ between ranks."""

  ranks: tuple[int, ...]
  construct: Literal["loop", "conditional"]
  label: str
  """The loop or conditional (``%while.3``) and its ``file:line``."""
  depends_on: str
  """The rank-local value its decision depends on, in words."""
  calls: tuple[str, ...]
  """The communicating calls inside it."""
  location: str | None = None
  """The loop's or conditional's ``file:line``, if recorded."""


@dataclasses.dataclass(frozen=True)
class UnorderedCalls:
  """Two communicating calls of one rank that nothing orders."""

  rank: int
  first: str
  second: str
  first_location: str | None = None
  """The first call's ``file:line``, if recorded."""
  second_location: str | None = None


def label_of(item: Item) -> str:
  if isinstance(item, Call):
    return item.label()
  construct = "loop" if isinstance(item, Loop) else "conditional"
  where = item.op.location
  return f"{construct} %{item.op.name}" + (f" at {where}" if where else "")


def op_label(op: Op) -> str:
  where = op.location or "an unknown line"
  return f"{op.target or op.instruction.opcode} (%{op.name}) at {where}"


class Simulation:
  def __init__(
    self, count: int, wildcards: dict[int, tuple[int, int]] | None = None
  ):
    self.count = count
    self.wildcards = wildcards or {}
    """(rank, place) of each receive from any source given a sender, by
    the identity of its call (`wildcards.Matching.place_of`)."""
    self.unroll: set[tuple[int, int]] = set()
    """The receives of `wildcards` in loops that `_unrolled` ran over and
    over: one sender for every iteration is not what MPI does, and the
    matchings must be tried with those loops unrolled
    (`wildcards.unrolled`)."""
    self.calls_made = [0] * count
    self.matched: list[MatchedStep] = []
    self.collectives: list[tuple[tuple[Call, ...], tuple[RankCall, ...]]] = []
    """Each collective step matched: every rank's call, as reports name it."""
    self.messages: list[tuple[tuple[Call, ...], tuple[RankCall, ...]]] = []
    """Each point-to-point step matched: its ranks' calls (a send and its
    receive, or sendrecvs and the plain calls they meet), in rank order,
    as reports name them."""
    self.diverging: list[RankDependent] = []
    self.stuck: list[tuple[int, Item | None]] = []
    """Each rank's item where the simulation stopped, if it did."""
    """Loops and conditionals whose decisions the ranks compute from
    different constants (`_compare_decisions`)."""
    # Per rank and namespace: that rank's value -> rank 0's, and back.
    self.forward: list[dict[tuple[str, object], object]] = [
      {} for _ in range(count)
    ]
    self.backward: list[dict[tuple[str, object], object]] = [
      {} for _ in range(count)
    ]

  def rank_call(self, rank: int, item: Item, offset: int = 1) -> RankCall:
    location = item.op.location
    return RankCall(
      rank, self.calls_made[rank] + offset, label_of(item), location
    )

  def _renaming_differs(self, calls: list[Call]) -> str | None:
    reference = dict(calls[0].renamed)
    for rank in range(1, self.count):
      for name, value in calls[rank].renamed:
        expected = reference.get(name)
        bound = self.forward[rank].get((name, value), _UNBOUND)
        back = self.backward[rank].get((name, expected), _UNBOUND)
        if bound is _UNBOUND and back is _UNBOUND:
          self.forward[rank][(name, value)] = expected
          self.backward[rank][(name, expected)] = value
        elif bound != expected or back != value:
          return (
            f"the {name}: rank {rank} passes one it passed where rank 0 "
            "passed another (no consistent renaming maps one rank's "
            "handles to the other's)"
          )
    return None

  def _fingerprints_differ(self, calls: list[Call]) -> str | None:
    reference = calls[0].fingerprint
    for rank, call in enumerate(calls[1:], 1):
      if call.fingerprint != reference:
        mine, theirs = dict(reference), dict(call.fingerprint)
        for key in dict.fromkeys([*mine, *theirs]):
          ours, other = mine.get(key), theirs.get(key)
          if ours == other:
            continue
          if isinstance(ours, ModuleIdentity) and isinstance(
            other, ModuleIdentity
          ):
            return ours.difference(other, rank)
          return f"{key}: {ours} on rank 0, {other} on rank {rank}"
    return self._renaming_differs(calls)

  def run(
    self, sequences: list[tuple[Item, ...]]
  ) -> Mismatch | Deadlock | None:
    n = self.count
    position = [0] * n
    sequences = list(sequences)

    def head(rank: int) -> Item | None:
      items = sequences[rank]
      return items[position[rank]] if position[rank] < len(items) else None

    def advance(ranks: list[int], step: bool = True) -> None:
      calls = []
      for rank in ranks:
        item = head(rank)
        assert item is not None
        calls.append(self.rank_call(rank, item))
        position[rank] += 1
        self.calls_made[rank] += 1
      if step:
        self.matched.append(MatchedStep(tuple(calls)))

    while True:
      heads = [head(r) for r in range(n)]
      if all(h is None for h in heads):
        return None
      met = self._point_to_point(heads, advance)
      if isinstance(met, Mismatch):
        return met
      if met:
        continue
      if all(isinstance(h, Call) and h.kind == "collective" for h in heads):
        calls = [h for h in heads if isinstance(h, Call)]
        differs = self._fingerprints_differ(calls)
        if differs is not None:
          return Mismatch(
            tuple(self.rank_call(r, calls[r]) for r in range(n)), differs
          )
        self.collectives.append(
          (tuple(calls), tuple(self.rank_call(r, calls[r]) for r in range(n)))
        )
        advance(list(range(n)))
        continue
      if self._unrolled(heads, sequences, position):
        continue
      if all(isinstance(h, Loop) for h in heads):
        loops = [h for h in heads if isinstance(h, Loop)]
        self._compare_decisions(loops)
        self._run_ahead(loops)
        found = self.run([loop.body for loop in loops])
        if found is not None:
          return found
        position[:] = [p + 1 for p in position]
        continue
      if all(isinstance(h, Branch) for h in heads):
        branches = [h for h in heads if isinstance(h, Branch)]
        counts = {len(b.branches) for b in branches}
        if len(counts) != 1:
          return Mismatch(
            tuple(self.rank_call(r, branches[r]) for r in range(n)),
            "the conditionals have different numbers of branches",
          )
        branches = self._compare_decisions(branches)
        for k in range(counts.pop()):
          found = self.run([b.branches[k] for b in branches])
          if found is not None:
            return found
        position[:] = [p + 1 for p in position]
        continue
      among = self._messages_among(heads, position)
      if isinstance(among, Mismatch | Deadlock):
        return among
      if among:
        continue
      return self._stuck(heads)

  def _messages_among(
    self, heads: list[Item | None], position: list[int]
  ) -> bool | Mismatch | Deadlock:
    """Where some ranks are at conditionals whose branches hold only
    messages among those ranks (sends, receives and sendrecvs whose peers
    are among them, none from any source), and the other ranks at no
    conditional (a rank whose module has no call in either branch has
    none: issue 77's generated corpus): each branch simulated for those
    ranks alone, their decisions compared as for every rank's, and
    True (or the first finding). The other ranks take no part in those
    messages, and no message of theirs can meet a receive that names its
    source among the others. False where this does not apply."""
    at = [r for r, h in enumerate(heads) if isinstance(h, Branch)]
    if not at or len(at) == len(heads):
      return False
    branches = [h for h in heads if isinstance(h, Branch)]
    counts = {len(b.branches) for b in branches}
    if len(counts) != 1:
      return False
    among = set(at)
    for branch in branches:
      for x in sum(branch.branches, ()):
        if not isinstance(x, Call) or x.kind not in _MESSAGES:
          return False
        ends = [x.peer, x.source] if x.kind == "sendrecv" else [x.peer]
        if id(x) in self.wildcards or any(e not in among for e in ends):
          return False
    compared = self._compare_decisions(branches)
    for k in range(counts.pop()):
      alone: list[tuple[Item, ...]] = [() for _ in range(self.count)]
      for r, branch in zip(at, compared, strict=True):
        alone[r] = branch.branches[k]
      found = self.run(alone)
      if found is not None:
        return found
    for r in at:
      position[r] += 1
    return True

  def _unrolled(
    self,
    heads: list[Item | None],
    sequences: list[tuple[Item, ...]],
    position: list[int],
  ) -> bool:
    """Where the ranks' heads are loops that differ but make as many
    calls (or loops on some ranks, calls on others), and each loop runs
    a number of times XLA knows (`Loop.trips`) a body of calls only: each
    such loop replaced in its rank's sequence by its body that many
    times, and True. A ``scan`` unrolled by 2 on one rank runs half the
    trips of twice the calls: the same calls, in the same order, which a
    loop taken as one step could not match."""
    loops = [h for h in heads if isinstance(h, Loop)]
    if not loops or any(h.trips is None for h in loops):
      return False
    if not all(isinstance(x, Call) for h in loops for x in h.body):
      # A conditional or loop in the body may decide on the carry, whose
      # values differ between the ranks' iterations (a counter that
      # starts at the rank): only the loop's signature compares those.
      return False
    made = {(h.trips or 0) * len(h.body) for h in loops}
    if max(made) > _UNROLLED:
      return False
    wild = {
      self.wildcards[id(c)]
      for h in loops
      for c in h.body
      if id(c) in self.wildcards
    }
    if len(loops) == len(heads) and not wild:
      # (Where one receives from any rank, each iteration's receive may
      # meet another sender, one that ran ahead into its next iteration:
      # a step each would not see it.)
      digests = {h.signature.digest if h.signature else None for h in loops}
      if len(digests) == 1 or len(made) > 1:
        # Alike: a step each. Or of different lengths: a trip count
        # differs, which `_compare_decisions` names.
        return False
    elif not all(h is None or isinstance(h, Loop | Call) for h in heads):
      # (A rank that has made all its calls, None, is no loop to match:
      # two ranks' loops of sends and receives beside it run as their
      # bodies, issue 77's generated corpus.)
      return False
    self.unroll |= wild
    for rank, h in enumerate(heads):
      if isinstance(h, Loop) and h.trips is not None:
        at = position[rank]
        items = sequences[rank]
        sequences[rank] = (*items[:at], *(h.body * h.trips), *items[at + 1 :])
    return True

  def _run_ahead(self, loops: list[Loop]) -> None:
    """The ranks' loops at one step, simulated as one body each, must not
    hold a receive from any source, unless every rank's body makes a
    collective: without one, a sender may run ahead into its next
    iteration, and a receive meet it there, which one body against
    another never shows (`_unrolled` unrolls the loops it can first).

    Raises:
      BeyondTheModel: they do.
    """
    if not any(
      id(c) in self.wildcards for h in loops for c in calls_of(h.body)
    ):
      return
    if all(
      any(isinstance(x, Call) and x.kind == "collective" for x in h.body)
      for h in loops
    ):
      return  # Each iteration meets the others' before the next begins.
    raise BeyondTheModel(
      f"a receive from any source in {label_of(loops[0])}, whose trips XLA "
      "does not know (or whose body holds a loop or conditional) and which "
      "makes no collective: each iteration's receive may meet a sender "
      "that ran ahead into its next iteration, which the cross-rank check "
      "does not follow: it cannot answer"
    )

  def _compare_decisions(self, items: list[Loop] | list[Branch]) -> list:
    """The ranks' loops (or conditionals) at one step must compute their
    decisions alike (`rank_values`): else a constant the decision reads
    (a trip count, a threshold) differs between the ranks' modules, and
    the ranks may run the body a different number of times, or take
    different branches. Each such step is kept in `diverging`."""
    signatures = [item.signature for item in items]
    if any(s is None for s in signatures):
      return list(items)
    digests = {s.digest for s in signatures if s is not None}
    if len(digests) == 1:
      return list(items)
    bases = {s.base for s in signatures if s is not None}
    if isinstance(items[0], Branch) and len(bases) == 1 and "" not in bases:
      # cond(not p, b, a) on one rank and cond(p, a, b) on another decide
      # alike: that rank's two branches are met the other way round.
      flip = signatures[0] is not None and signatures[0].negated
      return [
        item
        if s is None or s.negated == flip or not isinstance(item, Branch)
        else dataclasses.replace(item, branches=item.branches[::-1])
        for item, s in zip(items, signatures, strict=True)
      ]
    leaves = [s.leaves if s is not None else () for s in signatures]
    longest = max(len(x) for x in leaves)
    first = next(
      (
        k
        for k in range(longest)
        if len({x[k] if k < len(x) else None for x in leaves}) > 1
      ),
      None,
    )
    elided = any(rank_values.ELIDED in leaf for x in leaves for leaf in x)
    if first is None and elided:
      said = (
        f"a constant the modules' text leaves out ({rank_values.ELIDED}), "
        "so its values cannot be compared across ranks: dump with "
        "--xla_dump_large_constants in XLA_FLAGS"
      )
    elif first is None:
      said = (
        "a decision the ranks' modules compute differently (the same "
        "constants, in another expression)"
      )
    else:
      each = "; ".join(
        f"rank {r}: {x[first] if first < len(x) else 'nothing'}"
        for r, x in enumerate(leaves)
      )
      said = f"a constant that differs between the ranks' modules ({each})"
    construct: Literal["loop", "conditional"] = (
      "loop" if isinstance(items[0], Loop) else "conditional"
    )
    inner = [
      x
      for item in items[:1]
      for x in (item.body if isinstance(item, Loop) else sum(item.branches, ()))
    ]
    self.diverging.append(
      RankDependent(
        tuple(range(self.count)),
        construct,
        label_of(items[0]).removeprefix(f"{construct} "),
        said,
        tuple(label_of(x) for x in inner),
        items[0].op.location,
      )
    )
    return list(items)

  def _point_to_point(
    self, heads: list[Item | None], advance
  ) -> bool | Mismatch:
    """Completes the sends and receives that meet, and the sendrecvs whose
    peer receives and whose source sends; whether any did, or the
    `Mismatch` of a message that the receive does not take as sent."""
    n = self.count
    for rank, h in enumerate(heads):
      for what, bad, error in (
        ("peer", peers.bad_peer(h), "MPI_ERR_RANK"),
        ("tag", peers.bad_tag(h), "MPI_ERR_TAG"),
      ):
        if bad is not None:
          # MPI checks a call's arguments as the rank makes it: the call
          # aborts whatever its peer does.
          return Mismatch(
            tuple(
              self.rank_call(r, x) if x is not None else None
              for r, x in enumerate(heads)
            ),
            f"the {what}: rank {rank}'s call {bad}, which MPI rejects "
            f"({error}, the program aborts)",
          )
    for rank, h in enumerate(heads):
      if isinstance(h, Call) and h.kind == "send" and h.peer is not None:
        peer = h.peer
        other = heads[peer] if 0 <= peer < n else None
        is_recv = isinstance(other, Call) and other.kind == "recv"
        if is_recv and peers.receives_from(other, rank, h.tag):
          differs = self._message_differs(heads, rank, peer)
          if differs is not None:
            return differs
          self._message_step(heads, sorted((rank, peer)))
          advance([rank, peer])
          return True
    ready: dict[int, set[int]] = {}
    for rank, h in enumerate(heads):
      if not isinstance(h, Call) or h.kind != "sendrecv":
        continue
      peer, source = h.peer, h.source
      if peer is None or source is None:
        continue
      if not (0 <= peer < n and 0 <= source < n):
        continue
      if peers.receives_from(heads[peer], rank, h.tag) and peers.sends_to(
        heads[source], rank, h.source_tag
      ):
        ready[rank] = {peer, source}
    # A partner that is a sendrecv itself must be ready too.
    changed = True
    while changed:
      changed = False
      for rank, partners in list(ready.items()):
        if any(
          peers.kind(heads[o]) == "sendrecv" and o not in ready
          for o in partners
        ):
          del ready[rank]
          changed = True
    if not ready:
      return False
    for rank in ready:
      call = heads[rank]
      assert isinstance(call, Call)
      assert call.peer is not None and call.source is not None
      differs = self._message_differs(heads, rank, call.peer)
      # What a plain send gives this sendrecv is a message too (one from
      # a sendrecv is compared as that one's outgoing message).
      if differs is None and peers.kind(heads[call.source]) == "send":
        differs = self._message_differs(heads, call.source, rank)
      if differs is not None:
        return differs
    group = set(ready)
    for partners in ready.values():
      group |= {p for p in partners if peers.kind(heads[p]) in ("send", "recv")}
    self._message_step(heads, sorted(group))
    advance(sorted(group))
    return True

  def _message_step(self, heads: list[Item | None], ranks: list[int]) -> None:
    """Keeps the point-to-point step of `ranks`' heads in `messages`, for
    `swaps` to tell it from another of one type."""
    calls = tuple(h for r in ranks if isinstance(h := heads[r], Call))
    self.messages.append(
      (
        calls,
        tuple(self.rank_call(r, c) for r, c in zip(ranks, calls, strict=True)),
      )
    )

  def _message_differs(
    self, heads: list[Item | None], sender: int, receiver: int
  ) -> Mismatch | None:
    """A `Mismatch` where what `sender`'s call sends is not what
    `receiver`'s call receives into (element types and counts, as MPI
    matches a message: a longer message aborts with MPI_ERR_TRUNCATE,
    another type reads the bits as that type); None where they agree."""
    send, recv = heads[sender], heads[receiver]
    assert isinstance(send, Call) and isinstance(recv, Call)
    if send.sent == recv.received:
      return None
    calls = tuple(
      self.rank_call(r, h) if r in (sender, receiver) and h else None
      for r, h in enumerate(heads)
    )
    return Mismatch(
      calls,
      f"the message: rank {sender} sends {send.sent or 'nothing'}, and "
      f"rank {receiver} receives it into {recv.received or 'nothing'}",
    )

  def _stuck(self, heads: list[Item | None]) -> Mismatch | Deadlock:
    n = self.count
    self.stuck = list(enumerate(heads))
    waiting = [h for h in heads if h is not None]
    kinds = {
      "call" if isinstance(h, Call) and h.kind == "collective" else type(h)
      for h in waiting
    }
    blocked = tuple(
      None if h is None else self.rank_call(r, h) for r, h in enumerate(heads)
    )
    collective_or_block = all(
      isinstance(h, Loop | Branch)
      or (isinstance(h, Call) and h.kind == "collective")
      for h in waiting
    )
    if collective_or_block and len(kinds) > 1 and len(waiting) == n:
      return Mismatch(
        blocked,
        "one rank is at a collective where another is at a loop or "
        "conditional that holds communicating calls",
      )
    return Deadlock(blocked)


_UNBOUND = object()
_MESSAGES = ("send", "recv", "sendrecv")
_UNROLLED = 4096
"""The most calls a loop's body run its trip count of times may make
for the simulation to unroll it (`Simulation._unrolled`)."""


def swaps(
  steps: list[tuple[tuple[Call, ...], tuple[RankCall, ...]]],
  messages: Sequence[tuple[tuple[Call, ...], tuple[RankCall, ...]]] = (),
  count: int = 0,
) -> tuple[Mismatch | None, tuple[str, ...]]:
  """`origins.undistinguished` over the matched collective steps, then
  the point-to-point ones (`Simulation.messages`, each told by what its
  ranks send): a crossed pair is a `Mismatch` (each rank gets the
  other's data); the others are matched by type only (a sentence
  each). `count`: how many ranks (at least those the steps name)."""
  count = max(
    [count, *(c.rank + 1 for _, names in [*steps, *messages] for c in names)]
  )
  sent: list[tuple[tuple[Call, ...], tuple[RankCall, ...]]] = []
  kinds: list[object] = []
  for calls, names in messages:
    # Told apart by what the step's ranks send (a send or a sendrecv
    # takes part in every step).
    senders = [k for k, c in enumerate(calls) if c.kind in ("send", "sendrecv")]
    if senders:
      sent.append(
        (tuple(calls[k] for k in senders), tuple(names[k] for k in senders))
      )
      kinds.append(origins.message_type([n.rank for n in names], calls))
  families = [(steps, None, True, False), (sent, kinds, False, True)]
  unclear: list[str] = []
  for family, types, alone, by_rank in families:
    found = _swaps(family, types, alone, by_rank, count, unclear)
    if found is not None:
      return found, ()
  if len(unclear) > _SWAPS_SHOWN:
    more = len(unclear) - _SWAPS_SHOWN
    unclear[_SWAPS_SHOWN:] = [
      f"and {more} more pair{'s' * (more != 1)} of calls like these"
    ]
  return None, tuple(unclear)


def _swaps(
  steps: Sequence[tuple[tuple[Call, ...], tuple[RankCall, ...]]],
  types: Sequence[object] | None,
  alone: bool,
  by_rank: bool,
  count: int,
  unclear: list[str],
) -> Mismatch | None:
  """`swaps` over one family of steps (`origins.undistinguished`'s
  `types` and `alone`), adding a sentence to `unclear` for each pair
  matched by type only; `by_rank` names each pair's calls by the
  sending rank (point-to-point steps, whose first call is not rank
  0's)."""
  told: set[tuple[int, int]] = set()
  calls = [c for c, _ in steps]
  for i, j, crossed in origins.undistinguished(calls, types, alone):
    told.add((i, j))
    names = steps[i][1], steps[j][1]
    if crossed is not None:
      one, other = names[0][0], names[0][crossed]
      shown = {one.rank: one, other.rank: other}
      return Mismatch(
        tuple(shown.get(r) for r in range(count)),
        f"the operands: rank {other.rank}'s call {other.index} "
        f"sends what rank {one.rank}'s call {names[1][0].index} sends, and "
        f"its call {names[1][crossed].index} what rank {one.rank}'s call "
        f"{one.index} sends: the two calls are swapped (same "
        "type, so MPI matches them, and each rank gets the other's data)",
      )
    iterations = any(
      a.op == b.op and getattr(a, "execution", 0) == getattr(b, "execution", 0)
      for a, b in zip(steps[i][0], steps[j][0], strict=True)
    )
    if iterations:  # One call of a loop the simulation unrolled.
      why = (
        "rank: a loop that the ranks unroll differently makes them, and an "
        "origin does not follow a value from one iteration to the next"
      )
    elif steps[i][0][0].origin == steps[j][0][0].origin:
      why = (
        "rank: each computes its operands by one expression, in another "
        "execution (a jitted function called twice, or eager calls)"
      )
    elif len(steps[i][0]) == 1:
      why = (
        "rank: they send to one rank, which receives both alike, and no "
        "other rank's operands say which is which"
      )
    else:
      why = "rank: the ranks compute their operands differently"
    unclear.append(
      f"{_pair(names[0][0], names[1][0], by_rank)} "
      f"({names[0][0].label.split(' at ')[0]}) could be swapped on a "
      f"{why}, so nothing tells the two calls apart"
    )
  for swap in origins.argument_swaps(calls, told, types):
    unclear.append(_argument_swap(steps, swap, by_rank))
  return None


def _pair(first: RankCall, second: RankCall, by_rank: bool) -> str:
  """Two calls of a rank, for people: rank 0's as ``calls 1 and 2``."""
  owner = f"rank {first.rank}'s " if by_rank else ""
  return f"{owner}calls {first.index} and {second.index}"


def _argument_swap(
  steps: Sequence[tuple[tuple[Call, ...], tuple[RankCall, ...]]],
  swap: origins.ArgumentSwap,
  by_rank: bool = False,
) -> str:
  """The sentence of `swap`: which operands, which parameters."""
  first, second = steps[swap.i][1][0], steps[swap.j][1][0]
  what = first.label.split(" at ")[0]
  if swap.i == swap.j:
    owner = f"rank {first.rank}'s " if by_rank else ""
    where = (
      f"{owner}call {first.index}'s operands {swap.k} and {swap.m} ({what})"
    )
  else:
    where = f"{_pair(first, second, by_rank)} ({what})"
  return (
    f"{where} could be swapped on a rank: their operands read entry "
    f"parameters {swap.first} and {swap.second}, of one type "
    f"({swap.first.type}), "
    "which a caller may pass the other way round on one rank, so nothing "
    "tells the two apart"
  )


_SWAPS_SHOWN = 5
"""The pairs matched by type only that a result names; a jitted step
called a thousand times makes half a million such pairs."""


def rank_dependent_constructs(
  programs: list[RankItems],
) -> tuple[RankDependent, ...]:
  found: dict[tuple[str, str, str], tuple[list[int], RankDependent]] = {}

  def walk(rank: int, items: tuple[Item, ...]) -> None:
    for item in items:
      if isinstance(item, Call):
        continue
      inner = item.body if isinstance(item, Loop) else sum(item.branches, ())
      if item.decision is not None:
        construct: Literal["loop", "conditional"] = (
          "loop" if isinstance(item, Loop) else "conditional"
        )
        label = label_of(item).removeprefix(f"{construct} ")
        calls = tuple(label_of(x) for x in inner)
        key = (construct, label, item.decision)
        ranks = found.setdefault(
          key,
          (
            [],
            RankDependent(
              (),
              construct,
              label,
              item.decision,
              calls,
              item.op.location,
            ),
          ),
        )[0]
        ranks.append(rank)
      walk(rank, inner)

  for rank, program in enumerate(programs):
    walk(rank, program.items)
  return tuple(
    dataclasses.replace(r, ranks=tuple(ranks)) for ranks, r in found.values()
  )


def simulate(
  sequences: list[tuple[Item, ...]],
) -> tuple[Simulation, Mismatch | Deadlock | None]:
  """The simulation of every matching of the wildcard receives
  (`wildcards.matchings`): the first that ends in a problem, else the
  first that ends well. A matching whose fixed receive is never met did
  not happen so; where none did, the first one's deadlock stands."""
  for _ in range(_UNROLLINGS):
    found = _simulate(sequences)
    if isinstance(found, set):
      # A loop's receive from any rank met one sender in every iteration:
      # again, each iteration's receive on its own.
      sequences = wildcards.unrolled(sequences, found)
      continue
    return found
  raise BeyondTheModel(
    "receives from any source in loops nested more than "
    f"{_UNROLLINGS} deep: the cross-rank check cannot answer"
  )


_UNROLLINGS = 8
"""How many times `simulate` unrolls loops that hold receives from any
source, one level of nesting each time, before it gives up."""


def _simulate(
  sequences: list[tuple[Item, ...]],
) -> tuple[Simulation, Mismatch | Deadlock | None] | set[tuple[int, int]]:
  """`simulate` over `sequences` as they are; or the (rank, place) of
  receives from any source whose loops must be unrolled first."""
  first: tuple[Simulation, Mismatch | Deadlock | None] | None = None
  clean = None
  for matching in wildcards.matchings(sequences):
    simulation = Simulation(len(sequences), matching.place_of())
    stopped = simulation.run(matching.sequences)
    if simulation.unroll:
      return simulation.unroll
    if isinstance(stopped, Deadlock) and matching.said:
      stopped = dataclasses.replace(stopped, matching=matching.said)
    first = first or (simulation, stopped)
    if any(matching.is_fixed(r, h) for r, h in simulation.stuck):
      continue  # That receive met no send this way: not this matching.
    if stopped is not None:
      return simulation, stopped
    clean = clean or (simulation, stopped)
  assert first is not None
  return clean or first
