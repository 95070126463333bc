"""What the cross-rank check (`entangle_jax.testing.races_across`, the
command's ``--ranks``) found, as plain records: the emitters write every
format of a ``--ranks`` run from these alone.

Each problem is a `RankFinding` of one `RankKind`: a collective under
rank-dependent control, two calls of one rank that nothing orders (a
possible deadlock), a mismatch at call k, a deadlock. A kind has a stable
code in the ``EJ1xx`` range, apart from the single-process causes
(`causes.CAUSES`, ``EJ0xx``) so that neither table's next code can take
the other's, and the fix that every format says. A finding names the
ranks' calls (`RankSite`), each with the user's file and line where the
module recorded them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

FIX_RANK_DEPENDENT = (
  "reduce the decision across ranks first (an allreduce of the "
  "predicate or residual, whose result every rank shares), or hoist the "
  "collective out of the branch or loop."
)
FIX_UNORDERED = (
  "order them: entangle the later call's operand with the earlier "
  "call's result (entangle_jax.entangle), or wrap the function in "
  "entangle_jax.in_program_order (it orders declared native calls and "
  "JAX's collectives)."
)
FIX_MISMATCH = (
  "make every rank issue the same communicating calls, with the "
  "same shapes, in the same order. Ranks that take different Python "
  "paths compile different programs: this check reports them, no "
  "transform can fix them."
)
FIX_DEADLOCK = (
  "order the calls so that each send meets its receive (one rank "
  "receives first), or exchange with one sendrecv."
)


@dataclasses.dataclass(frozen=True)
class RankKind:
  """One kind of cross-rank problem: its code, what it means, its fix."""

  code: str
  """Stable across versions: what tools key on (SARIF's ``ruleId``)."""
  verdict: str
  """``rank-dependent``, ``possible-deadlock``, ``mismatch`` or
  ``deadlock``."""
  name: str
  """A short identifier (SARIF's rule ``name``)."""
  summary: str
  """One sentence: what the problem is."""
  fix: str
  """What to do, as every format says it after ``Fix:``."""


RANK_DEPENDENT = RankKind(
  "EJ101",
  "rank-dependent",
  "collective-under-rank-dependent-control",
  "A loop or conditional that holds communicating calls decides on a "
  "value that may differ between ranks, so ranks may make different "
  "numbers of calls and hang.",
  FIX_RANK_DEPENDENT,
)
POSSIBLE_DEADLOCK = RankKind(
  "EJ102",
  "possible-deadlock",
  "communicating-calls-unordered",
  "Two communicating calls of one rank that nothing orders: the rank may "
  "make them in either order, and another rank in the other.",
  FIX_UNORDERED,
)
MISMATCH = RankKind(
  "EJ103",
  "mismatch",
  "ranks-call-differently",
  "The ranks reach different communicating calls at one step (kind, "
  "target, shapes, reduction, declared values or communicator), or "
  "compiled different communicating modules.",
  FIX_MISMATCH,
)
DEADLOCK = RankKind(
  "EJ104",
  "deadlock",
  "ranks-deadlock",
  "No rank can go on and some have calls left: each waits for a call no "
  "other rank makes.",
  FIX_DEADLOCK,
)

RANK_KINDS: tuple[RankKind, ...] = (
  RANK_DEPENDENT,
  POSSIBLE_DEADLOCK,
  MISMATCH,
  DEADLOCK,
)
"""Every kind, in the order a report gives them (the order of
`CrossRankResult.verdict`'s precedence)."""

BY_CODE = {kind.code: kind for kind in RANK_KINDS}


def markdown() -> str:
  """The kinds' table, for ``docs/multi_process.md``."""
  lines = ["| Code | Name | The problem |", "|---|---|---|"]
  lines += [f"| {k.code} | `{k.name}` | {k.summary} |" for k in RANK_KINDS]
  return "\n".join(lines) + "\n"


def split_location(location: str | None) -> tuple[str | None, int | None]:
  """``path:line`` as (path, line); (None, None) for None, and (the text,
  None) for text without a line number after its last colon."""
  if location is None:
    return None, None
  path, _, line = location.rpartition(":")
  if not path or not line.isdigit():
    return location, None
  return path, int(line)


@dataclasses.dataclass(frozen=True)
class RankSite:
  """One rank's part in a finding: its call, loop or conditional (or that
  it has made all its calls), and where the user's code made it."""

  rank: int
  what: str
  """In words: ``call 1: collective all-reduce (f32[2]) at x.py:12``."""
  path: str | None = None
  """The user's file, if the module records it (or the module file)."""
  line: int | None = None

  @property
  def location(self) -> str | None:
    """``path:line``, the path alone, or None."""
    if self.path is None:
      return None
    return self.path if self.line is None else f"{self.path}:{self.line}"


@dataclasses.dataclass(frozen=True)
class RankFinding:
  """One problem the cross-rank check found in one module (or between the
  ranks' lists of modules)."""

  kind: RankKind
  headline: str
  """One clause: ``Mismatch at call 1: the ranks make different calls``."""
  sites: tuple[RankSite, ...]
  """The ranks' calls it names, in rank order."""
  detail: str = ""
  """What differs, or what a decision depends on; empty when nothing."""

  @property
  def code(self) -> str:
    return self.kind.code

  @property
  def fix(self) -> str:
    return self.kind.fix


FOUND = frozenset({"rank-dependent", "mismatch", "deadlock"})
"""The verdicts that are a problem found (the others: ``proved``, and
``matched-by-type`` and ``unseen-communicators``, which prove nothing and
find nothing)."""


@dataclasses.dataclass(frozen=True)
class RankModule:
  """One communicating module, compiled by every rank and checked across
  them; or, with `name` None, the ranks' lists of modules that differ."""

  name: str | None
  files: tuple[str, ...]
  """Each rank's module file (each rank's dump folder when `name` is
  None)."""
  verdict: str
  """``CrossRankResult.verdict``: ``proved``, ``rank-dependent``,
  ``deadlock`` or ``mismatch``."""
  findings: tuple[RankFinding, ...]
  report: str
  """The report for people (`CrossRankResult.text`)."""
  data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  """Everything the check found, JSON-ready (`CrossRankResult.to_json`)."""
  steps: int = 0
  """Communicating steps every rank agreed on."""

  @property
  def proved(self) -> bool:
    """Whether the ranks' calls match, in an order each rank keeps."""
    return self.verdict == "proved"


@dataclasses.dataclass(frozen=True)
class RankRun:
  """A ``--ranks`` run: its modules, each checked across the ranks."""

  ranks: int
  modules: tuple[RankModule, ...]
  declarations: str | None = None
  """Where the declarations came from, in one sentence (None when the
  way in does not say)."""
  unproved: str = ""
  """Why the run proves nothing beyond its modules' findings, in one
  sentence; empty when it does (one communicating module a rank, every
  rank's proved). Several modules a rank: the dumps do not say in which
  order, or how often, each rank ran them. None at all: nothing was
  compared."""

  @property
  def status(self) -> int:
    """1 when a module has a finding; else 2 when something is not proved
    (a module matched by type only, `unproved`, or no communicating
    module); else 0."""
    if any(m.findings or m.verdict in FOUND for m in self.modules):
      return 1
    proved = all(m.proved for m in self.modules)
    return 0 if proved and self.modules and not self.unproved else 2

  @property
  def findings(self) -> tuple[tuple[RankModule, RankFinding], ...]:
    """Every finding, with its module, in module order."""
    return tuple((m, f) for m in self.modules for f in m.findings)
