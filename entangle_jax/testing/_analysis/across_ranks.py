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
a peer of -1 or -2 is MPI's ``PROC_NULL`` or a receive's ``ANY_SOURCE``
(by the library); a receive's tag of -1 is ``ANY_TAG``; another peer or
tag below 0 aborts (a `Mismatch`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from entangle_jax._src import reason_words as kinds
from entangle_jax._src.targets.declaration import Declarations
from entangle_jax.testing._analysis import communicators, rank_groups
from entangle_jax.testing._analysis.communicators import Layout
from entangle_jax.testing._analysis.rank_matching import (
  Deadlock,
  MatchedStep,
  Mismatch,
  RankCall,
  RankDependent,
  RankItems,
  UnorderedCalls,
  op_label,
  rank_dependent_constructs,
  simulate,
  swaps,
)
from entangle_jax.testing._analysis.ranks import RankProgram, calls_of
from entangle_jax.testing._hlo.module_text import CompiledModule

__all__ = [
  "CrossRankResult",
  "Deadlock",
  "MatchedStep",
  "Mismatch",
  "RankCall",
  "RankDependent",
  "RankItems",
  "UnorderedCalls",
  "check_programs",
  "format_result",
  "races_across",
]


Verdict = Literal[
  "proved",
  "mismatch",
  "deadlock",
  "rank-dependent",
  "matched-by-type",
  "unseen-communicators",
]


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
  does not show, or one whose layout matters and is not known to be the
  world's): the verdict is then ``"unseen-communicators"``."""

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
      "communicators whose ranks, or numbering, the modules do not show:"
    )
    lines += [f"  {sentence}" for sentence in result.communicators]
    return "\n".join(lines)
  if result.verdict == "matched-by-type":
    steps = len(result.matched)
    lines.append(
      f"NOT proved: the {result.ranks} ranks make {steps} communicating "
      f"call{'s' * (steps != 1)} that match{'es' * (steps == 1)}, but "
      "matched by type only:"
    )
    lines += [f"  {sentence}" for sentence in result.by_type_only]
    lines.append(
      "  MPI matches calls by count and type, so a swap of two such calls "
      "runs, with each rank's data in the other's call. Compute their "
      "operands alike on every rank, or give them different types (or, "
      "for sends, different tags that each receive names)."
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


def _program(
  module: CompiledModule | os.PathLike[str],
  declarations: Declarations | None,
  rank: int,
) -> RankProgram:
  if isinstance(module, str) and "\n" not in module.strip():
    module = _module_file(module, rank)
  if isinstance(module, os.PathLike):
    module = pathlib.Path(module).read_text()
  try:
    return RankProgram(module, declarations, rank=rank)
  except (TypeError, ValueError) as error:
    # The same error, its message prefixed: made anew, an error that
    # wraps its argument in advice (NotScheduledError) said it twice.
    error.args = (f"races_across: rank {rank}: {error}", *error.args[1:])
    raise


def _module_file(text: str, rank: int) -> str | pathlib.Path:
  """A one-line str given for rank `rank`: the path of a dumped module's
  file where one exists (read as a ``pathlib.Path`` would be), else the
  text as it is, if it is HLO.

  Raises:
    ValueError: neither HLO nor an existing file, naming it.
  """
  if pathlib.Path(text).is_file():
    return pathlib.Path(text)
  if text.lstrip().startswith("HloModule"):
    return text
  raise ValueError(
    f"races_across: rank {rank}: modules[{rank}] is {text!r}, which is "
    "neither a module's HLO text nor an existing file: pass the text, a "
    "jax.stages.Compiled, or the path of a dumped module's file "
    "(*after_optimizations.txt)"
  )


def races_across(
  modules: Sequence[CompiledModule | os.PathLike[str]],
  *,
  declarations: Declarations | None = None,
  communicators: Sequence[Mapping[int, Sequence[int]]] | None = None,
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
      module's file (``*after_optimizations.txt``; a ``pathlib.Path``, or
      a str naming an existing file).
    declarations: what the targets do; those in effect by default.
    communicators: per rank, in rank order, the layout of each
      communicator its calls use: ``{handle: world_ranks}``, with
      ``handle`` the value the module holds (mpi4py's ``comm.handle``,
      which mpi4jax passes) and ``world_ranks`` the ``MPI.COMM_WORLD``
      rank of each of the communicator's ranks, in its order
      (``comm.Get_group().Translate_ranks(range(comm.Get_size()),
      MPI.COMM_WORLD.Get_group())``). Needed where the numbering matters:
      a send's or receive's peer on a declared communicator, or a rank
      that also makes calls on no declared communicator. Without it,
      those are not proved (``"unseen-communicators"``);
      `record_executions` records it for ``--ranks``.

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
  return check_programs(programs, _layouts(communicators, len(programs)))


def _layouts(
  given: Sequence[Mapping[int, Sequence[int]]] | None, ranks: int
) -> list[dict[int, Layout]] | None:
  """`races_across`'s `communicators`, checked: one mapping a rank, of
  int handles to world ranks."""
  if given is None:
    return None
  where = "races_across: communicators"
  if isinstance(given, str | bytes | Mapping) or not isinstance(
    given, Sequence
  ):
    raise TypeError(
      f"{where} must be a list with one mapping per rank, not "
      f"{type(given).__name__}"
    )
  if len(given) != ranks:
    raise ValueError(
      f"{where} has {len(given)} entries for {ranks} ranks: give one "
      "mapping per rank, in rank order"
    )
  out = []
  for rank, mapping in enumerate(given):
    if not isinstance(mapping, Mapping):
      raise TypeError(
        f"{where}[{rank}] must map handles to world ranks, not "
        f"{type(mapping).__name__}"
      )
    layouts: dict[int, Layout] = {}
    for handle, ranks_of in mapping.items():
      if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"{where}[{rank}]: the handle {handle!r} is not an int")
      if isinstance(ranks_of, str | bytes) or not isinstance(
        ranks_of, Sequence | range
      ):
        raise TypeError(
          f"{where}[{rank}][{handle}] must be a sequence of world ranks, "
          f"not {type(ranks_of).__name__}"
        )
      world = tuple(ranks_of)
      if any(isinstance(r, bool) or not isinstance(r, int) for r in world):
        raise TypeError(
          f"{where}[{rank}][{handle}] holds something other than int ranks: "
          f"{list(world)!r}"
        )
      if not world or len(set(world)) != len(world) or min(world) < 0:
        raise ValueError(
          f"{where}[{rank}][{handle}]: {list(world)!r} is not a layout (each "
          "world rank at most once, none negative, at least one)"
        )
      layouts[handle] = world
    out.append(layouts)
  return out


