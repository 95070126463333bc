"""The sanitizer across ranks: each rank's communicating calls, in the
order they ran, and `merge_sanitized_ranks`, which compares the ranks'
sequences and names the first call at which they differ.

Under ``sanitize(ranks=DIR)`` each rank (a process of an ``mpirun``,
``srun`` or ``jax.distributed`` launch; its rank from the launcher's
variables, else ``jax.process_index()``) writes ``DIR/rankR/`` `RECORD`:
the calls of targets whose declaration says they communicate
(``communicates``), in order of start, with each one's target, operand and
result types (its custom call's, from the module the sanitizer compiled)
and the user's file:line. The first block of a process that writes a
folder starts its record anew; later blocks add to it. The watchdog
(``sanitize(watchdog=...)``) writes it too when a call hangs: the calls
that returned so far, then the communicating calls in flight, and its
report beside it (`HANG`).

`merge_sanitized_ranks` reads every rank's record and walks the sequences
in lock step: call k of every rank must have one target and one operand and
result types (a collective of another size, or another collective, at one
step is what makes MPI hang or abort). It names the first call k that
differs, on each rank (a rank with no call k says so), or says the ranks
agree, and gathers the hung ranks' watchdog reports. Each record carries
its launch's id (`launch.launch_id`), so a record an earlier
launch left is named stale, never compared.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from entangle_jax._src import access_policy
from entangle_jax._src.targets import sources
from entangle_jax.testing._sanitize.launch import launch_id, rank_and_size

if TYPE_CHECKING:
  from entangle_jax._src.targets.communication import Communication
  from entangle_jax.testing._sanitize.columns import NativeColumns
  from entangle_jax.testing._sanitize.sites import CallSite
  from entangle_jax.testing._sanitize.watchdog import CallInFlight

RECORD = "sanitizer_calls.json"
"""A rank's record, in its folder ``DIR/rankR``."""
HANG = "sanitizer_hang.txt"
"""The rank's watchdog reports, beside its record."""
FORMAT = 1
"""The record's format (its ``"format"`` key)."""
RUNNING = "running"
"""A record written when a block began: the block's calls are not in it
(a rank whose record stays so died in the block, or is still in it)."""
ENDED = "ended"
"""A record written when a block ended: every call returned."""
HUNG = "hung"
"""A record the watchdog wrote: some call had not returned."""


@dataclasses.dataclass(frozen=True)
class SanitizedRankCall:
  """One communicating call of one rank.

  Attributes:
    index: its place in the rank's sequence (0 first).
    target: the FFI target.
    kind: its declaration's kind of communication (``"collective"``, ...).
    signature: its custom call's operand and result types, layouts left
      out (``"(f32[4]) -> f32[4]"``); "" where not known.
    source: the user's file:line ("" where not known).
    place: its place in its program, in words.
    thread: the OS thread that made it.
    start_ns: when it began (the rank's own clock).
    in_flight: it had not returned when the record was written.
    seconds: for a call in flight, how long it had been.
  """

  index: int
  target: str
  kind: str
  signature: str
  source: str
  place: str
  thread: int
  start_ns: int
  in_flight: bool = False
  seconds: float = 0.0
  peer: int | None = None
  """The rank a send sends to, a receive receives from (any rank where
  below 0) or a sendrecv sends to, or None where not declared or not
  known."""
  tag: int | None = None
  """The tag of the call (a sendrecv's send tag), or None where not
  declared (tag 0)."""
  source_rank: int | None = None
  """A sendrecv's source."""
  source_tag: int | None = None
  """A sendrecv's receive tag."""
  root: str = ""
  """The values its declaration says must match on every rank (a
  broadcast's root: ``"root=0"``); "" where none."""

  def matches(self, other: SanitizedRankCall) -> bool:
    """Whether `other` (another rank's call at the same step) is the same
    call: one target, one root, and one signature where both are known."""
    if self.target != other.target or self.root != other.root:
      return False
    return not (self.signature and other.signature) or (
      self.signature == other.signature
    )

  def is_root(self, rank: int) -> bool | None:
    """Whether `rank` is this rooted collective's root (None: it has no
    root)."""
    for part in self.root.split(", "):
      name, _, value = part.partition("=")
      if name == "root":
        try:
          return int(value) == rank
        except ValueError:
          return None
    return None

  def __str__(self) -> str:
    signature = f" {self.signature}" if self.signature else ""
    where = f" at {self.source}" if self.source else ""
    flight = f", IN FLIGHT for {self.seconds:.1f} s" if self.in_flight else ""
    return (
      f"call {self.index}: {self.kind} {self.target}{signature}{where} "
      f"({self.place}, thread {self.thread}){flight}"
    )


