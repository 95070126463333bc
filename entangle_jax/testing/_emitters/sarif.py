"""The SARIF emitter: a SARIF 2.1.0 log for GitHub code scanning (and any
other SARIF reader).

One run, its tool's driver listing every cause as a rule (`causes.CAUSES`:
``id`` the stable code, ``name``, a short description); one result per
finding (pairs of the same two targets on the same two user lines), with
``ruleId`` its cause's code, level ``error``, a message that says the two
calls, the cause and the whole fix, and as its location the user's file
and line of the pair's second call (``artifactLocation.uri``, relative to
the source root ``%SRCROOT%`` when the path is relative, a ``file:`` URI
when absolute; ``region.startLine``), the other call as a related
location. A finding whose calls recorded no user line points at the
module file, line 1. ``partialFingerprints`` holds a hash of the code,
targets, files and lines, so that an upload does not duplicate alerts.

What is no finding goes into the invocation's notifications: a module the
check could not answer for (an error, and ``executionSuccessful`` false),
pairs declared safe pairs left out, shipped bindings at versions their
declarations do not cover, and the platform notes.

A cross-rank run's log (``--ranks --format sarif``, `ranks_as_sarif`) lists
every kind of cross-rank problem as a rule (`rank_findings.RANK_KINDS`:
``id`` the stable ``EJ1xx`` code, ``name``, a short description, the fix
as its help). One result per finding, level ``error``, with ``ruleId``
its code, the message of every format
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
import importlib.metadata
import json
import os
import pathlib
import urllib.parse
from typing import Any

from entangle_jax.testing._emitters.options import Options
from entangle_jax.testing._emitters.sentences import (
  finding_ends,
  finding_sentence,
  left_out_as_safe,
  platform_note,
  rank_finding_sentence,
  rank_module_name,
  unseen_notes,
)
from entangle_jax.testing._findings.causes import CAUSES
from entangle_jax.testing._findings.rank_findings import (
  RANK_KINDS,
  RankFinding,
  RankModule,
  RankRun,
  RankSite,
)
from entangle_jax.testing._findings.records import Finding, Run

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
VERSION = "2.1.0"
SOURCE_ROOT = "%SRCROOT%"
RULE_INDEX = {kind.code: index for index, kind in enumerate(CAUSES)}
RANK_RULE_INDEX = {kind.code: index for index, kind in enumerate(RANK_KINDS)}


def tool_version() -> str | None:
  """The installed entangle-jax's version (None when not installed)."""
  try:
    return importlib.metadata.version("entangle-jax")
  except importlib.metadata.PackageNotFoundError:
    return None


def _uri(path: str) -> dict[str, str]:
  """An ``artifactLocation`` for `path`."""
  if os.path.isabs(path):
    return {"uri": pathlib.Path(path).as_uri()}
  posix = pathlib.PurePath(path).as_posix()
  return {"uri": urllib.parse.quote(posix), "uriBaseId": SOURCE_ROOT}


def location(path: str, line: int | None, text: str | None = None) -> dict:
  """A SARIF ``location`` at `path` (its `line`, when given; the file as
  a whole otherwise), with `text` as its message when given."""
  physical: dict[str, Any] = {"artifactLocation": _uri(path)}
  if line is not None:
    physical["region"] = {"startLine": line}
  found: dict[str, Any] = {"physicalLocation": physical}
  if text is not None:
    found["message"] = {"text": text}
  return found


def _result(entry: Finding, module: str, module_path: str) -> dict:
  here, other = finding_ends(entry)
  message = (
    f"{finding_sentence(entry, entry.fix)} Module {module} ({module_path})."
  )
  if here.path is not None and here.line is not None:
    locations = [location(here.path, here.line)]
  else:
    locations = [location(module_path, 1)]
  related = []
  if other.path is not None and other.line is not None and other is not here:
    related.append(
      {"id": 1, **location(other.path, other.line, f"`{other.name}`")}
    )
  key = "|".join(
    str(part)
    for site in (here, other)
    for part in (site.name, site.path, site.line, site.scope)
  )
  fingerprint = hashlib.sha256(f"{entry.code}|{key}".encode()).hexdigest()
  result: dict[str, Any] = {
    "ruleId": entry.code,
    "ruleIndex": RULE_INDEX[entry.code],
    "level": "error",
    "message": {"text": message},
    "locations": locations,
    "partialFingerprints": {"entangleJaxFinding/v1": fingerprint},
  }
  if related:
    result["relatedLocations"] = related
  return result


