"""What the race check found, as plain records: every emitter reads these,
and nothing else of the check.

They hold strings, numbers and other records only (no HLO instruction, no
`Op`), so they pickle small (a pytest-xdist worker hands them to its
controller) and compare by value. `from_analysis` is the one module that
builds them from the analysis.

* `ReportedCall`: one native call as the user made it: target, access (with
  stable object labels), scope, the user's file and line, the binding's.
* `Pair`: two calls that may conflict and run in either order.
* `Cause`: why pairs are reported (a stable code, ``EJ001``...,
  `causes.CAUSES`), in words, and the steps that fix them.
* `Finding`: the pairs of one cause on the same two targets and the same
  two user lines, shown once with a count; `Group`: a cause's findings.
* `Findings`: one module's groups, what declared safe pairs left out, the
  declarations applied.
* `ModuleResult`: one checked module file; `Coverage`: what a watched run
  could not see; `Run`: a run's modules, coverage and declarations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from entangle_jax._src.targets import platforms
from entangle_jax._src.targets.declaration import SafePair
from entangle_jax.testing._findings.platforms import Platform

KNOWN_RUNTIMES = platforms.RUNTIMES
"""The runtimes whose model the rules describe, those of the platform
table: XLA:CPU's, XLA:GPU's and TPU's for host callbacks
(docs/finding_races.md, "What the check can and cannot see";
docs/platforms.md, "TPU")."""


@dataclasses.dataclass(frozen=True)
class ObjectSeen:
  """An object a call touches: how reports name it, and its raw value."""

  label: str
  """Stable within the module: ``object slot`` (an argument JAX named),
  ``object %add.3`` (a value computed in the module), ``handle #1 (a
  constant)`` (a handle baked into the module, numbered in the order the
  report meets them)."""
  raw: str
  """What the module holds: ``constant 94869858940672``, ``slot``; it may
  change from run to run (only JSON shows it)."""


@dataclasses.dataclass(frozen=True)
class ReportedCall:
  """One native call (or other op) as the user made it."""

  instruction: str
  """The HLO instruction that starts it (``ffi_call.12``)."""
  target: str | None
  """The custom call's target; None for an op that is no custom call."""
  opcode: str
  access: str
  """What it reads or writes, in words, with stable object labels
  (``writes handle #1 (a constant)``, ``reads 'solver', object slot``)."""
  objects: tuple[ObjectSeen, ...] = ()
  scope: str = ""
  """Its ``op_name`` without the markers ``Resource`` adds."""
  path: str | None = None
  """The user's file that made it (relative to the working directory when
  under it), if recorded."""
  line: int | None = None
  binding_path: str | None = None
  """The binding's file that wrapped the call, when not the user's."""
  binding_line: int | None = None
  backward: bool = False
  """A backward-pass op given a forward call's ``Resource`` record."""

  @property
  def name(self) -> str:
    """Its target, or its opcode when it has none."""
    return self.target or self.opcode

  @property
  def location(self) -> str | None:
    """``path:line``, or None."""
    return None if self.path is None else f"{self.path}:{self.line}"

  @property
  def binding_location(self) -> str | None:
    """The binding's ``path:line``, or None."""
    if self.binding_path is None:
      return None
    return f"{self.binding_path}:{self.binding_line}"


@dataclasses.dataclass(frozen=True)
class Pair:
  """Two calls that may conflict and run in either order (``first`` made
  first, where the module says), or, from ``unordered``, two where the
  first does not precede the second."""

  first: ReportedCall
  second: ReportedCall
  across_devices: bool = False
  """The two run on different devices of an SPMD module."""


@dataclasses.dataclass(frozen=True)
class Cause:
  """Why a group of pairs is reported, and what to do about it."""

  code: str
  """Stable across versions (`causes.CAUSES`): what tools key on."""
  rank: int
  """Groups are shown in rank order: real hazards first."""
  headline: str
  steps: tuple[str, ...]
  """The fix, a sentence or two each, the first to try first."""

  @property
  def fix(self) -> str:
    """The whole fix, as the text report writes it."""
    return " ".join(self.steps)


