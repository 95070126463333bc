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
  unseen_notes,
)
from entangle_jax.testing._findings.causes import CAUSES
from entangle_jax.testing._findings.records import Finding, Run

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
VERSION = "2.1.0"
SOURCE_ROOT = "%SRCROOT%"
RULE_INDEX = {kind.code: index for index, kind in enumerate(CAUSES)}


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


def render(run: Run, options: Options | None = None) -> str:
  """`as_sarif` as text (`options` change nothing: the log holds it all)."""
  del options
  return json.dumps(as_sarif(run), indent=1)
