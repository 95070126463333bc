#!/usr/bin/env python3
"""Copies the installed pybind11's headers into the build folder.

Usage (meson.build runs it when it configures):
  pybind11_headers.py DEST MINIMUM   prints DEST/include, holding pybind11/*.h

The extensions are compiled against the copy, not against the installed
package, because an editable install's build folder outlives the
environment it was configured in: pip builds in an isolated environment
that it deletes afterwards, and every later rebuild on import (the editable
loader runs ninja) would look for headers there. The copy is refreshed
whenever pybind11 is importable; when it is not (meson regenerating the
build on import, after pip deleted its build environment), the copy already
there is kept. DEST/VERSION records the version copied.
"""

from __future__ import annotations

import pathlib
import shutil
import sys


def version_tuple(text: str) -> tuple[int, ...]:
  """The leading numeric parts of a version ("3.1.0" -> (3, 1, 0))."""
  parts = []
  for part in text.split("."):
    if not part.isdigit():
      break
    parts.append(int(part))
  return tuple(parts)


def copy_headers(dest: pathlib.Path, minimum: str) -> pathlib.Path:
  """Copies pybind11's include folder to DEST/include (replacing an older
  copy) and returns DEST/include. Raises SystemExit, naming the version or
  the folder, when pybind11 is older than `minimum`, or when it cannot be
  imported and DEST holds no copy."""
  include = dest / "include"
  recorded = dest / "VERSION"
  try:
    import pybind11
  except ImportError:
    if (include / "pybind11" / "pybind11.h").is_file():
      return include
    raise SystemExit(
      f"pybind11 cannot be imported by {sys.executable}, and {dest} holds "
      "no copy of its headers: install the build requirements "
      "(pyproject.toml's [build-system] requires) first"
    ) from None
  version = pybind11.__version__
  if version_tuple(version) < version_tuple(minimum):
    raise SystemExit(
      f"pybind11 {version} at {pybind11.get_include()} is older than "
      f"{minimum}, the oldest this build supports"
    )
  same = recorded.is_file() and recorded.read_text().strip() == version
  if same and (include / "pybind11" / "pybind11.h").is_file():
    return include
  # A fresh copy, so that no header of an older version stays behind.
  staging = dest / "include.new"
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(pybind11.get_include(), staging)
  shutil.rmtree(include, ignore_errors=True)
  staging.rename(include)
  recorded.write_text(version + "\n")
  return include


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print("usage: pybind11_headers.py DEST MINIMUM", file=sys.stderr)
    return 2
  dest = pathlib.Path(argv[0])
  dest.mkdir(parents=True, exist_ok=True)
  print(copy_headers(dest, argv[1]))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