def check_programs(
  programs: Sequence[RankItems],
  layouts: Sequence[Mapping[int, Layout]] | None = None,
) -> CrossRankResult:
  """`races_across` over modules already read, one per rank (or each
  rank's executions, `rank_sequences.check_executions`); `layouts` holds
  each rank's known communicator layouts (`communicators.Layout`)."""
  programs = list(programs)
  split = communicators.groups(
    [tuple(calls_of(p.items)) for p in programs], layouts
  )
  if split is not None:
    # Groups on communicators of their own: each checked alone.
    return _verdict(
      len(programs), **rank_groups.check_groups(programs, split, check_programs)
    )
  rank_dependent = rank_dependent_constructs(programs)
  unordered = tuple(
    UnorderedCalls(
      rank,
      op_label(u.first),
      op_label(u.second),
      u.first.location,
      u.second.location,
    )
    for rank, p in enumerate(programs)
    for u in p.unordered
  )
  # Peers on a communicator that numbers the ranks otherwise, as world
  # ranks: the simulation's.
  simulation, stopped = simulate(
    communicators.translated([p.items for p in programs], layouts)
  )
  rank_dependent += tuple(simulation.diverging)
  by_type_only: tuple[str, ...] = ()
  if stopped is None:
    stopped, by_type_only = swaps(
      simulation.collectives, simulation.messages, len(programs)
    )
  return _verdict(
    len(programs),
    matched=tuple(simulation.matched),
    mismatch=stopped if isinstance(stopped, Mismatch) else None,
    deadlock=stopped if isinstance(stopped, Deadlock) else None,
    rank_dependent=rank_dependent,
    unordered=unordered,
    by_type_only=by_type_only,
    communicators=communicators.unseen(
      [tuple(calls_of(p.items)) for p in programs], layouts
    ),
  )


def _verdict(ranks: int, **found: Any) -> CrossRankResult:
  """The result of what was `found` (`CrossRankResult`'s fields), its
  verdict the first problem, as `CrossRankResult` says."""
  verdict: Verdict = "matched-by-type" if found["by_type_only"] else "proved"
  if found["communicators"]:
    verdict = "unseen-communicators"
  if found["rank_dependent"]:
    verdict = "rank-dependent"
  elif found["unordered"]:
    verdict = "deadlock"
  elif found["mismatch"] is not None:
    verdict = "mismatch"
  elif found["deadlock"] is not None:
    verdict = "deadlock"
  return CrossRankResult(verdict, ranks, **found)
