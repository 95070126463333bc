"""What is said of two native calls, for each reason the one rule gives
(`entangle_jax._src.conflict_rule.Reason`) and each cause a report gives:
the one table of codes, headlines and fixes.

* `CODES`: every cause's stable code (``EJ001``...), its rank, a short
  name and a one-sentence summary. A code names a kind of cause for good:
  a new cause takes the next number, and a code is never reused for
  another. Tools key on it (SARIF's ``ruleId``, a JSON consumer's
  filter).
* `BY_REASON`: each `Reason`'s words, exactly one row each. A reason that
  makes two calls conflict has a code, the headline a report gives and
  the steps that fix it; one that clears them has no code, and its
  headline is why the race check takes the two for different objects,
  as the sanitizer's agreement line says it (None: nothing says it).
* `safe_pair_named`, `LEFT_OUT`, `left_out_count` and `left_out_by`:
  the words of `Reason.SAFE_PAIR`, what every report and the sanitizer
  say of a declared safe pair and of the pairs it (or the
  device-to-process map) left out.
* `RANK_KINDS`: the cross-rank check's kinds of problem (``EJ1xx``),
  each with its code, verdict, name, summary and fix.
* `TWO_NAMES`, `ACROSS_DEVICES`, `BACKWARD`, `HIDDEN_BY_XLA` and
  `COMMUNICATION`: the causes that need more of the pair than its reason
  (the two ``Resource`` names of one object, two devices, a backward pass,
  what XLA's optimizer did, two calls that communicate), for the report
  (`entangle_jax.testing._findings.from_analysis`) to apply where that
  context holds.

A headline or step may hold ``{fields}`` (`Words.headline_with`,
`Words.steps_with`), which the reader fills in from the pair. Some fixes
also take steps that only the pair's context calls for (`TABLE_FIRST`,
`RESOURCE_NAME_STEP`, `RESOURCE_NAMES_STEP`, `SIDE_EFFECT_NOTE`); and the
fix of two calls on one object names the calls themselves, so the report
writes it (the steps of `Reason.SAME_OBJECT` and `Reason.NO_OBJECT` are
empty).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

from entangle_jax._src.conflict_rule import APART_REASON, Reason
from entangle_jax._src.targets.declaration import SafePair


@dataclasses.dataclass(frozen=True)
class Code:
  """One kind of cause: its code, its rank and what it means."""

  code: str
  rank: int
  """Groups are shown in rank order: real hazards first."""
  name: str
  """A short identifier (SARIF's rule ``name``)."""
  summary: str
  """One sentence: what the cause is."""


CODES: tuple[Code, ...] = (
  Code(
    "EJ001",
    0,
    "two-resources-one-handle",
    "Two Resources were built on one handle, so neither orders the other's "
    "calls on the object they share.",
  ),
  Code(
    "EJ002",
    1,
    "same-object-unordered",
    "Two calls on the same object, at least one writing, that nothing orders.",
  ),
  Code(
    "EJ003",
    2,
    "across-devices",
    "Copies of one SPMD module's call on two devices, on targets declared "
    "shared across devices, which nothing in one module orders.",
  ),
  Code(
    "EJ004",
    2,
    "backward-pass-outside-resource",
    "A backward-pass call (a custom_vjp backward rule) is not covered by "
    "the forward call's Resource.",
  ),
  Code(
    "EJ005",
    3,
    "undeclared-call",
    "A call the analysis knows nothing about may write anything, and "
    "nothing orders it with another call.",
  ),
  Code(
    "EJ006",
    4,
    "elements-not-declared-distinct",
    "Calls on different elements of one array of handles, which nothing "
    "declares distinct, may touch one object.",
  ),
  Code(
    "EJ007",
    5,
    "handles-may-be-one",
    "Calls on handles that nothing says differ may touch one object.",
  ),
  Code(
    "EJ008",
    1,
    "hidden-by-xla",
    "Two calls that the program leaves unordered, which XLA's optimizer "
    "ordered by moving a call out of its loop, merging it with an "
    "identical call or deleting it (or by its own choice): the optimized "
    "module shows no race, and every run goes XLA's way.",
  ),
  Code(
    "EJ009",
    1,
    "possible-deadlock",
    "Two calls of one process that nothing orders, whose targets are "
    "declared to communicate (collectives, sends, receives): the process "
    "may make them in either order and another process in the other, and "
    "then both wait for good.",
  ),
)
"""Every cause, by code."""

BY_CODE = {kind.code: kind for kind in CODES}


@dataclasses.dataclass(frozen=True)
class Words:
  """What is said of pairs of one reason or one cause."""

  headline: str | None
  """What a report says of the pairs (a cause), or why the race check
  takes them for different objects (a reason that clears a pair); None
  where nothing says it."""
  code: str | None = None
  """The cause's code (`CODES`); None for a reason that clears a pair."""
  steps: tuple[str, ...] = ()
  """The fix, a sentence or two each, the first to try first."""

  @property
  def rank(self) -> int:
    """The rank of the cause's code (`Code.rank`)."""
    assert self.code is not None, "a reason that clears a pair has no rank"
    return BY_CODE[self.code].rank

  def headline_with(self, **fields: object) -> str:
    """The headline, its ``{fields}`` filled in."""
    assert self.headline is not None
    return self.headline.format(**fields)

  def steps_with(self, **fields: object) -> tuple[str, ...]:
    """The steps, their ``{fields}`` filled in."""
    return tuple(step.format(**fields) for step in self.steps)


def two_names(names: tuple[str | None, str | None]) -> dict[str, str]:
  """The ``{one}`` and ``{two}`` fields of two ``Resource`` names, as a
  headline quotes them: sorted, each in quotes (no name: ``''``)."""
  one, two = sorted(n or "" for n in names)
  return {"one": repr(one), "two": repr(two)}


SIDE_EFFECT_NOTE = (
  "Marking the moved call side-effecting (`has_side_effect=True` in "
  "`jax.ffi.ffi_call`) keeps XLA from moving, merging or deleting it, "
  "but orders nothing: the two calls still need the order above."
)
"""The last step of a race XLA hid by moving, merging or deleting a
call."""

HOISTED_STEP = (
  "Where that order holds within an iteration already, keep the moved "
  "call in every iteration: mark it side-effecting "
  "(`has_side_effect=True` in `jax.ffi.ffi_call`, or a binding's own "
  "flag), so that each iteration's call runs after the iterations "
  "before; or pass it a value of the loop state that changes, e.g. "
  "`token = entangle(token, w)` with `w` the result of the loop's write, "
  "carried from the iteration before."
)
"""The step of a race that XLA may hide by moving a call out of its loop:
what keeps the call in the loop."""

DELETED_STEP = (
  "Keep the write: mark it side-effecting (`has_side_effect=True` in "
  "`jax.ffi.ffi_call`, or a binding's own flag), or use its result: pass "
  "the later call a value computed from it (`token = entangle(token, w)` "
  "with `w` the write's result)."
)
"""The step of a race that XLA may hide by deleting a write nothing uses:
what keeps the write."""

ORDER_FIX = (
  "make the later call consume a value computed from the earlier call's "
  "result, e.g. pass it `token = entangle(token, r)` with `r` a result of "
  "the earlier call."
)
"""The usual fix of two unordered calls, in general terms."""

PROCESSES_STEP = (
  "If each device runs in a process of its own (jax.distributed), they "
  "share no process-wide state: for a dump, say so with --processes N."
)
"""The last step of the report's EJ003: a dump does not say which process
runs each device (a ``Compiled`` does)."""

TABLE_FIRST = (
  "These calls are made by a binding you did not write, so declare what "
  "its targets do in your project's pyproject.toml: a "
  '[tool.entangle-jax.targets."TARGET"] table with mode = "read", "write" '
  'or "none" and object = the operand that names its object (see Finding '
  "races)."
)
"""The first step where an undeclared call is made by a binding."""

DECLARE_STEP = (
  "Declare what your targets do: "
  'entangle_jax.declare_target(target, mode="read", object=0), with object '
  "the operand that names the handle, or no object where the state is the "
  "whole library's (a handle held as an attribute, or Python state); "
  'mode="none" for a call that keeps no state; or a [tool.entangle-jax] '
  "table in pyproject.toml."
)

RESOURCE_NAME_STEP = (
  "Give each Resource a name (Resource(token, name=...)): an unnamed "
  "Resource's calls may be on any object."
)
"""A first step where an undeclared call is made through a Resource."""

ANY_RESOURCE_NOTE = (
  'A call on "any resource" is one made outside Resource or by a Resource '
  "without a name, and one that writes any resource is one the analysis "
  "knows nothing about."
)

RESOURCE_NAMES_STEP = (
  "; or give each Resource its own name (Resource(token, name=...))"
)
"""The ``{names}`` of `ELEMENTS_NOT_DISTINCT`'s step where a call is made
through a Resource ('' otherwise)."""

_SAME = "the same object, and nothing orders them"

BY_REASON: dict[Reason, Words] = {
  Reason.READS: Words(None),
  Reason.PER_DEVICE: Words(None),
  Reason.SAFE_PAIR: Words(None),
  Reason.SAME_OBJECT: Words(_SAME, "EJ002"),
  Reason.DISTINCT_ELEMENTS: Words(
    "the declarations make them different objects (different elements "
    "of one array declared distinct)"
  ),
  # The sanitizer sees different constants itself: nothing to agree with.
  Reason.DISTINCT_HANDLES: Words(None),
  Reason.DIFFERENT_NAMES: Words(
    "they were made under different names, {one} and {two} (named "
    "Resource objects, or the arguments of in_program_order(f, "
    "distinct_arguments=True)), which say they are different objects"
  ),
  Reason.UNDECLARED: Words(
    "a call the analysis knows nothing about",
    "EJ005",
    (DECLARE_STEP, ANY_RESOURCE_NOTE),
  ),
  # Declared with no object operand, the call touches its whole library
  # (a handle held as an attribute, Python state), which is one object.
  Reason.NO_OBJECT: Words(
    f"{_SAME}: a call declared with no object touches its whole library",
    "EJ002",
  ),
  Reason.ELEMENTS_NOT_DISTINCT: Words(
    "may be one object: different elements of one array of handles, "
    "which nothing declares distinct",
    "EJ006",
    (
      "if distinct elements of that array hold distinct handles, say "
      "so: `distinct_elements = true` in the [tool.entangle-jax] table "
      "of pyproject.toml (or for the target: declare_target(target, "
      "object=0, distinct_elements=True)){names}.",
    ),
  ),
  Reason.HANDLES_MAY_BE_ONE: Words(
    "may be one object: nothing says their handles differ",
    "EJ007",
    (
      "if they touch different objects, give their Resources different "
      "names, or declare what the targets touch (declare_target(target, "
      "object=..., ...)); otherwise " + ORDER_FIX,
    ),
  ),
}
"""Each reason's words: a cause for the reasons that conflict, what the
sanitizer's agreement line says for those that clear a pair."""

TWO_NAMES = Words(
  "one object under two names, {one} and {two}: two Resources were built "
  "on one handle",
  "EJ001",
  (
    "share one Resource for the handle: make every call on it through "
    "that Resource, or pass its current token (res.token) to the code "
    "that makes the other calls.",
    "Two Resources never order each other's calls, whatever their names "
    "(the same name only hides the race from this report).",
  ),
)
"""`Reason.SAME_OBJECT` where the two calls were made under two different
``Resource`` names (`two_names`)."""

COMMUNICATION = Words(
  "a possible deadlock: two communicating calls that nothing orders, "
  "which this process may make in either order and another process in "
  "the other",
  "EJ009",
  (
    "order them as the program makes them: pass the later call (listed "
    "second) an operand entangled with the earlier call's result (`x = "
    "entangle(x, r)` with `r` that result).",
    "Then check that every process makes them in one order: `python -m "
    "entangle_jax.testing --ranks DIR0 DIR1 ...` on one dump per process "
    "(no transform of one process's program can make another's agree).",
  ),
)
"""A conflicting reason of two calls that both communicate (their
declarations' ``communicates``): more than a race, the processes may
deadlock."""

ACROSS_DEVICES = Words(
  "on another device: calls of this SPMD module on two devices, on "
  "targets declared shared across devices, which nothing in one module "
  "orders",
  "EJ003",
  (
    "give each device its own object (a handle per shard, and "
    "`distinct_elements = true`), declare the targets `devices = "
    '"per-device"` if each device has its own state, or order the '
    "devices' calls outside this module.",
  ),
)
"""A conflicting reason of two calls on two devices of one SPMD module
(the race check's pairs across devices, ``in_program_order``'s warning of
a write in a shard_map)."""

BACKWARD = Words(
  "a backward-pass call (a custom_vjp backward rule, under "
  "transpose(...)) is not covered by the forward call's Resource",
  "EJ004",
  (
    "make the native calls of the backward rule through a Resource "
    "(res.read / res.write on the token the forward pass saved), so "
    "that they are ordered with the forward pass's calls.",
  ),
)
"""A conflicting reason but one object where one call is made in a
backward pass (the forward call's Resource record does not reach it)."""

HIDDEN_BY_XLA = Words("{change}; in the program: {headline}", "EJ008")
"""Any cause of a pair that XLA's optimizer ordered: what XLA did, then
the cause in the program (its steps are that cause's, with
`SIDE_EFFECT_NOTE` where XLA moved, merged or deleted a call)."""

CONTEXT_CAUSES = (
  TWO_NAMES,
  ACROSS_DEVICES,
  BACKWARD,
  HIDDEN_BY_XLA,
  COMMUNICATION,
)
"""The causes no reason alone decides (see each)."""


# The pairs left out as safe (`Reason.SAFE_PAIR`) -----------------------


def safe_pair_named(pair: SafePair, quote: str = "`") -> str:
  """`pair` as reports name it: its two targets, each between `quote`s
  (the sanitizer's prose quotes none), why, and where it was declared."""
  first, second = f"{quote}{pair.first}{quote}", f"{quote}{pair.second}{quote}"
  return f"{first} / {second} ({pair.reason}; from {pair.source})"


LEFT_OUT = "left out as safe"
"""What every report says of the pairs a declared safe pair (or the
device-to-process map) left out: written here only."""


def left_out_count(count: int, form: Literal["more", "all", "each"]) -> str:
  """The start of each sentence about `count` pairs left out as safe, up
  to and with `LEFT_OUT`: ``more`` beside pairs reported (``N more pairs
  left out as safe``), ``all`` for a module whose every pair was left
  out, ``each`` for one entry's pairs (a notice)."""
  pairs = f"{count} pair{'s' * (count != 1)}"
  if form == "more":
    return f"{count} more pair{'s' * (count != 1)} {LEFT_OUT}"
  may = "may conflict and run in either order"
  if form == "all":
    return f"{pairs} of calls {may}, all {LEFT_OUT}"
  return f"{pairs} of calls that {may} {LEFT_OUT}"


def left_out_by(reasons: Iterable[str]) -> str:
  """Why pairs were left out as safe, from the `SafePair.reason` of the
  entries that left them out: ``by declared safe_pairs``, ``(on devices
  of different processes)`` (`conflict_rule.APART_REASON`: the
  device-to-process map), or both."""
  apart = {reason == APART_REASON for reason in reasons}
  if apart == {True}:
    return "(on devices of different processes)"
  if apart == {True, False}:
    return "(by declared safe_pairs, or on devices of different processes)"
  return "by declared safe_pairs"


# The cross-rank check's kinds (`entangle_jax.testing._findings.
# rank_findings`): codes in the ``EJ1xx`` range, apart from the
# single-process causes' ``EJ0xx`` so that neither table's next code can
# take the other's.

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
