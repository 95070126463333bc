"""What the race check found, as data: every emitter reads this, none
works it out again.

* `Cause`: why a pair is reported and what fixes it; `cause_of` picks it.
  `program_order_fix`: how ``in_program_order`` fixes a group's pairs,
  when it does.
* `Findings` (`findings_of`): the pairs of one module grouped by cause,
  real hazards first, each `Group` with its entries (pairs of the same
  two targets on the same two user lines), its undeclared targets; and
  the declarations that decided the answer.
* `ModuleResult`: one checked module file and its findings.
* `Coverage`: what a watched run could not see (compiles never dumped,
  cache hits that left no module).
* `Run`: the modules of one run and its coverage; the summary every way
  in prints.

The text (`race_text`), JSON (`race_json`) and GitHub annotation
(`github`) emitters render these.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

from entangle_jax._src.targets import shipped
from entangle_jax._src.targets.declaration import SafePair
from entangle_jax.testing._analysis.ops import Op, Race
from entangle_jax.testing._analysis.order_analysis import LeftOut
from entangle_jax.testing._report.platforms import (
  CPU_RUNTIME,
  GPU_RUNTIME,
  Platform,
)

ORDER_FIX = (
  "make the later call consume a value computed from the earlier call's "
  "result, e.g. pass it `token = entangle(token, r)` with `r` a result of "
  "the earlier call."
)

TABLE_FIRST = (
  "these calls are made by a binding you did not write, so declare what "
  "its targets do in your project's pyproject.toml: a "
  '[tool.entangle-jax.targets."TARGET"] table with mode = "read", "write" '
  'or "none" and object = the operand that names its object (see Finding '
  "races). Then "
)

ANY_RESOURCE_NOTE = (
  'A call on "any resource" is one made outside Resource or by a Resource '
  "without a name, and one that writes any resource is one the analysis "
  "knows nothing about: give each Resource a name "
  "(Resource(token, name=...)), and declare what your targets do "
  '(entangle_jax.testing.declare_target(target, mode="read", object=0), '
  'mode="none" for a call that keeps no state, or a [tool.entangle-jax] '
  "table in pyproject.toml)."
)

KNOWN_RUNTIMES = (CPU_RUNTIME, GPU_RUNTIME)
"""The runtimes whose model the rules describe: XLA:CPU's, and XLA:GPU's
(docs/finding_races.md, "What the check can and cannot see")."""


@dataclasses.dataclass(frozen=True)
class Cause:
  """Why a group of pairs is reported, and what to do about it."""

  rank: int
  """Groups are shown in rank order: real hazards first."""
  headline: str
  fix: str


def cause_of(race: Race) -> Cause:
  """The most likely reason `race` is reported."""
  if race.across_devices:
    return Cause(
      2,
      "on another device: calls of this SPMD module on two devices, on "
      "targets declared shared across devices, which nothing in one "
      "module orders",
      "give each device its own object (a handle per shard, and "
      "`distinct_elements = true`), declare the targets `devices = "
      '"per-device"` if each device has its own state, or order the '
      "devices' calls outside this module.",
    )
  pairs = [
    (x, y)
    for x in race.first.accesses
    for y in race.second.accesses
    if "write" in (x.mode, y.mode)
  ]
  for x, y in pairs:
    if (
      x.object is not None and y.object is not None and x.object.same(y.object)
    ):
      if x.resource and y.resource and x.resource != y.resource:
        one, two = sorted((x.resource, y.resource))
        return Cause(
          0,
          f"one object under two names, {one!r} and {two!r}: "
          "two Resources were built on one handle",
          "share one Resource for the handle: make every call on it "
          "through that Resource, or pass its current token (res.token) to "
          "the code that makes the other calls. Two Resources never order "
          "each other's calls, whatever their names (the same name only "
          "hides the race from this report).",
        )
      return Cause(
        1, "the same object, and nothing orders them", _order_fix(race)
      )
  if race.first.backward or race.second.backward:
    return Cause(
      2,
      "a backward-pass call (a custom_vjp backward rule, under "
      "transpose(...)) is not covered by the forward call's Resource",
      "make the native calls of the backward rule through a Resource "
      "(res.read / res.write on the token the forward pass saved), so "
      "that they are ordered with the forward pass's calls.",
    )
  if any(
    (x.resource is None and x.object is None)
    or (y.resource is None and y.object is None)
    for x, y in pairs
  ):
    from_binding = any(
      op.binding_location is not None and op.declaration is None
      for op in (race.first, race.second)
    )
    return Cause(
      3,
      "a call the analysis knows nothing about",
      (TABLE_FIRST + ANY_RESOURCE_NOTE[0].lower() + ANY_RESOURCE_NOTE[1:])
      if from_binding
      else ANY_RESOURCE_NOTE,
    )
  for x, y in pairs:
    if (
      x.object is not None
      and y.object is not None
      and (x.object.may_differ_by_element(y.object))
    ):
      in_resource = any(
        op.scope != op.user_scope for op in (race.first, race.second)
      )
      names = (
        "; or give each Resource its own name (Resource(token, name=...))"
        if in_resource
        else ""
      )
      return Cause(
        4,
        "may be one object: different elements of one array of handles, "
        "which nothing declares distinct",
        "if distinct elements of that array hold distinct handles, say "
        "so: `distinct_elements = true` in the [tool.entangle-jax] table "
        "of pyproject.toml (or for the target: declare_target(target, "
        f"object=0, distinct_elements=True)){names}.",
      )
  return Cause(
    5,
    "may be one object: nothing says their handles differ",
    "if they touch different objects, give their Resources different "
    "names, or declare what the targets touch (declare_target(target, "
    "object=..., ...)); otherwise " + ORDER_FIX,
  )


def _name(op: Op) -> str:
  return op.target or op.instruction.opcode


def _handed_back(op: Op) -> int | None:
  """The result of `op` that hands back the object it touched, if its
  declaration says so."""
  declaration = op.declaration
  if declaration is not None and declaration.returns_object:
    return declaration.returns_object[0]
  return None


def _object_operand(op: Op) -> int | None:
  """The operand of `op` that names its object: declared, or a Resource's
  token (operand 0)."""
  declaration = op.declaration
  if declaration is not None and declaration.object is not None:
    return declaration.object
  return 0 if op.scope != op.user_scope else None


def _order_fix(race: Race) -> str:
  """The fix for two calls on one object, in the order the program made
  them (`race.first` first), naming what the later call must consume."""
  first, second = race.first, race.second
  operand = _object_operand(second)
  into = (
    f"the later call's operand {operand}"
    if operand is not None
    else "an operand of the later call"
  )
  fix = (
    f"the later call (`{_name(second)}`) must run after the earlier one "
    f"(`{_name(first)}`, listed first), as the program made them: "
  )
  returned = _handed_back(first)
  if returned is not None:
    fix += (
      f"pass as {into} the object the earlier call hands back (its result "
      f"{returned}) in place of the handle it was given, or that handle "
      "entangled with it (`handle = entangle(handle, r)` with `r` that "
      "result)."
    )
  else:
    fix += (
      f"make {into} consume a value computed from the earlier call's "
      "result (`handle = entangle(handle, r)` with `r` a result of the "
      "earlier call, then pass `handle` to the later call)."
    )
  if any(op.scope != op.user_scope for op in (first, second)):
    fix += (
      " Where one of them is made through a Resource, make the other "
      "through it too (res.read / res.write), or pass it res.token."
    )
  return fix


_JITTED = re.compile(r"jit\(([^()/]+)\)(?:/|$)")


def _jitted_function(op: Op) -> str | None:
  """The name of the function ``jax.jit`` made the op's module from: the
  first component of its ``op_name`` (``jit(step)/...``), or None when
  the op was not traced under ``jax.jit`` (pmap, a hand-written module)."""
  found = _JITTED.match(op.user_scope)
  return found.group(1) if found else None


def program_order_fix(races: Sequence[Race], cause: Cause) -> str | None:
  """How ``in_program_order`` fixes every pair of `races` (one cause's),
  when it does: both calls of each pair declared, on one device, made by
  the one function ``jax.jit`` compiled into the module, the earlier call
  returning an array to order the later one after. None otherwise: pairs
  across devices (nothing in one module orders devices), two Resources on
  one handle (in_program_order, as the race check, reads their names as
  two objects), calls nothing declares (declare them first), an earlier
  call that returns nothing (``jax.debug.callback``: nothing can wait for
  it), a module not made by ``jax.jit``."""
  if cause.rank == 0 or not races:
    return None
  names = set()
  for race in races:
    first, second = race.first, race.second
    if race.across_devices:
      return None
    if first.declaration is None or second.declaration is None:
      return None
    result = first.instruction
    if result.dims is None or result.zero_sized:  # No array to wait for.
      return None
    names |= {_jitted_function(first), _jitted_function(second)}
  if len(names) != 1 or None in names:
    return None
  (name,) = names
  return (
    f"Or order every native call of `{name}`, the function jitted into "
    "this module, as its program makes them: "
    f"`jax.jit(entangle_jax.in_program_order({name}))` in place of "
    f"`jax.jit({name})`, which adds the entangle calls these declarations "
    "call for. Wrap what you pass to jax.jit: a gradient's module is named "
    f"for its function too, and `jax.jit(jax.grad({name}))` becomes "
    f"`jax.jit(entangle_jax.in_program_order(jax.grad({name})))`."
  )


@dataclasses.dataclass(frozen=True)
class Entry:
  """Pairs of the same two targets on the same two lines of the user's
  code (a loop over handles, say): one entry, shown once with a count."""

  races: tuple[Race, ...]

  @property
  def race(self) -> Race:
    """The pair shown for the entry."""
    return self.races[0]


@dataclasses.dataclass(frozen=True)
class Group:
  """The pairs reported for one cause."""

  cause: Cause
  entries: tuple[Entry, ...]
  undeclared: tuple[str, ...]
  """Targets of its calls that nothing declares and no Resource marks:
  each may write anything, until declared."""
  notes: tuple[str, ...] = ()
  """What the shipped declarations say of its undeclared targets: an
  installed binding at a version they do not cover."""
  program_order: str | None = None
  """How ``entangle_jax.in_program_order`` fixes every pair of the group,
  when it does (`program_order_fix`); None when it would not."""

  @property
  def fix(self) -> str:
    """The cause's fix, then how in_program_order fixes it (when it
    does): what every emitter shows."""
    if self.program_order is None:
      return self.cause.fix
    return f"{self.cause.fix} {self.program_order}"

  @property
  def count(self) -> int:
    """How many pairs the group holds."""
    return sum(len(e.races) for e in self.entries)


@dataclasses.dataclass(frozen=True)
class SafeCount:
  """Pairs one ``safe_pairs`` entry left out of a report."""

  pair: SafePair
  races: tuple[Race, ...]

  @property
  def count(self) -> int:
    return len(self.races)

  def __str__(self) -> str:
    p = self.pair
    return f"`{p.first}` / `{p.second}` ({p.reason}; from {p.source})"


@dataclasses.dataclass(frozen=True)
class Findings:
  """The pairs of one list of races, grouped by cause."""

  count: int
  groups: tuple[Group, ...]
  """Real hazards first (`Cause.rank`)."""
  applied: tuple[str, ...]
  """The declarations of the calls in the pairs (those left out as safe
  included), as written in reports."""
  left_out: tuple[SafeCount, ...] = ()
  """The pairs declared safe pairs left out, by entry, in the order of
  the entries that first left one out."""

  @property
  def left_out_count(self) -> int:
    """How many pairs declared safe pairs left out."""
    return sum(s.count for s in self.left_out)

  @property
  def notes(self) -> tuple[str, ...]:
    """Its groups' notes (`Group.notes`), each once."""
    return tuple(dict.fromkeys(n for g in self.groups for n in g.notes))


