"""Keeps README.md's demo graphs equal to `python -m entangle_jax.demo --graph`.

``python tools/readme_graphs.py`` rewrites the README's text between the two
markers with the demo's output from this checkout; ``--check`` only compares,
exiting 1 when they differ. ``tests/readme_graphs_test.py`` runs the check when
the jax version and platform are those the README records.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN = "<!-- begin: python -m entangle_jax.demo --graph -->\n"
END = "<!-- end: python -m entangle_jax.demo --graph -->\n"
_COMMAND = "`uv run python tools/readme_graphs.py`"
_RECORDED_WITH = re.compile(r"\(jax ([^,]+), (\w+)\):")


def generated() -> str:
  """The README's text between the markers, from a run of the demo now.

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


def recorded(readme: str) -> str:
  """The README's text between the markers."""
  start, end = readme.find(BEGIN), readme.find(END)
  if start < 0 or end < start:
    raise ValueError(f"README.md lacks the markers {BEGIN!r} ... {END!r}")
  return readme[start + len(BEGIN) : end]


def recorded_with(readme: str) -> tuple[str, str]:
  """The jax version and platform that the README's graphs came from."""
  match = _RECORDED_WITH.search(recorded(readme))
  if match is None:
    raise ValueError("README.md's graphs do not say which jax made them")
  return match.group(1), match.group(2)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="only compare")
  args = parser.parse_args(argv)
  readme = README.read_text(encoding="utf-8")
  old, new = recorded(readme), generated()
  if old == new:
    return 0
  if args.check:
    print("README.md's demo graphs are out of date: run", _COMMAND)
    return 1
  README.write_text(readme.replace(BEGIN + old + END, BEGIN + new + END))
  print("updated", README)
  return 0


if __name__ == "__main__":
  sys.exit(main())
