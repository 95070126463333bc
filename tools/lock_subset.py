#!/usr/bin/env python3
"""Prints the part of a hashed lock that some packages need.

  python3 tools/lock_subset.py requirements.lock            # the test tools
  python3 tools/lock_subset.py requirements.lock jax pytest

With no package named: the project's dependencies and its `test` group
(pyproject.toml), the packages the installed-package suite
(INSTALLED_SUITE in tools/ci_lib.sh) imports. Prints, for
``pip install --require-hashes -r -``, each named package's entry and the
entries of everything it needs, read from the lock's ``# via`` comments
(which `uv export` writes), hashes and markers as the lock has them.

CI adds the test tools to each venv a README install route made (.ci/run,
tools/ci_bazel.sh, tools/check_release.sh): the whole lock, with the docs,
lint, bench and real-library groups, took twice the CPU of this part
(16 against 8 CPU-seconds a venv, 973 against 618 MB) for nothing the
suite uses. Bazel's default environment reads the lock the same way
(tools/bazel/python_env.bzl). Exits 2 naming a package the lock lacks.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def normalized(name: str) -> str:
  """A package name as the lock's ``# via`` comments spell it."""
  return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
  return normalized(
    re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]
  )


def entries(lock_text: str) -> list[tuple[str, list[str], list[str]]]:
  """The lock's entries in order: (name, lines, the packages that need it).

  Each entry is a requirement line, its hash lines and its ``# via``
  comment lines (one package there, or one a line after ``# via``)."""
  found: list[tuple[str, list[str], list[str]]] = []
  for line in lock_text.splitlines():
    stripped = line.strip()
    if line and not line[0].isspace() and not line.startswith("#"):
      found.append((_requirement_name(line), [line], []))
    elif not found or not stripped:
      continue
    elif stripped.startswith("--hash"):
      found[-1][1].append(line)
    elif stripped.startswith("# via "):
      found[-1][2].append(normalized(stripped[len("# via ") :]))
    elif stripped.startswith("#   "):
      found[-1][2].append(normalized(stripped[len("#   ") :]))
  return found


def subset(lock_text: str, wanted: list[str]) -> str:
  """The entries of `wanted` and of everything they need, in lock order.

  Raises KeyError naming the wanted packages the lock has no entry for."""
  table = entries(lock_text)
  names = {name for name, _, _ in table}
  chosen = {normalized(w) for w in wanted}
  missing = sorted(chosen - names)
  if missing:
    raise KeyError(", ".join(missing))
  while True:
    more = {
      name
      for name, _, needed_by in table
      if name not in chosen and chosen.intersection(needed_by)
    }
    if not more:
      break
    chosen |= more
  return "".join(
    "\n".join(lines) + "\n" for name, lines, _ in table if name in chosen
  )


def test_tools(pyproject: pathlib.Path = ROOT / "pyproject.toml") -> list[str]:
  """The project's dependencies and its `test` group, by name."""
  meta = tomllib.loads(pyproject.read_text())
  requirements = list(meta["project"]["dependencies"])
  requirements += [
    r for r in meta["dependency-groups"]["test"] if isinstance(r, str)
  ]
  return [_requirement_name(r) for r in requirements]


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("lock", type=pathlib.Path, help="a hashed lock")
  parser.add_argument(
    "packages",
    nargs="*",
    help="package names (default: the dependencies and the test group)",
  )
  args = parser.parse_args(argv)
  try:
    text = args.lock.read_text()
  except OSError as error:
    parser.error(f"cannot read the lock {args.lock}: {error.strerror}")
  try:
    sys.stdout.write(subset(text, args.packages or test_tools()))
  except KeyError as error:
    parser.error(f"{args.lock} has no entry for {error.args[0]}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