def safe_counts(left_out: Sequence[LeftOut]) -> tuple[SafeCount, ...]:
  """`left_out` counted by the safe pair that left each out."""
  by_pair: dict[SafePair, list[Race]] = {}
  for item in left_out:
    by_pair.setdefault(item.pair, []).append(item.race)
  return tuple(SafeCount(p, tuple(r)) for p, r in by_pair.items())


def findings_of(
  races: Sequence[Race], left_out: Sequence[LeftOut] = ()
) -> Findings:
  """`races` grouped by cause, each group's entries and undeclared
  targets, the declarations applied, and what declared safe pairs left
  out (`left_out`: from ``races``' answer or `safe_pairs_left_out`)."""
  members: dict[Cause, list[Race]] = {}
  causes_by_kind: dict[tuple, Cause] = {}
  for race in races:
    # A cause depends only on this much of a pair: work it out once per
    # kind of pair, not once for each of a million pairs.
    kind = (_kind(race.first), _kind(race.second), race.across_devices)
    cause = causes_by_kind.get(kind)
    if cause is None:
      cause = causes_by_kind[kind] = cause_of(race)
    members.setdefault(cause, []).append(race)
  groups = []
  for cause in sorted(members, key=lambda c: c.rank):
    alike: dict[tuple, list[Race]] = {}
    for race in members[cause]:
      alike.setdefault(_where(race), []).append(race)
    entries = tuple(Entry(tuple(same)) for same in alike.values())
    undeclared = _undeclared(members[cause])
    notes = (shipped.note_for(t) for t in undeclared)
    groups.append(
      Group(
        cause,
        entries,
        undeclared,
        tuple(dict.fromkeys(n for n in notes if n)),
        program_order_fix(members[cause], cause),
      )
    )
  applied = _declarations_of([*races, *(item.race for item in left_out)])
  return Findings(len(races), tuple(groups), applied, safe_counts(left_out))


