"""The causes a report gives, each with a stable code, as the findings
stage and its readers name them: the core's one table of codes, headlines
and fixes (`entangle_jax._src.reason_words`), which ``in_program_order``'s
warnings read too, and the docs' table of codes (`markdown`).

A code names a kind of cause for good: a new cause takes the next number,
and a code is never reused for another. Tools key on it (SARIF's
``ruleId``, a JSON consumer's filter); people read the headline and the
fix, which `from_analysis.cause_of` fills in for each pair from the
verdict's reason.
"""

from __future__ import annotations

from entangle_jax._src import reason_words
from entangle_jax._src.reason_words import (
  ANY_RESOURCE_NOTE,
  BY_CODE,
  DECLARE_STEP,
  ORDER_FIX,
  RESOURCE_NAME_STEP,
  SIDE_EFFECT_NOTE,
  TABLE_FIRST,
)
from entangle_jax._src.reason_words import Code as CauseKind

CAUSES: tuple[CauseKind, ...] = reason_words.CODES
"""Every cause, by code."""

__all__ = [
  "ANY_RESOURCE_NOTE",
  "BY_CODE",
  "CAUSES",
  "DECLARE_STEP",
  "ORDER_FIX",
  "RESOURCE_NAME_STEP",
  "SIDE_EFFECT_NOTE",
  "TABLE_FIRST",
  "CauseKind",
  "markdown",
]


def markdown() -> str:
  """The causes' table, for ``docs/finding_races.md``."""
  lines = ["| Code | Name | The cause |", "|---|---|---|"]
  lines += [f"| {k.code} | `{k.name}` | {k.summary} |" for k in CAUSES]
  return "\n".join(lines) + "\n"
