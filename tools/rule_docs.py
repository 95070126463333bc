"""Keeps the generated tables of the docs equal to their code.

Each block sits between two markers on its page: on docs/proving_order.md
the rule table (`entangle_jax.testing._order.rules.markdown`), the library
kernels (`entangle_jax._src.targets.library_kernels.markdown`) and the
declaration keys (`entangle_jax._src.targets.table.markdown`); on
docs/finding_races.md the shipped declarations
(`entangle_jax._src.targets.shipped.markdown`) and the causes a report
gives, with their codes (`entangle_jax.testing._findings.causes.markdown`);
on docs/multi_process.md the cross-rank check's codes
(`entangle_jax.testing._findings.rank_findings.markdown`); on
docs/fixing_races.md the primitives `in_program_order` orders inside
(`entangle_jax._src.program_order.rules.registry.markdown`).
``python tools/rule_docs.py`` rewrites every block; ``--check`` only
compares, exiting 1 when one differs. The tests of each table run the
comparison (`block_text`).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable

from entangle_jax._src.program_order.rules import registry
from entangle_jax._src.targets import library_kernels as _library_kernels
from entangle_jax._src.targets import shipped, table
from entangle_jax.testing._findings import causes, rank_findings
from entangle_jax.testing._order import rules

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "proving_order.md"
COMMAND = "`uv run python tools/rule_docs.py`"

BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
  "rules": ("entangle_jax/testing/_order/rules.py", rules.markdown),
  "library kernels": (
    "entangle_jax/_src/targets/library_kernels.py",
    _library_kernels.markdown,
  ),
  "declarations": (
    "entangle_jax/_src/targets/table.py",
    table.markdown,
  ),
  "shipped declarations": (
    "entangle_jax/_src/targets/shipped.py",
    shipped.markdown,
  ),
  "causes": (
    "entangle_jax/testing/_findings/causes.py",
    causes.markdown,
  ),
  "rank codes": (
    "entangle_jax/testing/_findings/rank_findings.py",
    rank_findings.markdown,
  ),
  "supported primitives": (
    "entangle_jax/_src/program_order/rules/registry.py",
    registry.markdown,
  ),
}
"""Block name: (the source named in its opening marker, its generator)."""

PAGES: dict[str, pathlib.Path] = {
  "shipped declarations": ROOT / "docs" / "finding_races.md",
  "causes": ROOT / "docs" / "finding_races.md",
  "rank codes": ROOT / "docs" / "multi_process.md",
  "supported primitives": ROOT / "docs" / "fixing_races.md",
}
"""The blocks on a page other than `PAGE`, and their page."""


def _markers(block: str) -> tuple[str, str]:
  source, _ = BLOCKS[block]
  return f"<!-- {block}: {source} -->\n", f"<!-- /{block} -->"


def block_span(text: str, block: str) -> tuple[int, int]:
  """Where `block` sits in the page's `text` (start and end offsets)."""
  begin, end = _markers(block)
  start = text.index(begin) + len(begin)
  return start, text.index(end, start)


def block_text(text: str, block: str) -> str:
  """What the page's `text` holds in `block`."""
  start, end = block_span(text, block)
  return text[start:end]


def page_rules(text: str) -> tuple[int, int]:
  """Where the rule table sits in the page's `text`."""
  return block_span(text, "rules")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="only compare")
  args = parser.parse_args(argv)
  status = 0
  for page in dict.fromkeys([PAGE, *PAGES.values()]):
    blocks = [b for b in BLOCKS if PAGES.get(b, PAGE) == page]
    status = max(status, _update(page, blocks, check=args.check))
  return status


def _update(page: pathlib.Path, blocks: list[str], *, check: bool) -> int:
  text = page.read_text()
  stale = [b for b in blocks if block_text(text, b) != BLOCKS[b][1]()]
  if not stale:
    return 0
  if check:
    print(
      f"{page.name}: {', '.join(stale)} differ from the code; run {COMMAND}"
    )
    return 1
  for block in stale:
    start, end = block_span(text, block)
    text = text[:start] + BLOCKS[block][1]() + text[end:]
  page.write_text(text)
  print(f"updated {page}: {', '.join(stale)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
