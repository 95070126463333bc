"""The sanitizer's report as JSON and as SARIF 2.1.0: the same findings
as its text (`session.format_seen`), each race with both calls (where
they ran: file:line, thread, device, times), the static check's line for
the pair and, where the static check reports it, its cause's code and
fix, as the static report gives them for that pair.

* JSON: one object; ``races`` lists every race, each with ``first``,
  ``second`` (and ``then`` for an interleaved write) and ``static``:
  ``finding`` (the static check's line, null where the user's module is
  not at hand), ``code``, ``cause``, ``fix`` and ``fix_steps`` (null and
  empty where the static check reports no such pair). The rest of the
  report (contradictions, places not compared, calls not recorded) is
  there too.
* SARIF: one run whose driver lists the static check's causes and one
  rule per kind of run-time race (``sanitizer/<kind>``); one result per
  race, at the second call's file and line, the other calls as related
  locations, its message the text report's words, its ``properties``
  the static check's ``finding``, ``code`` and ``fix``. Contradictions
  are results of rule ``sanitizer/contradiction``; what was not compared
  goes into the invocation's notifications.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from entangle_jax.testing._emitters import sarif
from entangle_jax.testing._findings.causes import CAUSES
from entangle_jax.testing._sanitize import checks

Seen = Any
"""A `session.Seen` (session imports this module, so it is not named
here, even for type hints: the layers allow no cycle)."""

if TYPE_CHECKING:
  from entangle_jax.testing._sanitize.calls import SanitizedCall
  from entangle_jax.testing._sanitize.checks import SanitizerRace

FORMATS = ("text", "json", "sarif")
"""The forms `Seen.report` writes."""

KINDS = {
  checks.OVERLAP: "two calls on one object, one a write, ran at the same time",
  checks.OUT_OF_ORDER: (
    "in one execution, a call returned before the call the program made "
    "before it began"
  ),
  checks.INTERLEAVED: (
    "a write of another execution ran between two calls of one execution "
    "on one object"
  ),
  checks.MERGED: (
    "XLA moved a call out of its loop or merged its calls, so they cannot "
    "keep the program's order"
  ),
}
"""Each kind of run-time race, described (the SARIF rules)."""

CONTRADICTION = "contradiction"


def check_format(name: str) -> str:
  """`name` when it is one of `FORMATS`; else ValueError naming it."""
  if name not in FORMATS:
    raise ValueError(
      f"Seen.report: format {name!r} is not one of {', '.join(FORMATS)}"
    )
  return name


def _where(call: SanitizedCall) -> tuple[str | None, int | None]:
  """The user's file and line of `call` (None, None where not known)."""
  source = call.site.source if call.site is not None else ""
  path, _, line = source.rpartition(":")
  if not path or not line.isdigit():
    return None, None
  return path, int(line)


def _call(call: SanitizedCall) -> dict[str, Any]:
  path, line = _where(call)
  return {
    "target": call.target,
    "function": call.function,
    "label": call.label,
    "location": f"{path}:{line}" if path is not None else None,
    "path": path,
    "line": line,
    "platform": call.platform,
    "device": call.device if call.device >= 0 else None,
    "thread": call.thread,
    "start_ns": call.start_ns,
    "end_ns": call.end_ns,
    "run_id": call.run_id,
    "place": call.place,
  }


def _static(seen: Seen, race: SanitizerRace) -> dict[str, Any]:
  """The static check's word on `race`'s pair: its line and, where it
  reports the pair, the cause and fix its report gives."""
  cause = seen.static_cause(race)
  return {
    "finding": seen.static_finding(race),
    "code": cause.code if cause is not None else None,
    "cause": cause.headline if cause is not None else None,
    "fix": cause.fix if cause is not None else None,
    "fix_steps": list(cause.steps) if cause is not None else [],
  }


def _race(seen: Seen, race: SanitizerRace, words: str) -> dict[str, Any]:
  return {
    "kind": race.kind,
    "object": words,
    "first": _call(race.first),
    "second": _call(race.second),
    "then": _call(race.then) if race.then is not None else None,
    "runs": list(race.runs) if race.runs is not None else None,
    "static": _static(seen, race),
  }


def as_json(seen: Seen, headline: str, objects: list[str]) -> dict[str, Any]:
  """The JSON form of `seen` (`headline`: the text's first line;
  `objects`: each race's object in the text's words)."""
  return {
    "summary": headline,
    "calls": len(seen.calls),
    "races": [
      _race(seen, race, words)
      for race, words in zip(seen.races, objects, strict=True)
    ],
    "contradictions": [
      {
        "object": str(c.object),
        "declaration": c.declaration,
        "first": _call(c.first),
        "second": _call(c.second),
      }
      for c in seen.contradictions
    ],
    "not_compared": [{"pair": str(u), "calls": u.calls} for u in seen.unpaired],
    "host_callbacks_not_placed": dict(seen.unknown_runs_why),
    "not_observed": list(seen.not_observed),
    "taken_as_touching_anything": dict(seen.anything),
    "unknown_places": seen.unknown_places,
    "dropped": seen.dropped,
    "hangs": list(seen.hangs),
  }


