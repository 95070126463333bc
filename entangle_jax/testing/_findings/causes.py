"""The causes a report gives, each with a stable code, and the fix texts
they share.

A code names a kind of cause for good: a new cause takes the next number,
and a code is never reused for another. Tools key on it (SARIF's
``ruleId``, a JSON consumer's filter); people read the headline and the
fix, which `from_analysis.cause_of` fills in for each pair.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CauseKind:
  """One kind of cause: its code, its rank and what it means."""

  code: str
  rank: int
  """Groups are shown in rank order: real hazards first."""
  name: str
  """A short identifier (SARIF's rule ``name``)."""
  summary: str
  """One sentence: what the cause is."""


CAUSES: tuple[CauseKind, ...] = (
  CauseKind(
    "EJ001",
    0,
    "two-resources-one-handle",
    "Two Resources were built on one handle, so neither orders the other's "
    "calls on the object they share.",
  ),
  CauseKind(
    "EJ002",
    1,
    "same-object-unordered",
    "Two calls on the same object, at least one writing, that nothing orders.",
  ),
  CauseKind(
    "EJ003",
    2,
    "across-devices",
    "Copies of one SPMD module's call on two devices, on targets declared "
    "shared across devices, which nothing in one module orders.",
  ),
  CauseKind(
    "EJ004",
    2,
    "backward-pass-outside-resource",
    "A backward-pass call (a custom_vjp backward rule) is not covered by "
    "the forward call's Resource.",
  ),
  CauseKind(
    "EJ005",
    3,
    "undeclared-call",
    "A call the analysis knows nothing about may write anything, and "
    "nothing orders it with another call.",
  ),
  CauseKind(
    "EJ006",
    4,
    "elements-not-declared-distinct",
    "Calls on different elements of one array of handles, which nothing "
    "declares distinct, may touch one object.",
  ),
  CauseKind(
    "EJ007",
    5,
    "handles-may-be-one",
    "Calls on handles that nothing says differ may touch one object.",
  ),
  CauseKind(
    "EJ008",
    1,
    "hidden-by-xla",
    "Two calls that the program leaves unordered, which XLA's optimizer "
    "ordered by moving a call out of its loop, merging it with an "
    "identical call or deleting it (or by its own choice): the optimized "
    "module shows no race, and every run goes XLA's way.",
  ),
)
"""Every cause, by code."""

BY_CODE = {kind.code: kind for kind in CAUSES}


def markdown() -> str:
  """The causes' table, for ``docs/finding_races.md``."""
  lines = ["| Code | Name | The cause |", "|---|---|---|"]
  lines += [f"| {k.code} | `{k.name}` | {k.summary} |" for k in CAUSES]
  return "\n".join(lines) + "\n"


SIDE_EFFECT_NOTE = (
  "Marking the moved call side-effecting (`has_side_effect=True` in "
  "`jax.ffi.ffi_call`) keeps XLA from moving, merging or deleting it, "
  "but orders nothing: the two calls still need the order above."
)

ORDER_FIX = (
  "make the later call consume a value computed from the earlier call's "
  "result, e.g. pass it `token = entangle(token, r)` with `r` a result of "
  "the earlier call."
)

TABLE_FIRST = (
  "These calls are made by a binding you did not write, so declare what "
  "its targets do in your project's pyproject.toml: a "
  '[tool.entangle-jax.targets."TARGET"] table with mode = "read", "write" '
  'or "none" and object = the operand that names its object (see Finding '
  "races)."
)

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

ANY_RESOURCE_NOTE = (
  'A call on "any resource" is one made outside Resource or by a Resource '
  "without a name, and one that writes any resource is one the analysis "
  "knows nothing about."
)
