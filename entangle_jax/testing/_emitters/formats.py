"""The one table of report formats: every way in (the command's
``--format``, the pytest plugin's ``--entangle-format``,
``race_check(format=...)``) picks its emitter here, and every emitter has
one signature, ``render(run, options) -> str``, over the findings records
alone: a single-process run (`records.Run`) or a cross-rank one
(`rank_findings.RankRun`, ``--ranks``), each format writing both.

A new format is a module in this folder with a ``render`` of that
signature, and a row here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from entangle_jax.testing._emitters import github, json_report, sarif, text
from entangle_jax.testing._emitters.options import Options
from entangle_jax.testing._findings.rank_findings import RankRun
from entangle_jax.testing._findings.records import Run

Emitter = Callable[["Run | RankRun", "Options | None"], str]


@dataclasses.dataclass(frozen=True)
class Format:
  """One report format."""

  name: str
  render: Emitter
  help: str
  for_people: bool
  """Whether it is the text people read; a way in that writes another
  format says the run's summary line beside it."""
  suffix: str
  """The file name suffix for a report written to a file."""


FORMATS: dict[str, Format] = {
  f.name: f
  for f in (
    Format("text", text.render, "the report people read", True, ".txt"),
    Format("json", json_report.render, "every pair, as JSON", False, ".json"),
    Format(
      "github",
      github.render,
      "GitHub workflow-command annotations on the user's lines",
      False,
      ".txt",
    ),
    Format(
      "sarif",
      sarif.render,
      "SARIF 2.1.0, for GitHub code scanning",
      False,
      ".sarif",
    ),
  )
}
"""Every format, by name."""

NAMES: tuple[str, ...] = tuple(FORMATS)


def check_name(name: object, where: str) -> Format:
  """The format `name` names.

  Raises:
    ValueError: it names none (the message says which there are).
  """
  if not isinstance(name, str) or name not in FORMATS:
    raise ValueError(
      f"{where}: the format must be one of {', '.join(NAMES)}, not {name!r}"
    )
  return FORMATS[name]


def render(
  name: str, run: Run | RankRun, options: Options | None = None
) -> str:
  """`run` in format `name`."""
  return FORMATS[name].render(run, options)