@dataclasses.dataclass(frozen=True)
class Finding:
  """Pairs of one cause on the same two targets and the same two lines of
  the user's code (a loop over handles, say): shown once, with a count."""

  pairs: tuple[Pair, ...]
  cause: Cause
  steps: tuple[str, ...]
  """The fix: the cause's steps, then how ``in_program_order`` fixes it
  (when it does)."""

  @property
  def code(self) -> str:
    return self.cause.code

  @property
  def pair(self) -> Pair:
    """The pair shown for it."""
    return self.pairs[0]

  @property
  def calls(self) -> tuple[ReportedCall, ReportedCall]:
    """The two calls of the pair shown."""
    return self.pair.first, self.pair.second

  @property
  def fix(self) -> str:
    return " ".join(self.steps)


@dataclasses.dataclass(frozen=True)
class Group:
  """The findings of one cause."""

  cause: Cause
  entries: tuple[Finding, ...]
  undeclared: tuple[str, ...]
  """Targets of its calls that nothing declares and no Resource marks:
  each may write anything, until declared."""
  notes: tuple[str, ...] = ()
  """What the shipped declarations say of its undeclared targets: an
  installed binding at a version they do not cover."""
  program_order: str | None = None
  """How ``entangle_jax.in_program_order`` fixes every pair of the group,
  when it does; None when it would not."""

  @property
  def steps(self) -> tuple[str, ...]:
    """The cause's steps, then the in_program_order one (when it fixes
    them): what every emitter shows."""
    if self.program_order is None:
      return self.cause.steps
    return (*self.cause.steps, self.program_order)

  @property
  def fix(self) -> str:
    return " ".join(self.steps)

  @property
  def count(self) -> int:
    """How many pairs the group holds."""
    return sum(len(e.pairs) for e in self.entries)


@dataclasses.dataclass(frozen=True)
class SafeCount:
  """Pairs one ``safe_pairs`` entry left out of a report."""

  pair: SafePair
  pairs: tuple[Pair, ...]

  @property
  def count(self) -> int:
    return len(self.pairs)


@dataclasses.dataclass(frozen=True)
class Findings:
  """The pairs of one module (or one list of races), grouped by cause."""

  pairs: tuple[Pair, ...] = ()
  """Every pair reported, in the order the analysis found them."""
  groups: tuple[Group, ...] = ()
  """Real hazards first (`Cause.rank`)."""
  applied: tuple[str, ...] = ()
  """The declarations of the calls in the pairs (those left out as safe
  included), as written in reports."""
  left_out: tuple[SafeCount, ...] = ()
  """The pairs declared safe pairs left out, by entry."""
  gradient: bool = False
  """Whether the calls came from a gradient (``jvp``/``transpose`` in
  their scopes)."""

  @property
  def count(self) -> int:
    return len(self.pairs)

  @property
  def left_out_count(self) -> int:
    """How many pairs declared safe pairs left out."""
    return sum(s.count for s in self.left_out)

  @property
  def notes(self) -> tuple[str, ...]:
    """Its groups' notes (`Group.notes`), each once."""
    return tuple(dict.fromkeys(n for g in self.groups for n in g.notes))

  def group_of(self) -> dict[int, Group]:
    """The group of each pair, by the pair's ``id``."""
    return {
      id(pair): group
      for group in self.groups
      for entry in group.entries
      for pair in entry.pairs
    }


NO_FINDINGS = Findings()


@dataclasses.dataclass
class ModuleResult:
  """What the check found in one module file."""

  path: str
  module: str
  platform: Platform | None
  """From the file's name (`platforms.of_file_name`: ``cpu``, CUDA
  ``sm_90a``, ...); None when it names none (a module XLA loaded from JAX's
  persistent compilation cache)."""
  native_calls: int
  findings: Findings = NO_FINDINGS
  test: str | None = None
  """The test that compiled it (a pytest node id), when a way in knows."""
  declared: tuple[str, ...] = ()
  """The declarations applied to its native calls, as reports write them:
  what decided its answer, shown on a report without races too."""
  expected: bool = False
  """Compiled by a test marked as racing on purpose (a control, the
  pytest plugin's ``entangle_races_expected``): its races are reported,
  not counted as errors."""
  unchecked: str | None = None
  """Why the check could not answer for it (its file could not be read,
  or its text parsed, or a declaration does not fit it); None when it was
  checked. An unchecked module is never counted free of races."""
  unseen: str | None = None
  """Why it was checked as XLA optimized it only, not against the
  program's own order (no module before optimization beside it), so that
  races XLA's optimizer hid are not seen there; None when compared."""

  @property
  def races(self) -> list[Pair]:
    """Its pairs, in the order the analysis found them."""
    return list(self.findings.pairs)

  @property
  def reported(self) -> bool:
    """Whether a report shows it: it races, safe pairs left out pairs of
    it, or it could not be checked."""
    return bool(self.findings.pairs or self.findings.left_out or self.unchecked)


