"""`races_across`: do the ranks of a multi-process program make their
communicating calls in a compatible order? One module per rank in, a
`CrossRankResult` out.

The check, over each rank's `RankProgram`
(`entangle_jax.testing._analysis.ranks`):

1. every loop or conditional that holds a communicating call must decide
   on values the same on every rank (`RankDependent` otherwise: ranks may
   make different numbers of calls, and hang);
2. each rank's communicating calls must be ordered within the rank
   (`UnorderedCalls` otherwise: the order analysis finds no edge, so the
   rank's runtime may make them in either order, a possible deadlock);
3. the ranks' calls are simulated in lock step: a collective completes
   when every rank is at one, and their fingerprints must be equal (kind,
   target or opcode, shapes, reduction, declared `match` values; the
   communicator and the reduction's handle up to a consistent renaming),
   else a `Mismatch` at call k; a blocking send completes with the
   receive it meets on its peer, and a sendrecv when its peer receives
   and its source sends at once. When no rank can go on and some have
   calls left, it is a `Deadlock`, with each rank's blocked call. A loop
   (or a conditional) is one step: the ranks' bodies (each branch) are
   simulated together, since a decision the same on every rank runs them
   the same number of times.

What it assumes: every communicator spans all the ranks given; a send
blocks until its receive (as MPI may, for messages too big to buffer);
a peer or tag below 0 is MPI's ``ANY_SOURCE`` or ``ANY_TAG``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._analysis import (
  communicators,
  origins,
  peers,
  rank_values,
  wildcards,
)
from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._analysis.ranks import (
  Branch,
  Call,
  Item,
  Loop,
  RankProgram,
  Unordered,
  calls_of,
)
from entangle_jax.testing._analysis.same_module import ModuleIdentity
from entangle_jax.testing._findings import rank_findings as kinds
from entangle_jax.testing._hlo.module_text import CompiledModule


class RankItems(Protocol):
  """What the check reads of a rank: a `RankProgram`, or a rank's
  executions concatenated (`rank_sequences`)."""

  @property
  def items(self) -> tuple[Item, ...]: ...
  @property
  def unordered(self) -> Sequence[Unordered]: ...


Verdict = Literal[
  "proved",
  "mismatch",
  "deadlock",
  "rank-dependent",
  "matched-by-type",
  "unseen-communicators",
]


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


@dataclasses.dataclass(frozen=True)
class CrossRankResult:
  """What `races_across` found. `verdict` is the first of: a collective
  under rank-dependent control, calls a rank may make in either order (a
  possible deadlock), a mismatch, a deadlock; else ``"proved"``. Every
  finding is kept in its field.

  Attributes:
    verdict: ``"proved"``, ``"rank-dependent"``, ``"deadlock"``,
      ``"mismatch"``, or, proving nothing and finding nothing,
      ``"unseen-communicators"`` or ``"matched-by-type"``.
    ranks: how many ranks were compared.
    matched: the steps every rank agreed on, in order (all of them when
      proved; up to the problem otherwise).
    mismatch: where the ranks' calls differ, if they do.
    deadlock: each rank's blocked call, if the simulation stopped.
    rank_dependent: loops and conditionals that decide on rank-local
      values and hold communicating calls.
    unordered: pairs of a rank's communicating calls that nothing orders.
  """

  verdict: Verdict
  ranks: int
  matched: tuple[MatchedStep, ...] = ()
  mismatch: Mismatch | None = None
  deadlock: Deadlock | None = None
  rank_dependent: tuple[RankDependent, ...] = ()
  unordered: tuple[UnorderedCalls, ...] = ()
  by_type_only: tuple[str, ...] = ()
  """Pairs of matched calls of one type that nothing tells apart (their
  operands' origins differ between ranks): the verdict is then
  ``"matched-by-type"``, not proved."""
  communicators: tuple[str, ...] = ()
  """Why the ranks' communicators cannot be matched
  (`communicators.unseen`: a rank's calls use several, or one the module
  does not show): the verdict is then ``"unseen-communicators"``."""

  @property
  def proved(self) -> bool:
    """Whether the ranks' calls match, in an order each rank keeps."""
    return self.verdict == "proved"

  @property
  def status(self) -> int:
    """The ``--ranks`` command's exit status: 0 when proved, 2 when
    matched by type only or on communicators not seen (nothing proved,
    nothing found), else 1."""
    if self.proved:
      return 0
    unproved = ("matched-by-type", "unseen-communicators")
    return 2 if self.verdict in unproved else 1

  def text(self) -> str:
    """The report, for people."""
    return format_result(self)

  def __str__(self) -> str:
    return self.text()

  def to_json(self) -> dict[str, Any]:
    """The result as JSON-ready data (`dataclasses.asdict`, and the
    status)."""
    data = dataclasses.asdict(self)
    data["status"] = self.status
    return data


def _fix(kind: kinds.RankKind) -> str:
  return f"Fix: {kind.fix}"


def format_result(result: CrossRankResult) -> str:
  """`CrossRankResult.text`: the verdict's paragraph first, then every
  other finding."""
  lines: list[str] = []
  if result.proved:
    steps = len(result.matched)
    lines.append(
      f"Proved: the {result.ranks} rank{'s' * (result.ranks != 1)} make "
      f"{steps} communicating "
      f"call{'s' * (steps != 1)} in one order, each rank's ordered."
    )
    for n, step in enumerate(result.matched, 1):
      lines.append(f"  {n}. {_step_text(step)}")
    return "\n".join(lines)
  if result.verdict == "unseen-communicators":
    lines.append(
      f"NOT proved: the {result.ranks} ranks' calls match, but on "
      "communicators the modules do not show:"
    )
    lines += [f"  {sentence}" for sentence in result.communicators]
    return "\n".join(lines)
  if result.verdict == "matched-by-type":
    steps = len(result.matched)
    lines.append(
      f"NOT proved: the {result.ranks} ranks make {steps} communicating "
      "calls that match, but matched by type only:"
    )
    lines += [f"  {sentence}" for sentence in result.by_type_only]
    lines.append(
      "  MPI matches calls by count and type, so a swap of two such calls "
      "runs, with each rank's data in the other's call. Compute their "
      "operands alike on every rank, or give them different types."
    )
    for n, step in enumerate(result.matched, 1):
      lines.append(f"  {n}. {_step_text(step)}")
    return "\n".join(lines)
  if result.rank_dependent:
    lines.append(
      "Rank-dependent: communicating calls sit under a loop or conditional "
      "whose decision may differ between ranks, so ranks may make "
      f"different numbers of them. [{kinds.RANK_DEPENDENT.code}]"
    )
    for r in result.rank_dependent:
      ranks = ", ".join(str(k) for k in r.ranks)
      lines.append(f"  {r.construct} {r.label} (ranks {ranks})")
      lines.append(f"    decides on {r.depends_on}")
      for call in r.calls:
        lines.append(f"    holds {call}")
    lines.append(_fix(kinds.RANK_DEPENDENT))
  if result.unordered:
    lines.append(
      "Possible deadlock: a rank may make these communicating calls in "
      "either order (nothing orders them), and another rank in the other. "
      f"[{kinds.POSSIBLE_DEADLOCK.code}]"
    )
    for u in result.unordered:
      lines.append(f"  rank {u.rank}: {u.first}")
      lines.append(f"          and {u.second}")
    lines.append(_fix(kinds.POSSIBLE_DEADLOCK))
  if result.mismatch is not None:
    m = result.mismatch
    index = next((c.index for c in m.calls if c is not None), 0)
    lines.append(
      f"Mismatch at call {index}: the ranks make different calls. "
      f"[{kinds.MISMATCH.code}]"
    )
    for rank, call in enumerate(m.calls):
      lines.append(
        f"  {call}" if call is not None else f"  rank {rank}: no more calls"
      )
    lines.append(f"  differs: {m.differs}")
    lines.append(_fix(kinds.MISMATCH))
  if result.deadlock is not None:
    lines.append(f"Deadlock: no rank can go on. [{kinds.DEADLOCK.code}]")
    if result.deadlock.matching:
      lines.append(f"  when {result.deadlock.matching}:")
    for rank, call in enumerate(result.deadlock.blocked):
      lines.append(
        f"  rank {rank}: blocked in call {call.index}: {call.label}"
        if call is not None
        else f"  rank {rank}: has made all its calls"
      )
    lines.append(_fix(kinds.DEADLOCK))
  if result.matched:
    lines.append(f"Matched before that: {len(result.matched)} step(s).")
  return "\n".join(lines)


def _step_text(step: MatchedStep) -> str:
  labels = {c.label for c in step.calls}
  if len(labels) == 1 and len(step.calls) > 1:
    return f"{step.calls[0].label} (every rank)"
  return "; ".join(f"rank {c.rank}: {c.label}" for c in step.calls)


# The check --------------------------------------------------------------


def _label(item: Item) -> str:
  if isinstance(item, Call):
    return item.label()
  construct = "loop" if isinstance(item, Loop) else "conditional"
  where = item.op.location
  return f"{construct} %{item.op.name}" + (f" at {where}" if where else "")


def _op_label(op: Op) -> str:
  where = op.location or "an unknown line"
  return f"{op.target or op.instruction.opcode} (%{op.name}) at {where}"


class _Simulation:
  def __init__(self, count: int):
    self.count = count
    self.calls_made = [0] * count
    self.matched: list[MatchedStep] = []
    self.collectives: list[tuple[tuple[Call, ...], tuple[RankCall, ...]]] = []
    """Each collective step matched: every rank's call, as reports name it."""
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
      rank, self.calls_made[rank] + offset, _label(item), location
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
      if all(isinstance(h, Loop) for h in heads):
        loops = [h for h in heads if isinstance(h, Loop)]
        self._compare_decisions(loops)
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
      return self._stuck(heads)

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
        _label(items[0]).removeprefix(f"{construct} "),
        said,
        tuple(_label(x) for x in inner),
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
      if isinstance(h, Call) and h.kind == "send" and h.peer is not None:
        peer = h.peer
        other = heads[peer] if 0 <= peer < n else None
        is_recv = isinstance(other, Call) and other.kind == "recv"
        if is_recv and peers.receives_from(other, rank, h.tag):
          differs = self._message_differs(heads, rank, peer)
          if differs is not None:
            return differs
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
      assert isinstance(call, Call) and call.peer is not None
      differs = self._message_differs(heads, rank, call.peer)
      if differs is not None:
        return differs
    group = set(ready)
    for partners in ready.values():
      group |= {p for p in partners if peers.kind(heads[p]) in ("send", "recv")}
    advance(sorted(group))
    return True

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


def _swaps(
  steps: list[tuple[tuple[Call, ...], tuple[RankCall, ...]]],
) -> tuple[Mismatch | None, tuple[str, ...]]:
  """`origins.undistinguished` over the matched collective steps: a
  crossed pair is a `Mismatch` (each rank gets the other's data); the
  others are matched by type only (a sentence each)."""
  unclear: list[str] = []
  for i, j, crossed in origins.undistinguished([c for c, _ in steps]):
    names = steps[i][1], steps[j][1]
    if crossed is not None:
      return Mismatch(
        tuple(
          names[0][r] if r in (0, crossed) else None
          for r in range(len(names[0]))
        ),
        f"the operands: rank {crossed}'s call {names[0][crossed].index} "
        f"sends what rank 0's call {names[1][0].index} sends, and its "
        f"call {names[1][crossed].index} what rank 0's call "
        f"{names[0][0].index} sends: the two calls are swapped (same "
        "type, so MPI matches them, and each rank gets the other's data)",
      ), ()
    unclear.append(
      f"calls {names[0][0].index} and {names[1][0].index} "
      f"({names[0][0].label.split(' at ')[0]}) could be swapped on a "
      + (
        "rank: each computes its operands by one expression, in another "
        "execution (a jitted function called twice, or eager calls), so "
        "nothing tells the two calls apart"
        if steps[i][0][0].origin == steps[j][0][0].origin
        else "rank: the ranks compute their operands differently, so "
        "nothing tells the two calls apart"
      )
    )
  if len(unclear) > _SWAPS_SHOWN:
    more = len(unclear) - _SWAPS_SHOWN
    unclear[_SWAPS_SHOWN:] = [
      f"and {more} more pair{'s' * (more != 1)} of calls like these"
    ]
  return None, tuple(unclear)


_SWAPS_SHOWN = 5
"""The pairs matched by type only that a result names; a jitted step
called a thousand times makes half a million such pairs."""


def _rank_dependent(programs: list[RankItems]) -> tuple[RankDependent, ...]:
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
        label = _label(item).removeprefix(f"{construct} ")
        calls = tuple(_label(x) for x in inner)
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


def _program(
  module: CompiledModule | os.PathLike[str],
  declarations: Declarations | None,
  rank: int,
) -> RankProgram:
  if isinstance(module, os.PathLike):
    module = pathlib.Path(module).read_text()
  try:
    return RankProgram(module, declarations)
  except (TypeError, ValueError) as error:
    raise type(error)(f"races_across: rank {rank}: {error}") from None


def races_across(
  modules: Sequence[CompiledModule | os.PathLike[str]],
  *,
  declarations: Declarations | None = None,
) -> CrossRankResult:
  """Whether the ranks of a multi-process program make their communicating
  calls in a compatible order.

  Takes one module per rank, in rank order, and checks, as
  ``docs/multi_process.md`` says: no collective under a loop or
  conditional that decides on a rank-local value; each rank's
  communicating calls ordered within the rank; the ranks' calls matched
  step by step (collectives by fingerprint; blocking sends with their
  receives), without a deadlock. Communicating calls are XLA's
  collectives and the targets declared to communicate (``communicates``
  in a declaration; mpi4jax's are shipped).

  Args:
    modules: per rank, a ``jax.stages.Compiled``, a ``jax.stages.Lowered``
      (compiled here), the optimized HLO text, or the path of a dumped
      module's file (``*after_optimizations.txt``).
    declarations: what the targets do; those in effect by default.

  Returns:
    A `CrossRankResult`: its ``verdict`` is ``"proved"`` or names the first
    problem; ``text()`` renders it.

  Raises:
    TypeError: `modules` is not a sequence, or holds something else.
    ValueError: fewer than one module, a module the analysis cannot read,
      or a send's peer or tag that is not a constant; the message names the
      rank.
  """
  if isinstance(modules, str | bytes) or not isinstance(modules, Sequence):
    raise TypeError(
      "races_across: modules must be a list with one module per rank, not "
      f"{type(modules).__name__}"
    )
  if not modules:
    raise ValueError("races_across: give one module per rank")
  programs = [_program(m, declarations, rank) for rank, m in enumerate(modules)]
  return check_programs(programs)


def _simulate(
  sequences: list[tuple[Item, ...]],
) -> tuple[_Simulation, Mismatch | Deadlock | None]:
  """The simulation of every matching of the wildcard receives
  (`wildcards.matchings`): the first that ends in a problem, else the
  first that ends well. A matching whose fixed receive is never met did
  not happen so; where none did, the first one's deadlock stands."""
  first: tuple[_Simulation, Mismatch | Deadlock | None] | None = None
  clean = None
  for matching in wildcards.matchings(sequences):
    simulation = _Simulation(len(sequences))
    stopped = simulation.run(matching.sequences)
    if isinstance(stopped, Deadlock) and matching.said:
      stopped = dataclasses.replace(stopped, matching=matching.said)
    first = first or (simulation, stopped)
    stuck = {(r, h.op.name) for r, h in simulation.stuck if h is not None}
    if stuck & matching.fixed:
      continue  # That receive met no send this way: not this matching.
    if stopped is not None:
      return simulation, stopped
    clean = clean or (simulation, stopped)
  assert first is not None
  return clean or first


def check_programs(programs: Sequence[RankItems]) -> CrossRankResult:
  """`races_across` over modules already read, one per rank (or each
  rank's executions, `rank_sequences.check_executions`)."""
  programs = list(programs)
  rank_dependent = _rank_dependent(programs)
  unordered = tuple(
    UnorderedCalls(
      rank,
      _op_label(u.first),
      _op_label(u.second),
      u.first.location,
      u.second.location,
    )
    for rank, p in enumerate(programs)
    for u in p.unordered
  )
  simulation, stopped = _simulate([p.items for p in programs])
  rank_dependent += tuple(simulation.diverging)
  by_type_only: tuple[str, ...] = ()
  if stopped is None:
    stopped, by_type_only = _swaps(simulation.collectives)
  mismatch = stopped if isinstance(stopped, Mismatch) else None
  deadlock = stopped if isinstance(stopped, Deadlock) else None
  verdict: Verdict = "matched-by-type" if by_type_only else "proved"
  unseen = communicators.unseen([tuple(calls_of(p.items)) for p in programs])
  if unseen:
    verdict = "unseen-communicators"
  if rank_dependent:
    verdict = "rank-dependent"
  elif unordered:
    verdict = "deadlock"
  elif mismatch is not None:
    verdict = "mismatch"
  elif deadlock is not None:
    verdict = "deadlock"
  return CrossRankResult(
    verdict,
    len(programs),
    tuple(simulation.matched),
    mismatch,
    deadlock,
    rank_dependent,
    unordered,
    by_type_only,
    unseen,
  )
