"""The table of a cross-rank run's report formats (``--ranks
--format``): the same names as the single-process check's
(`formats.NAMES`), each an emitter ``render(run) -> str`` over the
cross-rank findings records (`rank_findings.RankRun`) alone."""

from __future__ import annotations

from collections.abc import Callable

from entangle_jax.testing._emitters import (
  rank_github,
  rank_json,
  rank_sarif,
  rank_text,
)
from entangle_jax.testing._findings.rank_findings import RankRun

RankEmitter = Callable[[RankRun], str]

EMITTERS: dict[str, RankEmitter] = {
  "text": rank_text.render,
  "json": rank_json.render,
  "github": rank_github.render,
  "sarif": rank_sarif.render,
}
"""Every format, by name: exactly `formats.NAMES`."""


def render(name: str, run: RankRun) -> str:
  """`run` in format `name` (one of `formats.NAMES`)."""
  return EMITTERS[name](run)
