"""The text emitter of a cross-rank run (``--ranks``): each module's
report as the check wrote it (`CrossRankResult.text`, each problem with
its code and fix), then the run's summary."""

from __future__ import annotations

from entangle_jax.testing._emitters.sentences import rank_summary
from entangle_jax.testing._findings.rank_findings import RankRun

NOTHING = (
  "No communicating calls in any rank's modules: nothing to compare, "
  "nothing proved. XLA's collectives are read from the modules; a native "
  "call communicates only where a declaration says so."
)


def render(run: RankRun) -> str:
  """Each module's heading (its name and each rank's file) and report,
  then the summary."""
  lines = []
  for module in run.modules:
    if module.name is not None:
      lines.append(f"{module.name} ({', '.join(module.files)}):")
    lines.append(module.report)
  if not run.modules:
    lines.append(NOTHING)
  lines.append(rank_summary(run))
  return "\n".join(lines)
