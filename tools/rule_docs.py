"""Keeps the rules in docs/proving_order.md equal to the rule table.

``python tools/rule_docs.py`` rewrites the page's text between the two
markers with `entangle_jax.testing._order.rules.markdown()`; ``--check``
only compares, exiting 1 when they differ. ``tests/analysis/rule_table_test.py``
runs the comparison.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from entangle_jax.testing._order import rules

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "proving_order.md"
BEGIN = "<!-- rules: entangle_jax/testing/_order/rules.py -->\n"
END = "<!-- /rules -->"
COMMAND = "`uv run python tools/rule_docs.py`"


def page_rules(text: str) -> tuple[int, int]:
  """Where the rules sit in the page's `text` (start and end offsets)."""
  start = text.index(BEGIN) + len(BEGIN)
  return start, text.index(END, start)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="only compare")
  args = parser.parse_args(argv)
  text = PAGE.read_text()
  start, end = page_rules(text)
  if text[start:end] == rules.markdown():
    return 0
  if args.check:
    print(f"{PAGE.name}: the rules differ from the table; run {COMMAND}")
    return 1
  PAGE.write_text(text[:start] + rules.markdown() + text[end:])
  print(f"updated {PAGE}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
