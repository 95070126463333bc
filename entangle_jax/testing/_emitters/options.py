"""What a way in may ask of an emitter, beside the run itself."""

from __future__ import annotations

import dataclasses

SHOWN_PER_GROUP = 5
"""Findings shown for each cause in the text report; the others are
counted (every pair is in JSON and SARIF)."""


@dataclasses.dataclass(frozen=True)
class Options:
  """How to emit a run (every emitter takes them; each reads what applies
  to it)."""

  shown_per_group: int | None = SHOWN_PER_GROUP
  """Text: findings shown per cause (None: all)."""
  shown_elsewhere: frozenset[int] = frozenset()
  """Text: the indices in ``run.results`` of the modules whose reports the
  way in showed already (with the pytest failure they caused)."""
  notes: tuple[str, ...] = ()
  """Text: the way in's own lines, before the run's notes and summary."""
