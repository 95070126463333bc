"""The GitHub emitter: one workflow-command annotation per finding, on the
user's line of the pair's second call, so that a pull request shows the
race where the code made it.

Each line reads ``::error file=PATH,line=N,title=TITLE::MESSAGE``, and the
message is one line: the cause's code, the two calls, the cause, and the
first step of its fix (the whole fix is in the text report). A finding
whose calls recorded no user line is annotated without a file (it shows
on the run, not on a line). GitHub reads ``PATH`` relative to the
workspace: paths are the ones the records hold (relative to the working
directory when under it). Pairs that declared ``safe_pairs`` left out get
one ``::notice`` per module and entry, without a file: taken on trust,
they are said, not failed. A module the check could not answer for gets
one ``::error`` without a file, with the reason. A shipped binding
installed at a version entangle-jax's declarations do not cover, whose
calls are in the pairs, gets one ``::warning`` without a file
(`Run.version_notes`). Modules for a platform other than CPU get the
platform note as a ``::notice`` without a file: it names the GPU (``CUDA
sm_90a``) and the runtime model the check applied.

A cross-rank run (``--ranks``) gets one ``::error`` per finding, on the
user's line of its first rank's call that has one (without a file when
none does), titled with the kind; the message is one line: the code,
every rank's call with its ``file:line``, what differs, and the fix
(`sentences.rank_finding_sentence`). A proved module is no annotation.
"""

from __future__ import annotations

from collections.abc import Iterator

from entangle_jax._src import reason_words
from entangle_jax.testing._emitters.options import Options
from entangle_jax.testing._emitters.sentences import (
  finding_ends,
  finding_sentence,
  left_out_as_safe,
  platform_note,
  rank_finding_sentence,
)
from entangle_jax.testing._findings.rank_findings import RankFinding, RankRun
from entangle_jax.testing._findings.records import ReportedCall, Run

TITLE = "entangle-jax race"
SAFE_TITLE = f"entangle-jax pairs {reason_words.LEFT_OUT}"
VERSION_TITLE = "entangle-jax declarations not applied"
EXPECTED_TITLE = "entangle-jax race (expected: a control)"
UNCHECKED_TITLE = "entangle-jax module not checked"
PLATFORM_TITLE = "entangle-jax runtime model"
RANKS_TITLE = "entangle-jax across ranks"


def escape_data(text: str) -> str:
  """`text` as a workflow command's message: %, CR and LF escaped (the
  syntax's rule)."""
  return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
  """`text` as a property's value: as `escape_data`, and : and , too."""
  return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _place(site: ReportedCall) -> str:
  """``file=...,line=...,`` for the call's user line, or nothing."""
  if site.path is None or site.line is None:
    return ""
  return f"file={escape_property(site.path)},line={site.line},"


def annotations(run: Run) -> Iterator[str]:
  """The annotation lines for every racing module of `run`, every finding
  (pairs of the same two targets on the same two lines are one), then the
  modules not checked, the safe pairs' notices, the version warnings and
  the platform notes."""
  for result in run.racing:
    for group in result.findings.groups:
      for entry in group.entries:
        here, _ = finding_ends(entry)
        message = f"{entry.code}: {finding_sentence(entry, entry.steps[0])}"
        # A control that races on purpose is a notice, not an error.
        kind, title = (
          ("notice", EXPECTED_TITLE) if result.expected else ("error", TITLE)
        )
        yield (
          f"::{kind} {_place(here)}title={escape_property(title)}::"
          f"{escape_data(message)}"
        )
  for result in run.unchecked:
    message = (
      f"Module {result.module} ({result.path}) could not be checked: "
      f"{result.unchecked}"
    )
    yield (
      f"::error title={escape_property(UNCHECKED_TITLE)}::"
      f"{escape_data(message)}"
    )
  for result in run.results:
    for safe in result.findings.left_out:
      message = left_out_as_safe(result, safe)
      yield (
        f"::notice title={escape_property(SAFE_TITLE)}::{escape_data(message)}"
      )
  for note in run.version_notes:
    yield (
      f"::warning title={escape_property(VERSION_TITLE)}::{escape_data(note)}"
    )
  platform = platform_note(run)
  for note in platform.splitlines() if platform else ():
    yield (
      f"::notice title={escape_property(PLATFORM_TITLE)}::{escape_data(note)}"
    )


def render(run: Run | RankRun, options: Options | None = None) -> str:
  """The annotations, a line each (`options` change nothing): a cross-rank
  run's are `rank_annotations` (none when every module is proved)."""
  del options
  if isinstance(run, RankRun):
    return "\n".join(rank_annotations(run))
  return "\n".join(annotations(run))


# The cross-rank check ----------------------------------------------------


def _rank_place(finding: RankFinding) -> str:
  """``file=...,line=...,`` of the first site with a line, or nothing."""
  for site in finding.sites:
    if site.path is not None and site.line is not None:
      return f"file={escape_property(site.path)},line={site.line},"
  return ""


def rank_annotations(run: RankRun) -> Iterator[str]:
  """The annotation lines of a cross-rank run, a finding each, in module
  order."""
  for _, finding in run.findings:
    title = f"{RANKS_TITLE}: {finding.kind.verdict}"
    message = f"{finding.code}: {rank_finding_sentence(finding)}"
    yield (
      f"::error {_rank_place(finding)}title={escape_property(title)}::"
      f"{escape_data(message)}"
    )
