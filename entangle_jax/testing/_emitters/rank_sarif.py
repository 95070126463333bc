"""The SARIF emitter of a cross-rank run (``--ranks --format sarif``): a
SARIF 2.1.0 log, as `sarif` writes the single-process check's.

Its driver lists every kind of cross-rank problem as a rule
(`rank_findings.RANK_KINDS`: ``id`` the stable ``EJ1xx`` code, ``name``,
a short description, the fix as its help). One result per finding, level
``error``, with ``ruleId`` its code, the message of every format
(`sentences.rank_finding_sentence`: each rank's call with its
``file:line``, the fix) and the module; its location is the first rank's
call with a user line, and every other rank's call with one is a related
location (its message names the rank). A finding whose calls recorded no
user line points at its first rank's module file (the file as a whole).
``partialFingerprints`` hashes the code, the module and the ranks' calls.
A proved module is a note in the invocation's notifications.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from entangle_jax.testing._emitters.sarif import (
  location,
  log,
  tool_version,
)
from entangle_jax.testing._emitters.sentences import (
  rank_finding_sentence,
  rank_module_name,
)
from entangle_jax.testing._findings.rank_findings import (
  RANK_KINDS,
  RankFinding,
  RankModule,
  RankRun,
  RankSite,
)

RULE_INDEX = {kind.code: index for index, kind in enumerate(RANK_KINDS)}


def _placed(finding: RankFinding) -> list[tuple[RankSite, str, int]]:
  """The sites of `finding` with a user line: (site, path, line)."""
  found = []
  for site in finding.sites:
    path, line = site.path, site.line
    if path is not None and line is not None:
      found.append((site, path, line))
  return found


def _result(module: RankModule, finding: RankFinding) -> dict[str, Any]:
  placed = _placed(finding)
  if placed:
    _, path, line = placed[0]
    locations = [location(path, line)]
  else:
    fallback = next((s.path for s in finding.sites if s.path), None)
    locations = [location(fallback or module.files[0], None)]
  related = [
    {"id": n, **location(path, line, f"rank {s.rank}: {s.what}")}
    for n, (s, path, line) in enumerate(placed[1:], 1)
  ]
  key = "|".join(
    [finding.code, str(module.name)]
    + [f"{s.rank}:{s.what}" for s in finding.sites]
  )
  result: dict[str, Any] = {
    "ruleId": finding.code,
    "ruleIndex": RULE_INDEX[finding.code],
    "level": "error",
    "message": {
      "text": f"{rank_finding_sentence(finding)} In {rank_module_name(module)}."
    },
    "locations": locations,
    "partialFingerprints": {
      "entangleJaxRanks/v1": hashlib.sha256(key.encode()).hexdigest()
    },
  }
  if related:
    result["relatedLocations"] = related
  return result


def as_sarif(run: RankRun) -> dict[str, Any]:
  """The SARIF log of `run`, as a dict."""
  driver: dict[str, Any] = {
    "name": "entangle-jax",
    "rules": [
      {
        "id": kind.code,
        "name": kind.name,
        "shortDescription": {"text": kind.summary},
        "help": {"text": f"Fix: {kind.fix}"},
        "defaultConfiguration": {"level": "error"},
      }
      for kind in RANK_KINDS
    ],
  }
  version = tool_version()
  if version is not None:
    driver["version"] = version
  notes = [
    {
      "level": "note",
      "message": {
        "text": f"Proved: {rank_module_name(m)}: the {run.ranks} ranks make "
        f"{m.steps} communicating call{'s' * (m.steps != 1)} in one order."
      },
    }
    for m in run.modules
    if m.proved
  ]
  results = [_result(m, f) for m, f in run.findings]
  return log(driver, results, notes, successful=True)


def render(run: RankRun) -> str:
  """`as_sarif` as text."""
  return json.dumps(as_sarif(run), indent=1)