def _where(race: Race) -> tuple:
  """The two targets and the two user lines of `race`, unordered."""
  ends = sorted(
    (op.target or "", op.location or "") for op in (race.first, race.second)
  )
  return (*ends, race.across_devices)


def _kind(op: Op) -> tuple:
  """What `cause_of` reads of `op`."""
  return (
    op.accesses,
    op.backward,
    op.scope != op.user_scope,
    op.target,
    op.declaration,
    op.binding_location is not None,
  )


def _undeclared(races: Sequence[Race]) -> tuple[str, ...]:
  return tuple(
    sorted(
      {
        op.target
        for race in races
        for op in (race.first, race.second)
        if op.target
        and op.declaration is None
        and any(a.resource is None and a.object is None for a in op.accesses)
      }
    )
  )


def _declarations_of(races: Sequence[Race]) -> tuple[str, ...]:
  found = (op.declaration for race in races for op in (race.first, race.second))
  return tuple(str(d) for d in dict.fromkeys(d for d in found if d is not None))


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
  races: list[Race]
  test: str | None = None
  """The test that compiled it (a pytest node id), when a way in knows."""
  left_out: list[LeftOut] = dataclasses.field(default_factory=list)
  """The pairs declared safe pairs left out of `races`."""
  declared: tuple[str, ...] = ()
  """The declarations applied to its native calls, as reports write them:
  what decided its answer, shown on a report without races too."""
  unchecked: str | None = None
  """Why the check could not answer for it (its file could not be read,
  or its text parsed, or a declaration does not fit it); None when it was
  checked. An unchecked module is never counted free of races."""

  @functools.cached_property
  def findings(self) -> Findings:
    """Its races, grouped (`findings_of`), and what safe pairs left out."""
    return findings_of(self.races, self.left_out)

  @property
  def reported(self) -> bool:
    """Whether a report shows it: it races, safe pairs left out pairs of
    it, or it could not be checked."""
    return bool(self.races or self.left_out or self.unchecked)


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