@dataclasses.dataclass(frozen=True)
class Coverage:
  """What a watched run could not see."""

  blind: bool = False
  """XLA compiled modules but dumped none."""
  replaced: bool = False
  """When blind: because ``XLA_FLAGS`` no longer asks for the dump."""
  cache_hits: int = 0
  """Compiles JAX served from its persistent compilation cache."""
  unchecked: int = 0
  """Cache hits that left no module to check."""

  @property
  def incomplete(self) -> bool:
    """Whether some compile went unchecked."""
    return self.blind or self.unchecked > 0

  @staticmethod
  def joined(coverages: Sequence[Coverage]) -> Coverage:
    """What several watches (pytest-xdist workers) could not see, together."""
    return Coverage(
      blind=any(c.blind for c in coverages),
      replaced=any(c.replaced for c in coverages),
      cache_hits=sum(c.cache_hits for c in coverages),
      unchecked=sum(c.unchecked for c in coverages),
    )


@dataclasses.dataclass(frozen=True)
class DeclarationsRead:
  """Which declarations a run applied, as the command found them."""

  said: str
  """The sentence that says where they came from."""
  pyproject: str | None = None
  """The ``pyproject.toml`` read, or None."""


@dataclasses.dataclass(frozen=True)
class Run:
  """The modules one run checked, and what it could not see."""

  results: Sequence[ModuleResult]
  coverage: Coverage = Coverage()
  declarations: DeclarationsRead | None = None
  """Where the declarations came from, when the way in says (the
  command)."""

  @property
  def racing(self) -> list[ModuleResult]:
    """The modules with races, in the order they were checked."""
    return [r for r in self.results if r.findings.pairs]

  @property
  def unchecked(self) -> list[ModuleResult]:
    """The modules the check could not answer for, in the order met."""
    return [r for r in self.results if r.unchecked]

  @property
  def status(self) -> int:
    """The exit status the command gives the run, as ruff's: 2 when a
    module could not be checked, else 1 when one races (not on purpose:
    `ModuleResult.expected`), else 0."""
    if self.unchecked:
      return 2
    return 1 if any(not r.expected for r in self.racing) else 0

  @property
  def with_native_calls(self) -> int:
    return sum(1 for r in self.results if r.native_calls)

  @property
  def pairs(self) -> int:
    return sum(r.findings.count for r in self.results)

  @property
  def left_out(self) -> int:
    """Pairs that declared safe pairs left out, in all modules."""
    return sum(r.findings.left_out_count for r in self.results)

  @property
  def version_notes(self) -> tuple[str, ...]:
    """For the undeclared targets of its racing modules' pairs: each
    shipped binding installed at a version entangle-jax's declarations do
    not cover, as a line ("klujax X.Y is installed; entangle-jax's
    declarations cover A-B, ..."), each once, in the order first met."""
    return tuple(
      dict.fromkeys(n for r in self.racing for n in r.findings.notes)
    )

  def modules_run_by(self, runtime: str) -> list[ModuleResult]:
    """Modules for a platform whose runtime is `runtime` (the platform
    table's `Platform.runtime`: XLA:GPU runs a GPU's)."""
    return [
      r
      for r in self.results
      if r.platform is not None and r.platform.runtime == runtime
    ]

  @property
  def other_platforms(self) -> list[ModuleResult]:
    """Modules for platforms whose runtime the rules do not describe, or
    whose file names none."""
    return [
      r
      for r in self.results
      if r.platform is None or r.platform.runtime not in KNOWN_RUNTIMES
    ]
