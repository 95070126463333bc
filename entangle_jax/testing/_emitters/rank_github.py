"""The GitHub emitter of a cross-rank run (``--ranks --format github``):
one ``::error`` workflow-command annotation per finding, on the user's
line of its first rank's call that has one (without a file when none
does), titled with the kind; the message is one line: the code, every
rank's call with its ``file:line``, what differs, and the fix
(`sentences.rank_finding_sentence`). A proved module is no annotation."""

from __future__ import annotations

from collections.abc import Iterator

from entangle_jax.testing._emitters.github import escape_data, escape_property
from entangle_jax.testing._emitters.sentences import rank_finding_sentence
from entangle_jax.testing._findings.rank_findings import RankFinding, RankRun

TITLE = "entangle-jax across ranks"


def _place(finding: RankFinding) -> str:
  """``file=...,line=...,`` of the first site with a line, or nothing."""
  for site in finding.sites:
    if site.path is not None and site.line is not None:
      return f"file={escape_property(site.path)},line={site.line},"
  return ""


def annotations(run: RankRun) -> Iterator[str]:
  """The annotation lines, a finding each, in module order."""
  for _, finding in run.findings:
    title = f"{TITLE}: {finding.kind.verdict}"
    message = f"{finding.code}: {rank_finding_sentence(finding)}"
    yield (
      f"::error {_place(finding)}title={escape_property(title)}::"
      f"{escape_data(message)}"
    )


def render(run: RankRun) -> str:
  """The annotations, a line each (empty when every module is proved)."""
  return "\n".join(annotations(run))