@dataclasses.dataclass(frozen=True)
class Run:
  """The modules one run checked, and what it could not see."""

  results: Sequence[ModuleResult]
  coverage: Coverage = Coverage()

  @property
  def racing(self) -> list[ModuleResult]:
    """The modules with races, in the order they were checked."""
    return [r for r in self.results if r.races]

  @property
  def unchecked(self) -> list[ModuleResult]:
    """The modules the check could not answer for, in the order met."""
    return [r for r in self.results if r.unchecked]

  @property
  def status(self) -> int:
    """The exit status the command gives the run, as ruff's: 2 when a
    module could not be checked, else 1 when one races, else 0."""
    return 2 if self.unchecked else 1 if self.racing else 0

  @property
  def with_native_calls(self) -> int:
    return sum(1 for r in self.results if r.native_calls)

  @property
  def pairs(self) -> int:
    return sum(len(r.races) for r in self.results)

  @property
  def left_out(self) -> int:
    """Pairs that declared safe pairs left out, in all modules."""
    return sum(len(r.left_out) for r in self.results)

  @property
  def version_notes(self) -> tuple[str, ...]:
    """For the undeclared targets of its racing modules' pairs: each
    shipped binding installed at a version entangle-jax's declarations do
    not cover, as a line ("klujax X.Y is installed; entangle-jax's
    declarations cover A-B, ..."), each once, in the order first met."""
    return tuple(
      dict.fromkeys(n for r in self.racing for n in r.findings.notes)
    )

  @property
  def gpu_modules(self) -> list[ModuleResult]:
    """Modules for a GPU (XLA:GPU runs them)."""
    return [
      r
      for r in self.results
      if r.platform is not None and r.platform.runtime == GPU_RUNTIME
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
