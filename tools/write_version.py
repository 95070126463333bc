"""Writes entangle_jax/_version.py from pyproject.toml's version.

Usage: write_version.py PYPROJECT TEMPLATE OUTPUT

pyproject.toml's [project] table is the one place the version is written;
meson.build runs this at configure time. TEMPLATE's `@VERSION@` is replaced
(Bazel fills the same template with the version it reads from pyproject.toml).
"""

import pathlib
import sys
import tomllib


def project_version(pyproject: pathlib.Path) -> str:
  """The static `version` of pyproject's [project] table.

  Raises:
    ValueError: the version is missing, dynamic or not a string.
  """
  project = tomllib.loads(pyproject.read_text())["project"]
  version = project.get("version")
  if not isinstance(version, str) or not version:
    raise ValueError(
      f"{pyproject}: [project] needs a static version string, got {version!r}"
    )
  return version


def main(argv: list[str]) -> None:
  if len(argv) != 3:
    sys.exit(__doc__)
  pyproject, template, output = map(pathlib.Path, argv)
  text = template.read_text()
  if "@VERSION@" not in text:
    sys.exit(f"{template}: no @VERSION@ placeholder")
  output.write_text(text.replace("@VERSION@", project_version(pyproject)))


if __name__ == "__main__":
  main(sys.argv[1:])
