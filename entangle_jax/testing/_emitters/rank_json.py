"""The JSON emitter of a cross-rank run (``--ranks --format json``):
everything the check found for each module (``CrossRankResult.to_json``:
matched steps, mismatch, deadlock, rank-dependent loops and conditionals,
unordered pairs), and its findings as every format gives them: code,
kind, each rank's call with its file and line, the fix."""

from __future__ import annotations

import json
from typing import Any

from entangle_jax.testing._emitters.sentences import rank_summary
from entangle_jax.testing._findings.rank_findings import RankFinding, RankRun


def finding_json(finding: RankFinding) -> dict[str, Any]:
  """One finding as JSON."""
  return {
    "code": finding.code,
    "name": finding.kind.name,
    "kind": finding.kind.verdict,
    "headline": finding.headline,
    "detail": finding.detail,
    "fix": finding.fix,
    "sites": [
      {"rank": s.rank, "what": s.what, "path": s.path, "line": s.line}
      for s in finding.sites
    ],
  }


def as_json(run: RankRun) -> dict[str, Any]:
  """The ``--ranks --format json`` answer for `run`, as a dict."""
  return {
    "status": run.status,
    "summary": rank_summary(run),
    "ranks": run.ranks,
    "modules": [
      {**m.data, "findings": [finding_json(f) for f in m.findings]}
      for m in run.modules
    ],
  }


def render(run: RankRun) -> str:
  """`as_json` as text."""
  return json.dumps(as_json(run), indent=1)
