"""The JSON emitter: everything a report says, every pair included, each
object's raw value too, from the findings records.

A cross-rank run's (``--ranks --format json``) holds everything the check
found for each module (``CrossRankResult.to_json``: matched steps,
mismatch, deadlock, rank-dependent loops and conditionals, unordered
pairs), and its findings as every format gives them: code, kind, each
rank's call with its file and line, the fix."""

from __future__ import annotations

import json
from typing import Any

from entangle_jax.testing._emitters.options import Options
from entangle_jax.testing._emitters.sentences import (
  platform_note,
  rank_summary,
  summary,
)
from entangle_jax.testing._findings.rank_findings import RankFinding, RankRun
from entangle_jax.testing._findings.records import (
  ModuleResult,
  Pair,
  ReportedCall,
  Run,
)


def _call(site: ReportedCall) -> dict[str, Any]:
  return {
    "instruction": site.instruction,
    "target": site.target,
    "access": site.access,
    # Each object as the report labels it (stable within the module) and
    # as the module holds it (a constant handle's value changes each run).
    "objects": [{"label": o.label, "raw": o.raw} for o in site.objects],
    "scope": site.scope,
    "location": site.location,
    "path": site.path,
    "line": site.line,
    "binding_location": site.binding_location,
    "backward": site.backward,
  }


def _pair(pair: Pair) -> dict[str, Any]:
  return {"first": _call(pair.first), "second": _call(pair.second)}


def _module(result: ModuleResult) -> dict[str, Any]:
  findings = result.findings
  group_of = findings.group_of()
  platform = result.platform
  return {
    "path": result.path,
    "module": result.module,
    # As reports name it ("cpu", "CUDA sm_90a"; null when the file names
    # none), as the file name writes it ("sm_9.0a_gpu"), and the runtime
    # whose model the check applied ("XLA:GPU"; null for a platform it
    # does not know).
    "platform": str(platform) if platform else None,
    "platform_in_file_name": platform.written if platform else None,
    "runtime": platform.runtime if platform else None,
    "native_calls": result.native_calls,
    "test": result.test,
    # Compiled by a test marked as racing on purpose (a control).
    "expected": result.expected,
    # Why the check could not answer for the module; null when it did.
    "unchecked": result.unchecked,
    # Why it was checked as XLA optimized it only (no module before
    # optimization at hand); null when compared with the program.
    "unseen": result.unseen,
    "races": [  # In the order the analysis found them.
      {
        **_pair(pair),
        "across_devices": pair.across_devices,
        "code": group_of[id(pair)].cause.code,
        "cause": group_of[id(pair)].cause.headline,
        "fix": group_of[id(pair)].fix,
        "fix_steps": list(group_of[id(pair)].steps),
        # How in_program_order fixes it, when it does (else null); also
        # the last of "fix_steps".
        "in_program_order": group_of[id(pair)].program_order,
      }
      for pair in findings.pairs
    ],
    # What declared safe pairs left out, by entry: taken at their word.
    "safe_pairs_left_out": [
      {
        "first": s.pair.first,
        "second": s.pair.second,
        "reason": s.pair.reason,
        "source": s.pair.source,
        "count": s.count,
        "pairs": [_pair(p) for p in s.pairs],
      }
      for s in findings.left_out
    ],
    "declarations_applied": list(result.declared),
  }


def as_json(run: Run) -> dict[str, Any]:
  """The ``--format json`` answer for `run`, as a dict."""
  said = run.declarations
  return {
    "status": run.status,
    "summary": summary(run),
    "safe_pairs_left_out": run.left_out,
    "platform_note": platform_note(run),
    # Shipped bindings installed at versions their declarations do not
    # cover, whose undeclared calls are in the pairs.
    "version_notes": list(run.version_notes),
    "declarations": None
    if said is None
    else {"pyproject": said.pyproject, "said": said.said},
    "modules": [_module(r) for r in run.results],
  }


def render(run: Run | RankRun, options: Options | None = None) -> str:
  """`as_json` (or `ranks_as_json` for a cross-rank run) as text (`options`
  change nothing: JSON holds it all)."""
  del options
  data = ranks_as_json(run) if isinstance(run, RankRun) else as_json(run)
  return json.dumps(data, indent=1)


# The cross-rank check ----------------------------------------------------


def rank_finding_json(finding: RankFinding) -> dict[str, Any]:
  """One cross-rank finding as JSON."""
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


def ranks_as_json(run: RankRun) -> dict[str, Any]:
  """The ``--ranks --format json`` answer for `run`, as a dict."""
  return {
    "status": run.status,
    "summary": rank_summary(run),
    "ranks": run.ranks,
    "modules": [
      {**m.data, "findings": [rank_finding_json(f) for f in m.findings]}
      for m in run.modules
    ],
  }
