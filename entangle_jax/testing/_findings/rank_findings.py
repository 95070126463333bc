"""What the cross-rank check (`entangle_jax.testing.races_across`, the
command's ``--ranks``) found, as plain records: the emitters write every
format of a ``--ranks`` run from these alone.

Each problem is a `RankFinding` of one `RankKind` (its code, words and
fix live with every other cause's, in `entangle_jax._src.reason_words`):
a collective under rank-dependent control, two calls of one rank that
nothing orders (a possible deadlock), a mismatch at call k, a deadlock.
A finding names the ranks' calls (`RankSite`), each with the user's file
and line where the module recorded them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from entangle_jax._src.reason_words import (
  DEADLOCK,
  FIX_DEADLOCK,
  FIX_MISMATCH,
  FIX_RANK_DEPENDENT,
  FIX_UNORDERED,
  MISMATCH,
  POSSIBLE_DEADLOCK,
  RANK_DEPENDENT,
  RANK_KINDS,
  RankKind,
)

__all__ = [
  "DEADLOCK",
  "FIX_DEADLOCK",
  "FIX_MISMATCH",
  "FIX_RANK_DEPENDENT",
  "FIX_UNORDERED",
  "MISMATCH",
  "POSSIBLE_DEADLOCK",
  "RANK_DEPENDENT",
  "RANK_KINDS",
  "RankKind",
]

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
