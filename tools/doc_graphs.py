"""Keeps the docs' demo graphs equal to `python -m entangle_jax.demo --graph`.

``python tools/doc_graphs.py`` rewrites docs/seeing_order.md's text between
the two markers with the demo's output from this checkout; ``--check`` only
compares, exiting 1 when they differ.
``tests/repository/doc_graphs_test.py`` and the docs build
(docs/_ext/entangle_docs.py) run the check when the jax version and
platform are those the page records.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "seeing_order.md"
BEGIN = "<!-- begin: python -m entangle_jax.demo --graph -->\n"
END = "<!-- end: python -m entangle_jax.demo --graph -->\n"
COMMAND = "`uv run python tools/doc_graphs.py`"
_RECORDED_WITH = re.compile(r"\(jax ([^,]+), (\w+)\):")


def generated() -> str:
  """The page's text between the markers, from a run of the demo now.

  Runs in the folder that holds the imported ``entangle_jax`` package (the
  repository root, or Bazel's runfiles tree), so that source locations read
  ``entangle_jax/...`` wherever the package was imported from.
  """
  import jax

  import entangle_jax
  from entangle_jax import demo

  package_parent = pathlib.Path(entangle_jax.__file__).parent.parent
  with contextlib.chdir(package_parent):
    graphs = demo.graphs()
  platform = jax.devices()[0].platform
  return (
    f"Output of `python -m entangle_jax.demo --graph` "
    f"(jax {jax.__version__}, {platform}):\n\n{graphs}"
  )


def recorded(page: str) -> str:
  """The page's text between the markers."""
  start, end = page.find(BEGIN), page.find(END)
  if start < 0 or end < start:
    raise ValueError(f"{PAGE.name} lacks the markers {BEGIN!r} ... {END!r}")
  return page[start + len(BEGIN) : end]


def recorded_with(page: str) -> tuple[str, str]:
  """The jax version and platform that the page's graphs came from."""
  match = _RECORDED_WITH.search(recorded(page))
  if match is None:
    raise ValueError(f"{PAGE.name}'s graphs do not say which jax made them")
  return match.group(1), match.group(2)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="only compare")
  args = parser.parse_args(argv)
  page = PAGE.read_text(encoding="utf-8")
  old, new = recorded(page), generated()
  if old == new:
    return 0
  if args.check:
    print(f"{PAGE.name}'s demo graphs are out of date: run", COMMAND)
    return 1
  PAGE.write_text(page.replace(BEGIN + old + END, BEGIN + new + END))
  print("updated", PAGE)
  return 0


if __name__ == "__main__":
  sys.exit(main())