def _related(calls: list[SanitizedCall]) -> list[dict[str, Any]]:
  out = []
  for call in calls:
    path, line = _where(call)
    if path is not None:
      out.append(
        {"id": len(out) + 1, **sarif.location(path, line, f"`{call.label}`")}
      )
  return out


def _result(
  rule: str, message: str, calls: list[SanitizedCall], properties: dict
) -> dict[str, Any]:
  """A SARIF result at the file and line of the last of `calls` that has
  one, the others related."""
  placed = [c for c in calls if _where(c)[0] is not None]
  here = placed[-1] if placed else None
  result: dict[str, Any] = {
    "ruleId": rule,
    "ruleIndex": _RULE_INDEX[rule],
    "level": "error",
    "message": {"text": message},
  }
  if here is not None:
    path, line = _where(here)
    assert path is not None
    result["locations"] = [sarif.location(path, line)]
    related = _related([c for c in calls if c is not here])
    if related:
      result["relatedLocations"] = related
  key = "|".join(f"{c.label}@{c.site and c.site.source}" for c in calls)
  digest = hashlib.sha256(f"{rule}|{key}".encode()).hexdigest()
  result["partialFingerprints"] = {"entangleJaxSanitizer/v1": digest}
  result["properties"] = properties
  return result


def _sanitizer_rules() -> list[dict[str, Any]]:
  rules = [
    {
      "id": f"sanitizer/{kind.replace(' ', '-')}",
      "name": f"SanitizerRace{kind.title().replace(' ', '')}",
      "shortDescription": {"text": text},
      "defaultConfiguration": {"level": "error"},
    }
    for kind, text in KINDS.items()
  ]
  rules.append(
    {
      "id": f"sanitizer/{CONTRADICTION}",
      "name": "SanitizerContradiction",
      "shortDescription": {
        "text": "calls the declarations call distinct named one object"
      },
      "defaultConfiguration": {"level": "error"},
    }
  )
  return rules


def _rules() -> list[dict[str, Any]]:
  """The static check's causes, then the sanitizer's own rules."""
  return [
    *(
      {
        "id": kind.code,
        "name": kind.name,
        "shortDescription": {"text": kind.summary},
        "defaultConfiguration": {"level": "error"},
      }
      for kind in CAUSES
    ),
    *_sanitizer_rules(),
  ]


_RULE_INDEX = {rule["id"]: k for k, rule in enumerate(_rules())}


def as_sarif(
  seen: Seen, objects: list[str], messages: list[str], notes: list[str]
) -> dict[str, Any]:
  """The SARIF form of `seen` (`objects`: each race's object in the
  text's words; `messages`: each race's lines of the text report, joined;
  `notes`: the text's lines on what was not compared or recorded)."""
  driver: dict[str, Any] = {"name": "entangle-jax sanitizer", "rules": _rules()}
  version = sarif.tool_version()
  if version is not None:
    driver["version"] = version
  results = []
  for race, words, message in zip(seen.races, objects, messages, strict=True):
    calls = [race.first, race.second]
    if race.then is not None:
      calls.append(race.then)
    static = _static(seen, race)
    properties = {"kind": race.kind, "object": words, **static}
    rule = f"sanitizer/{race.kind.replace(' ', '-')}"
    results.append(_result(rule, message, calls, properties))
  for c in seen.contradictions:
    calls = [c.first] if c.second is c.first else [c.first, c.second]
    results.append(
      _result(
        f"sanitizer/{CONTRADICTION}",
        f"contradiction on {c.object}: {c.declaration}",
        calls,
        {"object": str(c.object), "declaration": c.declaration},
      )
    )
  notifications = [{"level": "warning", "message": {"text": n}} for n in notes]
  return sarif.log(driver, results, notifications, successful=not seen.dropped)


def render(seen: Seen, name: str, text_parts: dict[str, Any]) -> str:
  """`seen` in form `name` (`FORMATS`; the text is `text_parts["text"]`),
  from the text report's parts (`session.format_parts`)."""
  if name == "text":
    return text_parts["text"]
  if name == "json":
    found = as_json(seen, text_parts["headline"], text_parts["objects"])
  else:
    found = as_sarif(
      seen, text_parts["objects"], text_parts["races"], text_parts["notes"]
    )
  return json.dumps(found, indent=1)
