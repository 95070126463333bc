"""The GitHub emitter: one workflow-command annotation per reported entry,
on the user's line of the pair's second call, so that a pull request
shows the race where the code made it (as ruff's ``--output-format
github`` does for its findings).

Each line reads ``::error file=PATH,line=N,title=TITLE::MESSAGE``; an
entry whose calls recorded no user line is annotated without a file (it
shows on the run, not on a line). GitHub reads ``PATH`` relative to the
workspace: paths are shown as the text report shows them (relative to the
working directory when under it). Pairs that declared ``safe_pairs`` left
out get one ``::notice`` per module and entry, without a file: taken on
trust, they are said, not failed. A module the check could not answer
for gets one ``::error`` without a file, with the reason. A shipped
binding installed at a version entangle-jax's declarations do not cover,
whose calls are in the pairs, gets one ``::warning`` without a file
(`Run.version_notes`). Modules for a platform other than CPU get the text
report's platform note as a ``::notice`` without a file: it names the GPU
(``CUDA sm_90a``) and the runtime model the check applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from entangle_jax.testing._analysis.ops import Op
from entangle_jax.testing._report import race_text
from entangle_jax.testing._report.findings import Run

TITLE = "entangle-jax race"
SAFE_TITLE = "entangle-jax pairs left out as safe"
VERSION_TITLE = "entangle-jax declarations not applied"
UNCHECKED_TITLE = "entangle-jax module not checked"
PLATFORM_TITLE = "entangle-jax runtime model"
_LOCATION = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


def _escape_data(text: str) -> str:
  # The workflow-command syntax: %, CR and LF are escaped in a message.
  return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
  # ... and also : and , in a property's value.
  return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _place(op: Op) -> str:
  """``file=...,line=...,`` for `op`'s user line, or nothing."""
  found = _LOCATION.match(op.location or "")
  if found is None:
    return ""
  return f"file={_escape_property(found['file'])},line={found['line']},"


def annotations(run: Run) -> Iterator[str]:
  """The annotation lines for every racing module of `run`, every entry
  (pairs of the same two targets on the same two lines are one), then the
  safe pairs' notices and the version warnings."""
  for result in run.racing:
    for group in result.findings.groups:
      for entry in group.entries:
        race = entry.race
        here = race.second if race.second.location else race.first
        other = race.first if here is race.second else race.second
        times = len(entry.races)
        count = f" ({times} pairs on these lines)" if times > 1 else ""
        message = (
          f"{here.label()} ({here.access_text}) may run before or after "
          f"{other.label()} ({other.access_text}){count}: "
          f"{group.cause.headline}. Fix: {group.fix} "
          f"Module {result.module} ({result.path})."
        )
        yield (
          f"::error {_place(here)}title={_escape_property(TITLE)}::"
          f"{_escape_data(message)}"
        )
  for result in run.unchecked:
    message = (
      f"Module {result.module} ({result.path}) could not be checked: "
      f"{result.unchecked}"
    )
    yield (
      f"::error title={_escape_property(UNCHECKED_TITLE)}::"
      f"{_escape_data(message)}"
    )
  for result in run.results:
    for safe in result.findings.left_out:
      count = safe.count
      message = (
        f"{count} pair{'s' * (count != 1)} of calls that may conflict and "
        f"run in either order left out as safe by {safe}. Module "
        f"{result.module} ({result.path})."
      )
      yield (
        f"::notice title={_escape_property(SAFE_TITLE)}::"
        f"{_escape_data(message)}"
      )
  for note in run.version_notes:
    yield (
      f"::warning title={_escape_property(VERSION_TITLE)}::{_escape_data(note)}"
    )
  platform = race_text.platform_note(run)
  for note in platform.splitlines() if platform else ():
    yield (
      f"::notice title={_escape_property(PLATFORM_TITLE)}::{_escape_data(note)}"
    )