@dataclasses.dataclass(frozen=True)
class SanitizedRankRecord:
  """What one rank wrote (`RECORD`).

  Attributes:
    rank, size: the rank and how many the launch has.
    launch: the launch's id ("" where the launcher sets none).
    state: `RUNNING`, `ENDED` or `HUNG`.
    calls: its communicating calls in order of start, those in flight
      last.
    hang: its watchdog's last report ("" where none).
    final: the rank said that it will record no more calls (the pytest
      plugin, at the end of the run).
  """

  rank: int
  size: int
  launch: str
  state: str
  calls: tuple[SanitizedRankCall, ...]
  hang: str = ""
  final: bool = False

  def to_json(self) -> dict[str, Any]:
    """The record as JSON data (`from_json` reads it back)."""
    return {
      "format": FORMAT,
      "rank": self.rank,
      "size": self.size,
      "launch": self.launch,
      "state": self.state,
      "final": self.final,
      "hang": self.hang,
      "calls": [dataclasses.asdict(c) for c in self.calls],
    }

  @classmethod
  def from_json(cls, data: Any, where: str) -> SanitizedRankRecord:
    """The record `data` holds (`where` names it in errors).

    Raises:
      ValueError: `data` is not a record of this format.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
      raise ValueError(
        f"{where}: not an entangle_jax sanitizer rank record of format {FORMAT}"
      )
    try:
      calls = tuple(SanitizedRankCall(**c) for c in data["calls"])
      return cls(
        rank=int(data["rank"]),
        size=int(data["size"]),
        launch=str(data["launch"]),
        state=str(data["state"]),
        calls=calls,
        hang=str(data.get("hang", "")),
        final=bool(data.get("final", False)),
      )
    except (KeyError, TypeError, ValueError) as error:
      raise ValueError(f"{where}: a malformed rank record ({error})") from None


def read_record(path: str | os.PathLike) -> SanitizedRankRecord:
  """The record in file `path`.

  Raises:
    ValueError: it is not JSON, or not a record (the message names it).
    OSError: it cannot be read.
  """
  text = pathlib.Path(path).read_text()
  try:
    data = json.loads(text)
  except json.JSONDecodeError as error:
    raise ValueError(f"{path}: not JSON ({error})") from None
  return SanitizedRankRecord.from_json(data, str(path))


@dataclasses.dataclass(frozen=True)
class SanitizedRankDivergence:
  """The first step at which the ranks' calls differ.

  Attributes:
    index: the step (each rank's call `index`).
    calls: per rank, in rank order, its call `index`; None where it made
      no such call (its sequence ended before).
    ranks: the ranks of `calls`, in order.
  """

  index: int
  calls: tuple[SanitizedRankCall | None, ...]
  ranks: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class SanitizedRanks:
  """The ranks' sequences compared (`merge_sanitized_ranks`).

  Attributes:
    records: the records compared, in rank order.
    divergence: the first step at which they differ; None: they agree
      over every step.
    missing: ranks of the launch without a record.
    stale: ranks whose record is of another launch than rank 0's (left
      out).
    unfinished: ranks whose record was written as a block began
      (`RUNNING`): the process died in the block (an MPI abort), or is
      still in it; their calls are compared as far as they go.
  """

  records: tuple[SanitizedRankRecord, ...]
  divergence: SanitizedRankDivergence | None
  missing: tuple[int, ...] = ()
  stale: tuple[int, ...] = ()
  unfinished: tuple[int, ...] = ()

  @property
  def hung(self) -> tuple[SanitizedRankRecord, ...]:
    """The records of ranks whose watchdog reported a hang."""
    return tuple(r for r in self.records if r.state == HUNG)

  @property
  def blind(self) -> bool:
    """Whether no rank recorded a single communicating call, so that the
    sanitizer saw nothing to compare and nothing is proved (a binding
    whose targets were registered before ``sanitize()`` began, a target
    nobody declared ``communicates``, or XLA's own collectives)."""
    return not any(r.calls for r in self.records)

  @property
  def agree(self) -> bool:
    """Every rank's record is here, of one launch, none hung, at least one
    call was recorded, and their calls agree step by step."""
    return (
      self.divergence is None
      and not self.missing
      and not self.stale
      and not self.unfinished
      and not self.hung
      and not self.blind
    )

  @property
  def status(self) -> int:
    """The exit status ``--sanitized-ranks`` gives this merge, which is 0
    when the ranks agree, 1 when they differ or one hung, 2 when a rank's
    record is missing, stale or unfinished, or no rank recorded any call
    (nothing proved)."""
    if self.divergence is not None or self.hung:
      return 1
    unknown = self.missing or self.stale or self.unfinished or self.blind
    return 2 if unknown or not self.records else 0

  def text(self) -> str:
    """The report: the first divergence (each rank's call) or the
    agreement, what is missing, then each hung rank's watchdog report."""
    n = len(self.records)
    head = f"entangle_jax sanitizer across {n} rank(s): "
    lines = []
    if not self.records:
      lines.append(head + "no rank recorded anything")
    elif self.divergence is not None:
      d = self.divergence
      lines.append(
        head + f"the ranks' communicating calls DIFFER at call {d.index}:"
      )
      for rank, call in zip(d.ranks, d.calls, strict=True):
        if call is None:
          length = len(self._record(rank).calls)
          lines.append(
            f"  rank {rank}: made no call {d.index} (its record ends after "
            f"{length} call(s))"
          )
        else:
          lines.append(f"  rank {rank}: {call}")
      lines.append(
        "  Fix: make every rank issue the same communicating calls in the "
        "same order (entangle or in_program_order orders each rank's own; "
        "a rank-dependent Python path must make the same calls)"
      )
    elif self.blind:
      lines.append(
        head + "no rank recorded a communicating call: NOTHING PROVED. The "
        "sanitizer sees only the calls of targets declared `communicates` "
        "and registered after sanitize() began (import the binding, mpi4jax "
        "say, inside the block or after the plugin starts); XLA's own "
        "collectives are never recorded"
      )
    elif self.unfinished or self.hung:
      lines.append(
        head + "the ranks' communicating calls agree as far as they were "
        "recorded, which proves nothing (a rank did not finish)"
      )
    else:
      steps = len(self.records[0].calls)
      lines.append(
        head + f"the ranks' communicating calls agree: {steps} call(s) on "
        "each rank, step by step (target, operand and result types)"
      )
    if self.unfinished:
      lines.append(
        f"  rank(s) {', '.join(map(str, self.unfinished))} began a sanitize "
        "block that never ended (the process died in it, as in an MPI "
        "abort, or is still running): that block's calls are not recorded"
      )
    if self.missing:
      lines.append(
        f"  no record of rank(s) {', '.join(map(str, self.missing))}: they "
        "were not compared"
      )
    if self.stale:
      lines.append(
        f"  the record of rank(s) {', '.join(map(str, self.stale))} is of "
        "another launch than rank 0's: not compared"
      )
    for record in self.records:
      if not record.hang:
        continue
      if record.state == HUNG:
        lines.append(f"  rank {record.rank} HUNG; its watchdog reported:")
      else:
        lines.append(
          f"  rank {record.rank}: a call was in flight past the watchdog's "
          "limit, and returned later; its watchdog reported:"
        )
      lines += [f"    {line}" for line in record.hang.splitlines()]
    return "\n".join(lines)

  def to_json(self) -> dict[str, Any]:
    """The merge as JSON data: ``status``, ``agree``, the ``divergence``
    (its ``index`` and each rank's call, null for none), ``missing``,
    ``stale``, ``hung`` (ranks) and each rank's ``records``."""
    d = self.divergence
    return {
      "status": self.status,
      "agree": self.agree,
      "divergence": None
      if d is None
      else {
        "index": d.index,
        "calls": [
          {"rank": r, "call": None if c is None else dataclasses.asdict(c)}
          for r, c in zip(d.ranks, d.calls, strict=True)
        ],
      },
      "missing": list(self.missing),
      "stale": list(self.stale),
      "unfinished": list(self.unfinished),
      "hung": [r.rank for r in self.hung],
      "records": [r.to_json() for r in self.records],
    }

  def _record(self, rank: int) -> SanitizedRankRecord:
    return next(r for r in self.records if r.rank == rank)


def merge_rank_records(
  records: Sequence[SanitizedRankRecord],
) -> SanitizedRanks:
  """Compares `records`, one a rank (any order), step by step.

  Raises:
    ValueError: two records name one rank.
  """
  by_rank: dict[int, SanitizedRankRecord] = {}
  for record in records:
    if record.rank in by_rank:
      raise ValueError(f"two records of rank {record.rank}")
    by_rank[record.rank] = record
  ordered = [by_rank[r] for r in sorted(by_rank)]
  if not ordered:
    return SanitizedRanks((), None)
  size = max(r.size for r in ordered)
  missing = tuple(r for r in range(size) if r not in by_rank)
  launch = ordered[0].launch
  stale = tuple(r.rank for r in ordered if r.launch != launch)
  compared = [r for r in ordered if r.launch == launch]
  unfinished = tuple(r.rank for r in compared if r.state == RUNNING)
  divergence = _walk(compared)
  return SanitizedRanks(tuple(ordered), divergence, missing, stale, unfinished)


def _walk(
  compared: list[SanitizedRankRecord],
) -> SanitizedRankDivergence | None:
  """The ranks' calls met as MPI meets them: a send with the receive on
  its peer that accepts it (source and tag, or any), sendrecvs whose
  peers and sources are all at theirs, a collective when every rank is
  at one of one target and root (the root's types may differ from the
  others'). The first step where no rank can go on and some have calls
  left is the divergence, each rank at its next call; None when every
  call was met, or a rank whose block never ended ran out of calls (its
  later calls are not known)."""
  ranks = [r.rank for r in compared]
  at = [0] * len(compared)

  def head(k: int) -> SanitizedRankCall | None:
    calls = compared[k].calls
    return calls[at[k]] if at[k] < len(calls) else None

  where = {rank: k for k, rank in enumerate(ranks)}
  while True:
    heads = [head(k) for k in range(len(compared))]
    if all(h is None for h in heads):
      return None
    if any(
      h is None and r.state == RUNNING
      for h, r in zip(heads, compared, strict=True)
    ):
      return None  # That rank's later calls are not known.
    moved = _point_to_point(heads, ranks, where)
    if moved:
      for k in moved:
        at[k] += 1
      continue
    collectives = all(h is not None and h.kind == "collective" for h in heads)
    if collectives and _collectives_meet(heads, ranks):
      at = [a + 1 for a in at]
      continue
    index = next(h.index for h in heads if h is not None)
    return SanitizedRankDivergence(index, tuple(heads), tuple(ranks))


def _accepts(wanted: int | None, got: int | None) -> bool:
  wanted = 0 if wanted is None else wanted
  got = 0 if got is None else got
  return wanted < 0 or got < 0 or wanted == got


def _point_to_point(
  heads: list[SanitizedRankCall | None], ranks: list[int], where: dict
) -> list[int]:
  """The positions (in `heads`) of a send and the receive it meets, or of
  sendrecvs that all meet; [] when none can."""
  for k, h in enumerate(heads):
    if h is None or h.kind != "send" or h.peer not in where:
      continue
    other = heads[where[h.peer]]
    if (
      other is not None
      and other.kind == "recv"
      and _accepts(other.peer, ranks[k])
      and _accepts(other.tag, h.tag)
    ):
      return [k, where[h.peer]]
  ready = {
    k
    for k, h in enumerate(heads)
    if h is not None
    and h.kind == "sendrecv"
    and h.peer in where
    and h.source_rank in where
  }
  changed = True
  while changed:  # Each one's peer and source must be ready too.
    changed = False
    for k in list(ready):
      h = heads[k]
      assert h is not None
      if where[h.peer] not in ready or where[h.source_rank] not in ready:
        ready.discard(k)
        changed = True
  return sorted(ready)


def _collectives_meet(
  heads: list[SanitizedRankCall | None], ranks: list[int]
) -> bool:
  """Whether every rank's collective is the same call: one target and
  root; one signature among the root's and among the others' (MPI's
  bindings give a root and the others different types)."""
  calls = [h for h in heads if h is not None]
  first = calls[0]
  if any(c.target != first.target or c.root != first.root for c in calls):
    return False
  if first.is_root(ranks[0]) is None:
    return all(first.matches(c) for c in calls)
  roots = [c for c, r in zip(calls, ranks, strict=True) if c.is_root(r)]
  others = [c for c, r in zip(calls, ranks, strict=True) if not c.is_root(r)]
  if len(roots) != 1:
    return False  # The root names no rank of the launch.
  return all(others[0].matches(c) for c in others[1:]) if others else True


_RANK_FOLDER = re.compile(r"rank(\d+)")


def merge_sanitized_ranks(folder: str | os.PathLike) -> SanitizedRanks:
  """Compares the records every rank wrote under `folder` (``sanitize(
  ranks=folder)``: ``folder/rankR/`` `RECORD`); see `merge_rank_records`.

  Raises:
    FileNotFoundError: `folder` is not a folder.
    ValueError: a record is not one (the message names its file).
  """
  root = pathlib.Path(folder)
  if not root.is_dir():
    raise FileNotFoundError(f"{folder}: no such folder of rank records")
  records = []
  for path in sorted(root.iterdir()):
    if _RANK_FOLDER.fullmatch(path.name) and (path / RECORD).is_file():
      records.append(read_record(path / RECORD))
  return merge_rank_records(records)


_SITE = re.compile(r"entangle_jax_sanitize_site\s*=\s*(\d+)")
_LAYOUT = re.compile(r"\{[^{}]*\}")
_lines: dict[int, dict[int, str]] = {}


def site_line(site: CallSite | None) -> str:
  """The HLO line of the custom call at `site`, in the module the
  sanitizer handed XLA (or what XLA made of it); "" where not known."""
  if site is None:
    return ""
  module = site.module
  if module.serial not in _lines:
    found: dict[int, str] = {}
    # The module before optimization; the optimized one where this JAX
    # cannot print that (jax 0.6): the calls keep their operand and result
    # types through optimization, and their site attribute.
    text = module.program_text() or module.text() or ""
    for line in text.splitlines():
      match = _SITE.search(line)
      if match:
        found[int(match.group(1))] = line
    _lines[module.serial] = found
  return _lines[module.serial].get(site.number, "")


def signature(site: CallSite | None) -> str:
  """The operand and result types of the custom call at `site`, layouts
  left out (``"(s32[2], f32[2]) -> s32[2]"``); "" where not known."""
  return _types(site_line(site))


def _declared_values(line: str, c: Communication) -> dict[str, Any]:
  """The peer, tags and matched values (a root) that `c` declares, read
  from the call's attributes in `line` (an operand place is not read)."""
  from entangle_jax.testing._analysis.call_attributes import backend_attributes

  attributes = backend_attributes(line) if line else {}

  def number(place) -> int | None:
    if not isinstance(place, str) or place not in attributes:
      return None
    try:
      return int(attributes[place].strip())
    except ValueError:
      return None

  root = ", ".join(
    f"{p}={attributes.get(p, '?')}" for p in c.match if isinstance(p, str)
  )
  return {
    "peer": number(c.peer),
    "tag": number(c.tag),
    "source_rank": number(c.source),
    "source_tag": number(c.source_tag),
    "root": root,
  }


def _types(line: str) -> str:
  """``(operands) -> result`` of one HLO custom-call line ("" where its
  operand types are not printed)."""
  head, call, _ = line.partition(" custom-call(")
  if not call or "=" not in head:
    return ""
  result = _bare(head.split("=", 1)[1].strip())
  start = line.find("operand_layout_constraints={")
  if start < 0:
    return ""
  start += len("operand_layout_constraints={")
  depth, end = 1, start
  while end < len(line) and depth:
    depth += {"{": 1, "}": -1}.get(line[end], 0)
    end += 1
  operands = _bare(line[start : end - 1])
  return f"({operands}) -> {result}"


def _bare(types: str) -> str:
  """HLO types with their layouts taken out."""
  while True:
    stripped = _LAYOUT.sub("", types)
    if stripped == types:
      return types
    types = stripped


class RankRecorder:
  """This process's record under a folder of rank records.

  Args:
    folder: the folder every rank sees (``sanitize(ranks=...)``).
    rank_size: (rank, size); by default the launcher's variables, else
      JAX's process index and count.
    launch: the launch's id; by default `launch.launch_id` of the
      environment.
  """

  def __init__(
    self,
    folder: str | os.PathLike,
    rank_size: tuple[int, int] | None = None,
    launch: str | None = None,
  ):
    if rank_size is None:
      rank_size = rank_and_size(os.environ)
    if rank_size is None:
      import jax

      rank_size = (jax.process_index(), jax.process_count())
    self.rank_size = rank_size
    self.launch = launch_id(os.environ) if launch is None else launch
    self.folder = pathlib.Path(folder) / f"rank{rank_size[0]}"
    self.calls: list[SanitizedRankCall] = []
    """The communicating calls of the blocks that ended."""
    self.final = False
    self.hang = ""
    """The watchdog's last report in this process ("" where none)."""
    self.folder.mkdir(parents=True, exist_ok=True)
    (self.folder / HANG).unlink(missing_ok=True)

  def block_started(self) -> None:
    """Writes the record of a block under way (`RUNNING`): a rank that
    dies in it (an MPI abort) leaves a record that says so."""
    self._write(RUNNING, [])

  @property
  def path(self) -> pathlib.Path:
    """The record's file."""
    return self.folder / RECORD

  def block_ended(self, native: NativeColumns) -> None:
    """Adds the communicating calls of a block's records `native` (in
    order of start) and writes the record."""
    self.calls += _communicating(native, len(self.calls))
    self._write(ENDED, [])

  def finish(self) -> None:
    """Says that this rank records no more calls (the pytest plugin's
    end of the run)."""
    self.final = True
    self._write(ENDED, [])

  def hung(self, in_flight: list[CallInFlight], report: str) -> None:
    """Writes the record of a hang: the calls so far (the running block's
    too, copied from the logs), then the communicating calls in flight,
    and the watchdog's `report` beside it."""
    from entangle_jax.testing._sanitize import wrapping
    from entangle_jax.testing._sanitize.columns import NativeColumns

    native = wrapping.native()
    raw, operands, values, _ = native.peek()
    so_far = _communicating(
      NativeColumns(raw, native.record_layout, operands, values),
      len(self.calls),
    )
    calls = self.calls + so_far
    for call in in_flight:
      if call.communicates is None:
        continue
      calls.append(
        SanitizedRankCall(
          index=len(calls),
          target=call.target,
          kind=call.communicates.kind,
          signature=signature(call.site),
          source=call.source,
          place=call.place,
          thread=call.thread,
          start_ns=call.start_ns,
          in_flight=True,
          seconds=call.seconds,
          **_declared_values(site_line(call.site), call.communicates),
        )
      )
    with open(self.folder / HANG, "a") as f:
      f.write(report + "\n")
    self.hang = report
    self._write(HUNG, calls[len(self.calls) :])

  def _write(self, state: str, more: list[SanitizedRankCall]) -> None:
    record = SanitizedRankRecord(
      rank=self.rank_size[0],
      size=self.rank_size[1],
      launch=self.launch,
      state=state,
      calls=tuple(self.calls + more),
      hang=self.hang,
      final=self.final,
    )
    # Whole or not at all: rank 0 may read it while it is written.
    partial = self.path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record.to_json(), indent=1))
    os.replace(partial, self.path)