def _expected(result: dict[str, Any], expected: bool) -> dict[str, Any]:
  """`result`, suppressed in source when its module's test races on
  purpose (a control marked ``entangle_races_expected``): code scanning
  then shows no alert for it."""
  if expected:
    result["suppressions"] = [
      {
        "kind": "inSource",
        "justification": "a control that races on purpose (marked "
        "entangle_races_expected)",
      }
    ]
  return result


def _notification(level: str, text: str) -> dict:
  return {"level": level, "message": {"text": text}}


def as_sarif(run: Run) -> dict[str, Any]:
  """The SARIF log of `run`, as a dict."""
  rules = [
    {
      "id": kind.code,
      "name": kind.name,
      "shortDescription": {"text": kind.summary},
      "defaultConfiguration": {"level": "error"},
    }
    for kind in CAUSES
  ]
  driver: dict[str, Any] = {
    "name": "entangle-jax",
    "rules": rules,
  }
  version = tool_version()
  if version is not None:
    driver["version"] = version
  results = [
    _expected(_result(entry, result.module, result.path), result.expected)
    for result in run.racing
    for group in result.findings.groups
    for entry in group.entries
  ]
  notes = [
    _notification(
      "error",
      f"Module {r.module} ({r.path}) could not be checked: {r.unchecked}",
    )
    for r in run.unchecked
  ]
  for result in run.results:
    notes += [
      _notification("note", left_out_as_safe(result, safe))
      for safe in result.findings.left_out
    ]
  notes += [_notification("warning", n) for n in run.version_notes]
  notes += [_notification("note", n) for n in unseen_notes(run)]
  platform = platform_note(run)
  notes += [
    _notification("note", n)
    for n in (platform.splitlines() if platform else ())
  ]
  return log(driver, results, notes, successful=not run.unchecked)


def log(
  driver: dict[str, Any],
  results: list[dict[str, Any]],
  notes: list[dict[str, Any]],
  *,
  successful: bool,
) -> dict[str, Any]:
  """A SARIF log of one run of `driver` (the tool and its rules): its
  `results`, and its notifications `notes` on the one invocation
  (`successful`: whether it checked all it was given)."""
  invocation: dict[str, Any] = {"executionSuccessful": successful}
  if notes:
    invocation["toolExecutionNotifications"] = notes
  return {
    "$schema": SCHEMA,
    "version": VERSION,
    "runs": [
      {
        "tool": {"driver": driver},
        "invocations": [invocation],
        "results": results,
      }
    ],
  }


def render(run: Run | RankRun, options: Options | None = None) -> str:
  """`as_sarif` (or `ranks_as_sarif` for a cross-rank run) as text (`options`
  change nothing: the log holds it all)."""
  del options
  data = ranks_as_sarif(run) if isinstance(run, RankRun) else as_sarif(run)
  return json.dumps(data, indent=1)


# The cross-rank check ----------------------------------------------------


def _placed(finding: RankFinding) -> list[tuple[RankSite, str, int]]:
  """The sites of `finding` with a user line: (site, path, line)."""
  found = []
  for site in finding.sites:
    path, line = site.path, site.line
    if path is not None and line is not None:
      found.append((site, path, line))
  return found


def _rank_result(module: RankModule, finding: RankFinding) -> dict[str, Any]:
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
    "ruleIndex": RANK_RULE_INDEX[finding.code],
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


def ranks_as_sarif(run: RankRun) -> dict[str, Any]:
  """The SARIF log of a cross-rank run, as a dict."""
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
  results = [_rank_result(m, f) for m, f in run.findings]
  return log(driver, results, notes, successful=True)