def _communicating(
  native: NativeColumns, first: int
) -> list[SanitizedRankCall]:
  """The calls of `native` whose targets communicate, in order of start,
  numbered from `first`."""
  import numpy as np

  declarations = sources.current()
  kinds = [
    access_policy.communication(declarations, name)
    for name, _, _ in native.targets
  ]
  talking = np.array([k is not None for k in kinds], dtype=bool)
  if not len(native) or not talking.any():
    return []
  rows = np.flatnonzero(talking[native.target])
  out = []
  for k, (row, call) in enumerate(
    zip(rows.tolist(), native.make(rows), strict=True)
  ):
    kind = kinds[int(native.target[row])]
    assert kind is not None
    out.append(
      SanitizedRankCall(
        index=first + k,
        target=call.target,
        kind=kind.kind,
        signature=signature(call.site),
        source=call.site.source if call.site is not None else "",
        place=call.place,
        thread=call.thread,
        start_ns=call.start_ns,
        **_declared_values(site_line(call.site), kind),
      )
    )
  return out


_recorders: dict[pathlib.Path, RankRecorder] = {}


def recorder_for(folder: str | os.PathLike) -> RankRecorder:
  """This process's recorder under `folder`: made (its record started
  anew) by the first block that names the folder, kept for later ones."""
  key = pathlib.Path(folder).resolve()
  if key not in _recorders:
    _recorders[key] = RankRecorder(folder)
  return _recorders[key]
